#!/usr/bin/env bash
# Stops every process cluster-up.sh started and removes the cluster's state.
# --keep-logs keeps .cluster/logs for a post-mortem.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PID_DIR=$CLUSTER_DIR/pids
keep_logs=false
[[ ${1:-} == --keep-logs ]] && keep_logs=true

stop_group() { # name
  local pidfile=$PID_DIR/$1.pid pid i
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  # Each component runs in its own session, so its process group id is its pid.
  kill -TERM -- "-$pid" 2>/dev/null || true
  for (( i = 0; i < 100; i++ )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

# Reverse start order: nothing writes to an API server that is already gone.
etcd_data=$(etcd_data_dir)
for c in tether kueue kwok kube-controller-manager kube-apiserver etcd; do stop_group "$c"; done
# etcd's data in memory (ETCD_TMPFS=1) is outside the cluster's directory.
case $etcd_data in
  /dev/shm/tether-etcd.*) rm -rf "$etcd_data" ;;
esac

if [[ -d $CLUSTER_DIR ]]; then
  if $keep_logs; then
    find "$CLUSTER_DIR" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
  else
    rm -rf "$CLUSTER_DIR"
  fi
fi
log "cluster stopped"
