#!/usr/bin/env bash
# Stops the tether started by tether-up.sh.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PID_FILE=$CLUSTER_DIR/pids/tether.pid
[[ -f $PID_FILE ]] || exit 0
pid=$(cat "$PID_FILE")
kill -TERM -- "-$pid" 2>/dev/null || true
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -KILL -- "-$pid" 2>/dev/null || true
rm -f "$PID_FILE"
