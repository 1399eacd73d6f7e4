#!/usr/bin/env bash
# Restarts kube-apiserver of the running local cluster with the same flags (etcd and everything
# else keep running) and waits until it is ready. Its watch cache starts afresh, so a watch that
# resumes from a version before the restart gets 410 Gone. Used by the fault e2e tests.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$E2E_DIR/scripts/components.sh"

alive kube-apiserver || die "kube-apiserver is not running; start the cluster with make cluster"
pid=$(cat "$PID_DIR/kube-apiserver.pid")
kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -KILL -- "-$pid" 2>/dev/null || true
mv -f "$LOG_DIR/kube-apiserver.log" "$LOG_DIR/kube-apiserver.before-restart.log"
start_apiserver
log "kube-apiserver restarted (pid $(cat "$PID_DIR/kube-apiserver.pid"))"
