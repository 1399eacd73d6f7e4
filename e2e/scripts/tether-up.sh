#!/usr/bin/env bash
# Runs the tether binary against the local cluster the way it runs in a cluster: installs
# deploy/ (CRDs, namespace, RBAC) and authenticates as the tether ServiceAccount, so that the
# ClusterRole is tested for real. Logs to .cluster/logs/tether.log. Restarts a running tether.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TETHER_BIN=${TETHER_BIN:-$REPO_DIR/target/debug/tether}
TETHER_HTTP_PORT=${TETHER_HTTP_PORT:-18080}
TETHER_HEALTH_PORT=${TETHER_HEALTH_PORT:-18081}
ADMIN_KUBECONFIG=$CLUSTER_DIR/kubeconfig
KUBECTL="$BIN_DIR/kubectl --kubeconfig=$ADMIN_KUBECONFIG"
PID_FILE=$CLUSTER_DIR/pids/tether.pid

[[ -f $ADMIN_KUBECONFIG ]] || die "no local cluster; run make cluster first"
[[ -x $TETHER_BIN ]] || die "$TETHER_BIN is missing; run cargo build first"
"$E2E_DIR/scripts/tether-down.sh" >/dev/null 2>&1 || true


# KubeVirt stand-ins first, so tether's owner watches find them (see e2e/kubevirt/crds.yaml).
$KUBECTL apply -f "$E2E_DIR/kubevirt/crds.yaml" >/dev/null
$KUBECTL apply -f "$REPO_DIR/crds/tether.dev.yaml" -f "$REPO_DIR/deploy/namespace.yaml" -f "$REPO_DIR/deploy/rbac.yaml" -f "$REPO_DIR/deploy/explainrequests.yaml" >/dev/null
$KUBECTL wait --for=condition=Established --timeout=60s crd/schedulingprofiles.tether.dev crd/stickybindings.tether.dev crd/explainrequests.tether.dev \
  crd/virtualmachines.kubevirt.io crd/virtualmachineinstances.kubevirt.io >/dev/null

token=$($KUBECTL -n tether-system create token tether --duration=24h)
sa_kubeconfig=$CLUSTER_DIR/tether.kubeconfig
cat >"$sa_kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters:
- name: tether-local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI_DIR/ca.crt")
users:
- name: tether
  user: {token: $token}
contexts:
- name: tether
  context: {cluster: tether-local, user: tether}
current-context: tether
KCFG

mkdir -p "$LOG_DIR" "$(dirname "$PID_FILE")"
# tether runs under a shell of its own session (tether-down.sh stops the whole group) that
# writes how it ended into its log: a death no log line explains still leaves its status.
KUBECONFIG=$sa_kubeconfig RUST_LOG=${RUST_LOG:-info,tether=debug} setsid bash -c \
  '"$0" "$@"; status=$?; echo "[tether-e2e] tether exited with status $status ($(date -u +%FT%TZ))" >&2' \
  "$TETHER_BIN" run \
  --http-addr "127.0.0.1:$TETHER_HTTP_PORT" --health-addr "127.0.0.1:$TETHER_HEALTH_PORT" --instance tether-local \
  --owner-kinds example.tether.dev/Widget,example.tether.dev/WidgetSet,apps.kruise.io/StatefulSet \
  --feature-gates DRAWorkloadResourceClaims=true \
  >"$LOG_DIR/tether.log" 2>&1 </dev/null &
echo $! >"$PID_FILE"

deadline=$(( $(date +%s) + 60 ))
until curl -sf --max-time 2 "http://127.0.0.1:$TETHER_HEALTH_PORT/readyz" >/dev/null; do
  kill -0 "$(cat "$PID_FILE")" 2>/dev/null || { tail -n 20 "$LOG_DIR/tether.log" >&2; die "tether exited; read $LOG_DIR/tether.log"; }
  (( $(date +%s) > deadline )) && die "tether was not ready within 60s; read $LOG_DIR/tether.log"
  sleep 0.2
done
# Profiles reach the scheduler only as SchedulingProfiles: serve the default one.
$KUBECTL apply -f "$REPO_DIR/config/samples/default.yaml" >/dev/null
$KUBECTL wait --for=condition=Ready --timeout=60s schedulingprofile/default >/dev/null \
  || die "the default SchedulingProfile did not become Ready; read $LOG_DIR/tether.log"

log "tether is running (pid $(cat "$PID_FILE"), http://127.0.0.1:$TETHER_HTTP_PORT, log $LOG_DIR/tether.log)"
