#!/usr/bin/env bash
# The StickyNode part of `make demo`: a StatefulSet's pod is deleted three times and comes
# back to its node each time; the StickyBindings show the history.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

KUBECTL="$BIN_DIR/kubectl --kubeconfig=$CLUSTER_DIR/kubeconfig"

# The node pod $1 is bound to, once a pod of that name exists and is bound (60s at most).
bound_node() {
  local deadline=$(( $(date +%s) + 60 )) node
  until node=$($KUBECTL get pod "$1" -o 'jsonpath={.spec.nodeName}' 2>/dev/null) && [[ -n $node ]]; do
    (( $(date +%s) > deadline )) && die "pod $1 was not bound within 60s; read $LOG_DIR/tether.log"
    sleep 0.2
  done
  echo "$node"
}

$KUBECTL apply -f "$REPO_DIR/config/examples/demo-statefulset.yaml" >/dev/null
first=$(bound_node demo-db-0)
bound_node demo-db-1 >/dev/null
log "demo-db-0 first ran on $first"
for i in 1 2 3; do
  uid=$($KUBECTL get pod demo-db-0 -o 'jsonpath={.metadata.uid}')
  $KUBECTL delete pod demo-db-0 --wait=true >/dev/null
  deadline=$(( $(date +%s) + 60 ))
  until new=$($KUBECTL get pod demo-db-0 -o 'jsonpath={.metadata.uid}' 2>/dev/null) && [[ -n $new && $new != "$uid" ]]; do
    (( $(date +%s) > deadline )) && die "demo-db-0 was not recreated within 60s"
    sleep 0.2
  done
  log "deleted demo-db-0 ($i): back on $(bound_node demo-db-0)"
done
echo
$KUBECTL get pods -o wide -l app=demo-db
echo
# The history is written right after each bind; give the last one a moment to land.
deadline=$(( $(date +%s) + 30 ))
until [[ $($KUBECTL get sb statefulset-demo-db-0 -o 'jsonpath={.status.scheduleCount}' 2>/dev/null) -ge 4 ]]; do
  (( $(date +%s) > deadline )) && die "statefulset-demo-db-0 did not record 4 binds; read $LOG_DIR/tether.log"
  sleep 0.2
done
$KUBECTL get stickybindings
