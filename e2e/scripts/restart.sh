#!/usr/bin/env bash
# Restarts one component of the running local cluster with the same flags and waits until it is
# healthy again (after etcd, until kube-apiserver is ready again); everything else keeps
# running. Used by the fault e2e tests.
#
#   restart.sh kube-apiserver|etcd [--kill] [--down SECONDS]
#
# --kill sends SIGKILL (a crash) instead of SIGTERM (a clean stop); --down keeps the component
# stopped that long before starting it again. A restarted kube-apiserver starts its watch cache
# afresh, so a watch resuming from a version before the restart gets 410 Gone.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$E2E_DIR/scripts/components.sh"

component=${1:-}
shift || true
signal=TERM down=0
while (( $# )); do
  case $1 in
    --kill) signal=KILL ;;
    --down) down=${2:?--down needs seconds}; shift ;;
    *) die "unknown argument: $1" ;;
  esac
  shift
done
case $component in
  kube-apiserver) starter=start_apiserver ;;
  etcd) starter=start_etcd ;;
  *) die "usage: restart.sh kube-apiserver|etcd [--kill] [--down SECONDS]" ;;
esac

alive "$component" || die "$component is not running; start the cluster with make cluster"
pid=$(cat "$PID_DIR/$component.pid")
kill "-$signal" -- "-$pid" 2>/dev/null || kill "-$signal" "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -KILL -- "-$pid" 2>/dev/null || true
mv -f "$LOG_DIR/$component.log" "$LOG_DIR/$component.before-restart.log"
sleep "$down"
$starter
# What clients see come back is the API server: after etcd, wait until kube-apiserver is ready
# again (its etcd check passes).
[[ $component == etcd ]] && wait_healthy kube-apiserver apiserver_ready
log "$component restarted with SIG$signal before (pid $(cat "$PID_DIR/$component.pid"))"
