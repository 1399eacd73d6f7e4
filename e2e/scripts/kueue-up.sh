#!/usr/bin/env bash
# Starts a real Kueue (its manager built from the Go module proxy by build-kueue.sh) against the
# local control plane: its CRDs installed, its webhooks served on 127.0.0.1 with a certificate
# of the cluster's CA and reached by URL, its own controllers suspending, gating, admitting,
# ungating and preempting. Only the namespaces labelled `e2e.tether.dev/kueue=true` go through
# its webhooks and are managed by it: the rest of the cluster does not depend on Kueue running.
# Does nothing when Kueue already runs. Logs to .cluster/logs/kueue.log.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$E2E_DIR/scripts/pki.sh"

ADMIN_KUBECONFIG=$CLUSTER_DIR/kubeconfig
KUBECTL="$BIN_DIR/kubectl --kubeconfig=$ADMIN_KUBECONFIG"
PID_FILE=$CLUSTER_DIR/pids/kueue.pid
STATE=$CLUSTER_DIR/kueue
[[ -f $ADMIN_KUBECONFIG ]] || die "no local cluster; run make cluster first"

if [[ -f $PID_FILE ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
  if curl -sf --max-time 2 "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz" >/dev/null; then
    log "Kueue is running (pid $(cat "$PID_FILE"))"
    exit 0
  fi
  # Running but not ready (stuck, or a start that failed half-way): stopped before a new one.
  kill -TERM -- "-$(cat "$PID_FILE")" 2>/dev/null || true
  sleep 1
  kill -KILL -- "-$(cat "$PID_FILE")" 2>/dev/null || true
  rm -f "$PID_FILE"
fi
"$E2E_DIR/scripts/build-kueue.sh"

mkdir -p "$STATE/certs" "$LOG_DIR" "$(dirname "$PID_FILE")"
pki_server_cert kueue-webhook kueue-webhook IP:127.0.0.1,DNS:localhost
cp "$PKI_DIR/kueue-webhook.crt" "$STATE/certs/tls.crt"
cp "$PKI_DIR/kueue-webhook.key" "$STATE/certs/tls.key"
cat >"$STATE/config.yaml" <<CFG
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $STATE/certs
leaderElection:
  leaderElect: false
# Kueue's client allows 20 requests a second by default; a batch platform opens it (the bench
# admits hundreds of Jobs a minute).
clientConnection:
  qps: 500
  burst: 1000
internalCertManagement:
  enable: false
visibilityServer:
  bindAddress: 127.0.0.1
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchLabels:
    e2e.tether.dev/kueue: "true"
integrations:
  frameworks:
  - batch/job
  - pod
CFG

$KUBECTL apply --server-side --force-conflicts -f "$KUEUE_DIR/crds/" >/dev/null
$KUBECTL wait --for=condition=Established --timeout=60s \
  crd/clusterqueues.kueue.x-k8s.io crd/localqueues.kueue.x-k8s.io crd/workloads.kueue.x-k8s.io \
  crd/resourceflavors.kueue.x-k8s.io crd/topologies.kueue.x-k8s.io >/dev/null \
  || die "Kueue's CRDs were not established"
$KUBECTL create namespace kueue-system --dry-run=client -o yaml | $KUBECTL apply -f - >/dev/null

# Kueue without its own certificate management reads its metrics server's certificate from
# /etc/kueue/metrics/certs whether or not that server runs. That path is given to it in a
# mount namespace of its own, over /etc (an overlay: the machine's /etc is not written). Its
# visibility API (an aggregated API server; build-kueue.sh pointed its certificate into the
# cache) is served on 127.0.0.1 and reached through the local API server's aggregation layer.
command -v unshare >/dev/null || die "unshare (util-linux) is needed to start Kueue"
rm -rf "$STATE/etc" && mkdir -p "$STATE/etc/upper" "$STATE/etc/work"
cat >"$STATE/run-kueue.sh" <<RUN
#!/bin/sh
set -e
mount -t overlay overlay -o lowerdir=/etc,upperdir=$STATE/etc/upper,workdir=$STATE/etc/work /etc
mkdir -p /etc/kueue/metrics/certs
cp $STATE/certs/tls.crt $STATE/certs/tls.key /etc/kueue/metrics/certs/
exec "$KUEUE_DIR/bin/kueue" --config "$STATE/config.yaml" --kubeconfig "$ADMIN_KUBECONFIG" \
  --visibility-server-port "$KUEUE_VISIBILITY_PORT"
RUN
chmod +x "$STATE/run-kueue.sh"
namespaces=(--mount --propagation private)
if [[ $(id -u) != 0 ]]; then namespaces=(--user --map-root-user "${namespaces[@]}"); fi
setsid unshare "${namespaces[@]}" "$STATE/run-kueue.sh" >"$LOG_DIR/kueue.log" 2>&1 </dev/null &
echo $! >"$PID_FILE"
# A start that fails from here on stops the Kueue it started.
trap 'kill -- "-$(cat "$PID_FILE" 2>/dev/null)" 2>/dev/null; rm -f "$PID_FILE"' EXIT
deadline=$(( $(date +%s) + 90 ))
until curl -sf --max-time 2 "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz" >/dev/null; do
  kill -0 "$(cat "$PID_FILE")" 2>/dev/null || { tail -n 20 "$LOG_DIR/kueue.log" >&2; die "Kueue exited; read $LOG_DIR/kueue.log"; }
  (( $(date +%s) > deadline )) && die "Kueue was not ready within 90s; read $LOG_DIR/kueue.log"
  sleep 0.5
done

# Its webhooks, reached by URL at 127.0.0.1 and trusted through the cluster's CA, each limited
# to the namespaces that opted in (a cluster-scoped object, a ClusterQueue, is always checked).
ca=$(base64 -w0 <"$PKI_DIR/ca.crt")
awk -v base="https://127.0.0.1:$KUEUE_WEBHOOK_PORT" -v ca="$ca" '
  /^    service:$/ { skip = 1; next }
  skip && /^      (name|namespace):/ { next }
  skip && /^      path:/ { sub(/^      path: /, ""); print "    url: " base $0; print "    caBundle: " ca; skip = 0; next }
  /^  failurePolicy: / { print; print "  namespaceSelector:"; print "    matchLabels:"; print "      e2e.tether.dev/kueue: \"true\""; next }
  /^  name: (mutating|validating)-webhook-configuration$/ { sub(/configuration$/, "configuration-kueue") }
  { print }
' "$KUEUE_DIR/webhooks.yaml" >"$STATE/webhooks.yaml"
grep -q 'service:' "$STATE/webhooks.yaml" && die "a Kueue webhook still names a Service: $STATE/webhooks.yaml"
$KUBECTL apply -f "$STATE/webhooks.yaml" >/dev/null
# Served once the API server reaches it: a dry-run create goes through the ResourceFlavor
# webhooks. (Webhooks of integrations not enabled here, Deployments say, have no handler: keep
# such kinds out of the namespaces that opted in.)
deadline=$(( $(date +%s) + 60 ))
until $KUBECTL create --dry-run=server -f - >/dev/null 2>&1 <<'RF'
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: kueue-up-probe}
RF
do
  (( $(date +%s) > deadline )) && die "Kueue's webhooks did not answer within 60s; read $LOG_DIR/kueue.log"
  sleep 0.5
done

# Its visibility API (pending workloads and their positions, what `tether explain` reads):
# an APIService whose Service is an ExternalName for localhost, which kube-apiserver's
# aggregator dials at the APIService's port (no cluster network here).
$KUBECTL apply -f - >/dev/null <<VIS
apiVersion: v1
kind: Service
metadata: {name: visibility-server, namespace: kueue-system}
spec:
  type: ExternalName
  externalName: localhost
  ports: [{name: https, port: $KUEUE_VISIBILITY_PORT, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta2.visibility.kueue.x-k8s.io}
spec:
  group: visibility.kueue.x-k8s.io
  version: v1beta2
  groupPriorityMinimum: 100
  versionPriority: 100
  insecureSkipTLSVerify: true
  service: {name: visibility-server, namespace: kueue-system, port: $KUEUE_VISIBILITY_PORT}
VIS
$KUBECTL wait --for=condition=Available --timeout=60s apiservice/v1beta2.visibility.kueue.x-k8s.io >/dev/null \
  || die "Kueue's visibility API was not available within 60s; read $LOG_DIR/kueue.log and $LOG_DIR/kube-apiserver.log"
trap - EXIT
log "Kueue $KUEUE_VERSION is running (pid $(cat "$PID_FILE"), log $LOG_DIR/kueue.log)"
