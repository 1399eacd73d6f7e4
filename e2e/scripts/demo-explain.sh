#!/usr/bin/env bash
# The last part of `make demo`: `kubectl tether explain` on one of the demo's pods, with nothing
# but the kubeconfig: the command makes an ExplainRequest as you, the leader answers it for you
# (after checking you may get the pod and list the nodes), and the command prints the answer and
# deletes the request. The tether binary is on the PATH as kubectl-tether, a kubectl plugin.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TETHER_BIN=${TETHER_BIN:-$REPO_DIR/target/release/tether}
KUBECTL="$BIN_DIR/kubectl --kubeconfig=$CLUSTER_DIR/kubeconfig"

mkdir -p "$CLUSTER_DIR/bin"
ln -sf "$TETHER_BIN" "$CLUSTER_DIR/bin/kubectl-tether"
pod=$($KUBECTL get pods -l app=demo-web -o 'jsonpath={.items[0].metadata.name}')
[[ -n $pod ]] || die "no demo-web pod to explain"
log "why did $pod land where it did? (kubectl tether explain default/$pod)"
# kubectl takes no flags before a plugin's name: the kubeconfig comes from KUBECONFIG.
KUBECONFIG=$CLUSTER_DIR/kubeconfig PATH="$CLUSTER_DIR/bin:$PATH" "$BIN_DIR/kubectl" tether explain "default/$pod"
