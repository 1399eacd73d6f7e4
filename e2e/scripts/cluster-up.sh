#!/usr/bin/env bash
# Starts the local control plane: etcd, kube-apiserver, kube-controller-manager and kwok, all on
# 127.0.0.1, then creates $NODES fake nodes and waits until they are Ready. Idempotent: a running
# cluster is left as it is (missing nodes are added). Writes .cluster/kubeconfig.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$E2E_DIR/scripts/pki.sh"
source "$E2E_DIR/scripts/components.sh"

NODES=${NODES:-3}
KUBECONFIG_FILE=$CLUSTER_DIR/kubeconfig
KUBECTL="$BIN_DIR/kubectl --kubeconfig=$KUBECONFIG_FILE"

apply_nodes() {
  local i zones=(a b c) manifest=""
  for (( i = 0; i < NODES; i++ )); do
    manifest+="---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: \"0\"
  labels:
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: kwok.standard
    topology.kubernetes.io/region: local
    topology.kubernetes.io/zone: zone-${zones[i % 3]}
    type: kwok
status:
  allocatable: {cpu: \"16\", memory: 64Gi, pods: \"110\", ephemeral-storage: 100Gi}
  capacity: {cpu: \"16\", memory: 64Gi, pods: \"110\", ephemeral-storage: 100Gi}
  nodeInfo: {architecture: amd64, operatingSystem: linux, kubeletVersion: $K8S_VERSION, kubeProxyVersion: $K8S_VERSION}
"
  done
  $KUBECTL apply -f - <<<"$manifest" >/dev/null
}

wait_nodes_ready() {
  local deadline=$(( $(date +%s) + START_TIMEOUT )) ready
  while :; do
    ready=$($KUBECTL get nodes -l type=kwok \
      -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null \
      | grep -c True || true)
    (( ready >= NODES )) && return 0
    alive kwok || die "kwok exited; read $LOG_DIR/kwok.log"
    (( $(date +%s) > deadline )) && die "only $ready of $NODES nodes Ready within ${START_TIMEOUT}s; read $LOG_DIR/kwok.log"
    sleep 0.2
  done
}

on_exit() {
  local status=$?
  if [[ $started_ok != true ]]; then
    log "start-up failed; stopping what was started (logs kept in $LOG_DIR)"
    "$E2E_DIR/scripts/cluster-down.sh" --keep-logs >/dev/null 2>&1 || true
  fi
  exit "$status"
}

# How long a kwok node's lease lasts; kwok renews it every quarter of that, and the node
# lifecycle controller calls a node gone after as long without a renewal. 40 s by default (a
# test that stops a node's heartbeats waits that long); a bench at thousands of nodes asks for
# more (make bench: 600 s), or the renewals alone (5,000 nodes / 10 s = 500 writes a second)
# keep etcd and the API server busy on this machine's two cores.
NODE_LEASE_SECONDS=${NODE_LEASE_SECONDS:-40}

main() {
  "$E2E_DIR/scripts/build-k8s.sh"
  local t0; t0=$(date +%s)

  if [[ -f "$KUBECONFIG_FILE" ]] && all_alive && apiserver_ready >/dev/null 2>&1; then
    log "the cluster is already running"
    apply_nodes
    wait_nodes_ready
    if [[ ${KUEUE:-0} == 1 ]]; then "$E2E_DIR/scripts/kueue-up.sh"; fi
    log "ready: export KUBECONFIG=$KUBECONFIG_FILE"
    return 0
  fi
  # Leftovers of a cluster that is no longer whole: stop them and start afresh.
  "$E2E_DIR/scripts/cluster-down.sh" >/dev/null 2>&1 || true

  local port
  for port in "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$KWOK_PORT"; do
    port_free "$port" || die "port 127.0.0.1:$port is taken by another process (see: ss -ltnp 'sport = :$port'); stop it or set the *_PORT variables in e2e/scripts/lib.sh"
  done

  mkdir -p "$LOG_DIR" "$PID_DIR"
  echo "$K8S_VERSION" >"$CLUSTER_DIR/k8s-version"
  if [[ ${ETCD_TMPFS:-0} == 1 ]]; then
    [[ -d /dev/shm && -w /dev/shm ]] || die "ETCD_TMPFS=1 needs a writable /dev/shm"
    mktemp -d /dev/shm/tether-etcd.XXXXXX >"$CLUSTER_DIR/etcd-data-dir"
    log "etcd's data in memory: $(etcd_data_dir)"
  else
    mkdir -p "$CLUSTER_DIR/etcd"
  fi
  # From here on, a failure or an interrupt stops whatever was started.
  started_ok=false
  trap 'on_exit' EXIT
  trap 'log "interrupted"; exit 130' INT TERM

  pki_generate
  pki_kubeconfig "$KUBECONFIG_FILE" admin
  pki_kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" controller-manager

  start_etcd
  start_apiserver
  # The cluster serves KubeVirt's VM API (the CRDs only; the e2e plays virt-controller) from the
  # start, as a KubeVirt cluster does: the garbage collector must know the kinds before any
  # object owned by a VMI exists, or it takes such objects for orphans and deletes them.
  # The same holds for e2e/fixtures (an owner kind tether does not know; scheduler-plugins'
  # PodGroup kind, for Coscheduling).
  $KUBECTL apply -f "$E2E_DIR/kubevirt/crds.yaml" -f "$E2E_DIR/fixtures/" >/dev/null
  $KUBECTL wait --for=condition=Established --timeout=60s \
    crd/virtualmachines.kubevirt.io crd/virtualmachineinstances.kubevirt.io \
    crd/widgets.example.tether.dev crd/widgetsets.example.tether.dev \
    crd/podgroups.scheduling.x-k8s.io >/dev/null \
    || die "the fixture CRDs were not established; read $LOG_DIR/kube-apiserver.log"

  # From 1.37 kube-controller-manager runs with GenericWorkload too, as a cluster that runs
  # gangs does: 1.38's ResourceClaim controller makes no claim for a pod of a PodGroup without it.
  # And with DRAWorkloadResourceClaims, as kube-apiserver: the controller makes a PodGroup's
  # claims from its templates and names them in the group's and its pods' status.
  local kcm_gates=(--feature-gates GenericWorkload=true,DRAWorkloadResourceClaims=true)
  local minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  if (( minor < 37 )); then kcm_gates=(); fi
  start kube-controller-manager "$BIN_DIR/kube-controller-manager" \
    "${kcm_gates[@]}" \
    --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
    --use-service-account-credentials \
    --service-account-private-key-file "$PKI_DIR/sa.key" --root-ca-file "$PKI_DIR/ca.crt" \
    --controllers "$(IFS=,; echo "${KCM_CONTROLLERS[*]}")" \
    --kube-api-qps 500 --kube-api-burst 1000 \
    --concurrent-replicaset-syncs 20 --concurrent-deployment-syncs 20 --concurrent-statefulset-syncs 20 \
    --concurrent-gc-syncs 50 --concurrent-job-syncs 20 \
    --node-monitor-grace-period "${NODE_LEASE_SECONDS}s"
  wait_healthy kube-controller-manager curl -sfk --max-time 2 "https://127.0.0.1:$KCM_PORT/healthz"

  start kwok "$BIN_DIR/kwok" --kubeconfig "$KUBECONFIG_FILE" \
    --config "$E2E_DIR/kwok/stages.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --cidr 10.244.0.0/16 --node-ip 127.0.0.1 --node-lease-duration-seconds "$NODE_LEASE_SECONDS" \
    --server-address "127.0.0.1:$KWOK_PORT" --node-port "$KWOK_PORT" \
    --tls-cert-file "$PKI_DIR/kwok.crt" --tls-private-key-file "$PKI_DIR/kwok.key"
  wait_healthy kwok curl -sf --max-time 2 "http://127.0.0.1:$KWOK_PORT/healthz"

  apply_nodes
  wait_nodes_ready
  started_ok=true
  log "cluster up in $(( $(date +%s) - t0 ))s with $NODES nodes"
  # KUEUE=1: a real Kueue beside it (e2e/scripts/kueue-up.sh), as the Kueue tests start it.
  if [[ ${KUEUE:-0} == 1 ]]; then "$E2E_DIR/scripts/kueue-up.sh"; fi
  log "ready: export KUBECONFIG=$KUBECONFIG_FILE"
}

# The controllers the tests rely on: workloads, garbage collection, namespaces, service accounts,
# node lifecycle (taints and evictions when a node stops reporting), and the volume controllers
# VolumeBinding works with (the PV binder binds what the scheduler chose; the protection
# controllers keep claims in use from going away; generic ephemeral volumes get their claims), and
# the ResourceClaim controller DynamicResources works with (claims from templates, deallocation).
KCM_CONTROLLERS=(
  deployment-controller replicaset-controller statefulset-controller job-controller
  cronjob-controller daemonset-controller garbage-collector-controller namespace-controller
  serviceaccount-controller serviceaccount-token-controller node-lifecycle-controller
  pod-garbage-collector-controller root-ca-certificate-publisher-controller
  taint-eviction-controller clusterrole-aggregation-controller endpointslice-controller
  ttl-after-finished-controller disruption-controller
  persistentvolume-binder-controller persistentvolume-protection-controller resourceclaim-controller
  persistentvolumeclaim-protection-controller ephemeral-volume-controller
)

main "$@"
