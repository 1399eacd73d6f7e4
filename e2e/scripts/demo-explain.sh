#!/usr/bin/env bash
# The last part of `make demo`: `kubectl tether explain` on one of the demo's pods. A
# ServiceAccount bound to deploy/'s tether-explainer role asks (tether checks its token and that
# it may get the pod and list the nodes); the tether binary is on the PATH as kubectl-tether, a kubectl plugin.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TETHER_BIN=${TETHER_BIN:-$REPO_DIR/target/release/tether}
TETHER_HTTP_PORT=${TETHER_HTTP_PORT:-18080}
KUBECTL="$BIN_DIR/kubectl --kubeconfig=$CLUSTER_DIR/kubeconfig"

$KUBECTL create serviceaccount demo-viewer --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null
$KUBECTL create clusterrolebinding demo-viewer --clusterrole=tether-explainer \
  --serviceaccount=default:demo-viewer --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null
# A token bound to tether's audience, in a file: no credential for the API server is handed on.
$KUBECTL create token demo-viewer --audience tether --duration 1h >"$CLUSTER_DIR/demo-viewer.token"
chmod 600 "$CLUSTER_DIR/demo-viewer.token"
mkdir -p "$CLUSTER_DIR/bin"
ln -sf "$TETHER_BIN" "$CLUSTER_DIR/bin/kubectl-tether"
pod=$($KUBECTL get pods -l app=demo-web -o 'jsonpath={.items[0].metadata.name}')
[[ -n $pod ]] || die "no demo-web pod to explain"
log "why did $pod land where it did? (kubectl tether explain default/$pod)"
# kubectl takes no flags before a plugin's name: the kubeconfig comes from KUBECONFIG.
KUBECONFIG=$CLUSTER_DIR/kubeconfig PATH="$CLUSTER_DIR/bin:$PATH" "$BIN_DIR/kubectl" tether explain "default/$pod" \
  --endpoint "http://127.0.0.1:$TETHER_HTTP_PORT" --token-file "$CLUSTER_DIR/demo-viewer.token"
