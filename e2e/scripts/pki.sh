#!/usr/bin/env bash
# Generates the local control plane's credentials into $PKI_DIR: a CA, the API server's serving
# certificate, kwok's serving certificate (it plays every node's kubelet, which the API server
# reaches for port-forward and checks against the CA), client certificates for the admin and
# kube-controller-manager, the aggregation layer's front-proxy CA and client certificate, and the
# service account signing key pair. Sourced by cluster-up.sh.

pki_client_cert() { # name CN O
  local name=$1 cn=$2 org=$3
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI_DIR/$name.key" -out "$PKI_DIR/$name.csr" \
    -subj "/O=$org/CN=$cn" 2>/dev/null
  openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" \
    -CAcreateserial -days 365 -out "$PKI_DIR/$name.crt" \
    -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') 2>/dev/null
}

pki_server_cert() { # name CN subjectAltNames
  local name=$1 cn=$2 sans=$3
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI_DIR/$name.key" -out "$PKI_DIR/$name.csr" \
    -subj "/CN=$cn" 2>/dev/null
  openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/ca.crt" -CAkey "$PKI_DIR/ca.key" \
    -CAcreateserial -days 365 -out "$PKI_DIR/$name.crt" \
    -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' "$sans") 2>/dev/null
}

# The aggregation layer's front proxy: its own CA (the requestheader CA an extension API server,
# Kueue's visibility server, trusts) and the client certificate kube-apiserver proxies with.
pki_front_proxy() {
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI_DIR/front-proxy-ca.key" \
    -out "$PKI_DIR/front-proxy-ca.crt" -days 365 -subj "/CN=tether-local-front-proxy-ca" 2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI_DIR/front-proxy-client.key" \
    -out "$PKI_DIR/front-proxy-client.csr" -subj "/CN=front-proxy-client" 2>/dev/null
  openssl x509 -req -in "$PKI_DIR/front-proxy-client.csr" -CA "$PKI_DIR/front-proxy-ca.crt" \
    -CAkey "$PKI_DIR/front-proxy-ca.key" -CAcreateserial -days 365 -out "$PKI_DIR/front-proxy-client.crt" \
    -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') 2>/dev/null
}

pki_generate() {
  mkdir -p "$PKI_DIR"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI_DIR/ca.key" -out "$PKI_DIR/ca.crt" \
    -days 365 -subj "/CN=tether-local-ca" 2>/dev/null
  pki_server_cert apiserver kube-apiserver \
    IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
  pki_server_cert kwok kwok-kubelet IP:127.0.0.1,DNS:localhost
  pki_client_cert admin kubernetes-admin system:masters
  pki_client_cert controller-manager system:kube-controller-manager system:kube-controller-manager
  pki_front_proxy
  openssl genrsa -out "$PKI_DIR/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null
}

# Writes a kubeconfig for one client certificate.
pki_kubeconfig() { # file user-cert-name
  local file=$1 name=$2
  cat >"$file" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: tether-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI_DIR/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 <"$PKI_DIR/$name.crt")
    client-key-data: $(base64 -w0 <"$PKI_DIR/$name.key")
contexts:
- name: tether-local
  context: {cluster: tether-local, user: $name}
current-context: tether-local
KCFG
}
