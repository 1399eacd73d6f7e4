# Shared settings for the local control plane scripts. Sourced, never run.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_DIR=$(cd "$E2E_DIR/.." && pwd)

# The pinned versions. Kubernetes comes from e2e/k8s/go.mod; keep these in step with it.
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
KWOK_VERSION=v0.8.0

# Binaries are cached outside the repository so that a fresh clone reuses them.
TETHER_CACHE=${TETHER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether}
BIN_DIR=${TETHER_K8S_BIN:-$TETHER_CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION/bin}

CLUSTER_DIR=${TETHER_CLUSTER_DIR:-$REPO_DIR/.cluster}
LOG_DIR=$CLUSTER_DIR/logs
PKI_DIR=$CLUSTER_DIR/pki

# Ports, all on 127.0.0.1.
ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-16257}
KWOK_PORT=${KWOK_PORT:-16280}

# etcd's data directory: $CLUSTER_DIR/etcd, or a directory in memory (/dev/shm) when the
# cluster was started with ETCD_TMPFS=1 (a bench at thousands of nodes: etcd's disk is what
# missed its deadlines there; fsync is off either way). cluster-up.sh records which, so that a
# restart and cluster-down.sh find it whatever their environment.
etcd_data_dir() { cat "$CLUSTER_DIR/etcd-data-dir" 2>/dev/null || echo "$CLUSTER_DIR/etcd"; }

log() { printf '[tether-e2e] %s\n' "$*" >&2; }
die() { printf '[tether-e2e] ERROR: %s\n' "$*" >&2; exit 1; }
