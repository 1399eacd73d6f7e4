#!/usr/bin/env bash
# `make demo-kueue`: batch through queues with quotas, the rest through default logic, on the
# local control plane. Kueue admits (two Jobs against a 2-CPU ClusterQueue: one runs, one
# waits suspended; a pod in the queue stays gated), tether places what Kueue admitted, and a
# pod outside the queue is placed at once by tether's default profile. Then `kubectl tether
# explain` on the gated pod says which queue and which quota hold it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TETHER_BIN=${TETHER_BIN:-$REPO_DIR/target/release/tether}
TETHER_HTTP_PORT=${TETHER_HTTP_PORT:-18080}
KUBECTL="$BIN_DIR/kubectl --kubeconfig=$CLUSTER_DIR/kubeconfig"

"$E2E_DIR/scripts/kueue-up.sh"
$KUBECTL apply -f "$REPO_DIR/config/samples/default.yaml" >/dev/null
$KUBECTL apply -f "$REPO_DIR/config/examples/kueue-batch.yaml" >/dev/null
$KUBECTL wait --for=condition=Ready --timeout=60s schedulingprofile/batch >/dev/null \
  || die "the SchedulingProfile batch did not become Ready; read $LOG_DIR/tether.log"
$KUBECTL wait --for=condition=NamespaceDefaulting --timeout=60s schedulingprofile/batch >/dev/null \
  || die "the profile's admission policy is not in force; read $LOG_DIR/tether.log"
# The API server applies the profile's admission policy a moment after its write.
deadline=$(( $(date +%s) + 60 ))
until [[ $($KUBECTL run probe -n batch-demo --image=pause --dry-run=server -o 'jsonpath={.spec.schedulerName}' 2>/dev/null) == tether-batch ]]; do
  (( $(date +%s) > deadline )) && die "pods of batch-demo are not given tether-batch"
  sleep 0.5
done
$KUBECTL apply -f "$REPO_DIR/config/examples/kueue-jobs.yaml" >/dev/null
$KUBECTL run outside-the-queue --image=pause --overrides='{"spec":{"schedulerName":"tether-scheduler"}}' \
  --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null

deadline=$(( $(date +%s) + 90 ))
until [[ $($KUBECTL get pods -n batch-demo -l batch.kubernetes.io/job-name=train-1 \
  -o 'jsonpath={range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c .) == 4 ]]; do
  (( $(date +%s) > deadline )) && die "train-1's pods were not all placed; read $LOG_DIR/tether.log and $LOG_DIR/kueue.log"
  sleep 0.5
done
$KUBECTL wait --for=jsonpath='{.spec.nodeName}' --timeout=60s pod/outside-the-queue >/dev/null 2>&1 || true

# Kueue writes its ClusterQueue's figures a moment after its verdicts: train-2 and the
# notebook pending.
$KUBECTL wait --for=jsonpath='{.status.pendingWorkloads}'=2 --timeout=60s clusterqueue/team-a >/dev/null \
  || die "Kueue did not report two pending workloads; read $LOG_DIR/kueue.log"
log "Kueue's verdicts (kubectl get workloads.kueue.x-k8s.io -n batch-demo)"
$KUBECTL get workloads.kueue.x-k8s.io -n batch-demo
echo
log "the Jobs: train-1 admitted and running, train-2 suspended by Kueue"
$KUBECTL get jobs -n batch-demo -o custom-columns=JOB:.metadata.name,SUSPENDED:.spec.suspend,ACTIVE:.status.active
echo
log "the pods: placed by tether-batch where Kueue admitted them; the notebook gated; the pod outside the queue placed by tether-scheduler"
$KUBECTL get pods -A -o custom-columns=NAMESPACE:.metadata.namespace,POD:.metadata.name,SCHEDULER:.spec.schedulerName,NODE:.spec.nodeName,GATES:.spec.schedulingGates[*].name \
  --field-selector metadata.namespace!=kube-system | grep -E '^(NAMESPACE|batch-demo|default +outside)'
echo

$KUBECTL create serviceaccount demo-viewer --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null
$KUBECTL create clusterrolebinding demo-viewer --clusterrole=tether-explainer \
  --serviceaccount=default:demo-viewer --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null
$KUBECTL create clusterrole demo-kueue-viewer --verb=get,list \
  --resource=workloads.kueue.x-k8s.io,localqueues.kueue.x-k8s.io,clusterqueues.kueue.x-k8s.io \
  --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null
$KUBECTL create clusterrolebinding demo-kueue-viewer --clusterrole=demo-kueue-viewer \
  --serviceaccount=default:demo-viewer --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null
(umask 077; $KUBECTL create token demo-viewer --audience tether --duration 1h >"$CLUSTER_DIR/demo-viewer.token")
mkdir -p "$CLUSTER_DIR/bin"
ln -sf "$TETHER_BIN" "$CLUSTER_DIR/bin/kubectl-tether"
log "why does the notebook wait? (kubectl tether explain batch-demo/notebook)"
KUBECONFIG=$CLUSTER_DIR/kubeconfig PATH="$CLUSTER_DIR/bin:$PATH" "$BIN_DIR/kubectl" tether explain batch-demo/notebook \
  --endpoint "http://127.0.0.1:$TETHER_HTTP_PORT" --token-file "$CLUSTER_DIR/demo-viewer.token" | sed -n '1,12p'
