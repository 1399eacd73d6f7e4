# How the control plane's components are started and checked; sourced by cluster-up.sh and
# restart.sh after lib.sh, never run.

START_TIMEOUT=${START_TIMEOUT:-90}
PID_DIR=$CLUSTER_DIR/pids

components=(etcd kube-apiserver kube-controller-manager kwok)

alive() { [[ -f "$PID_DIR/$1.pid" ]] && kill -0 "$(cat "$PID_DIR/$1.pid")" 2>/dev/null; }

all_alive() {
  local c
  for c in "${components[@]}"; do alive "$c" || return 1; done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start NAME ARGS...: runs a component in its own session so that cluster-down can stop it and
# everything it spawned.
start() {
  local name=$1; shift
  setsid "$@" >"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$PID_DIR/$name.pid"
}

# wait_healthy NAME CHECK...: waits until CHECK succeeds; fails naming the log when the
# component dies or is not healthy within START_TIMEOUT seconds.
wait_healthy() {
  local name=$1; shift
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  until "$@" >/dev/null 2>&1; do
    if ! alive "$name"; then
      tail -n 20 "$LOG_DIR/$name.log" >&2 || true
      die "$name exited during start-up; read $LOG_DIR/$name.log"
    fi
    if (( $(date +%s) > deadline )); then
      tail -n 20 "$LOG_DIR/$name.log" >&2 || true
      die "$name was not healthy within ${START_TIMEOUT}s; read $LOG_DIR/$name.log"
    fi
    sleep 0.2
  done
}

# start_etcd: starts etcd on 127.0.0.1:$ETCD_CLIENT_PORT (data in $(etcd_data_dir)) and waits
# until it is healthy.
start_etcd() {
  start etcd "$BIN_DIR/etcd" --name local --data-dir "$(etcd_data_dir)" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync --quota-backend-bytes 8589934592 --log-level warn
  wait_healthy etcd curl -sf --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health"
}

apiserver_ready() {
  curl -sf --max-time 2 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
    "https://127.0.0.1:$APISERVER_PORT/readyz"
}

# start_apiserver: starts kube-apiserver on 127.0.0.1:$APISERVER_PORT and waits until it is ready.
# It runs the aggregation layer (a front proxy with its own CA), so that an extension API server
# on 127.0.0.1 (Kueue's visibility API, reached through an ExternalName Service) is served.
# A namespace's or a collection's pods are deleted by eight workers, not one (the default): one
# deletes about 100 pods a second here, 25 minutes for the 150,000 of a scale run; eight, 12.
# From 1.37 it serves the Workload API (scheduling.k8s.io/v1beta1 Workloads and PodGroups, and
# pods' spec.schedulingGroup), beta and off by default, as a cluster that runs gangs does; 1.36
# has only an alpha v1alpha2 of it, which tether does not serve, and runs with its defaults.
# From 1.37 also a PodGroup's own ResourceClaims (DRAWorkloadResourceClaims, beta and off by
# default: without it kube-apiserver drops spec.resourceClaims, and kube-controller-manager,
# which needs the gate too, cannot read PodGroups). From 1.38 also topology-aware placement
# (PodGroups' schedulingConstraints).
start_apiserver() {
  local workload_api=(--feature-gates GenericWorkload=true,DRAWorkloadResourceClaims=true
    --runtime-config scheduling.k8s.io/v1beta1=true)
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  if (( minor < 37 )); then workload_api=(); fi
  # From 1.38 a PodGroup may also name a topology key (TopologyAwareWorkloadScheduling, beta
  # and off by default there): without the gate kube-apiserver drops the field. And groups may
  # form a hierarchy under CompositePodGroups (CompositePodGroup, beta and off by default; it
  # needs the other two).
  if (( minor >= 38 )); then
    workload_api=(--feature-gates GenericWorkload=true,DRAWorkloadResourceClaims=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true
      --runtime-config scheduling.k8s.io/v1beta1=true)
  fi
  start kube-apiserver "$BIN_DIR/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI_DIR/apiserver.crt" --tls-private-key-file "$PKI_DIR/apiserver.key" \
    --client-ca-file "$PKI_DIR/ca.crt" \
    --kubelet-certificate-authority "$PKI_DIR/ca.crt" --kubelet-preferred-address-types InternalIP \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI_DIR/sa.pub" --service-account-signing-key-file "$PKI_DIR/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --authorization-mode RBAC \
    --endpoint-reconciler-type none --allow-privileged \
    --requestheader-client-ca-file "$PKI_DIR/front-proxy-ca.crt" \
    --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI_DIR/front-proxy-client.crt" \
    --proxy-client-key-file "$PKI_DIR/front-proxy-client.key" \
    --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 --profiling=false \
    --delete-collection-workers 8 \
    "${workload_api[@]}"
  wait_healthy kube-apiserver apiserver_ready
}
