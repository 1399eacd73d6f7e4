# Shared settings for the local control plane scripts. Sourced, never run.
set -euo pipefail

E2E_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_DIR=$(cd "$E2E_DIR/.." && pwd)

CLUSTER_DIR=${TETHER_CLUSTER_DIR:-$REPO_DIR/.cluster}

# The Kubernetes release of the local control plane: one of those pinned in e2e/k8s/<version>/
# (a go.mod and go.sum each), the newest (v1.38.0-beta.0, the newest 1.38 the Go module proxy
# serves) unless K8S_VERSION names another (`K8S_VERSION=v1.37.2 make cluster`), or the release of the cluster running now (cluster-up.sh records it, so that
# every later command finds its binaries). etcd is the version that release's go.mod pins.
K8S_VERSION=${K8S_VERSION:-$(cat "$CLUSTER_DIR/k8s-version" 2>/dev/null || echo v1.38.0-beta.0)}
K8S_MODULE_DIR=$E2E_DIR/k8s/$K8S_VERSION
if [[ ! -f "$K8S_MODULE_DIR/go.mod" ]]; then
  printf '[tether-e2e] ERROR: Kubernetes %s is not pinned here; pinned: %s\n' "$K8S_VERSION" \
    "$(cd "$E2E_DIR/k8s" && ls -d v* | tr '\n' ' ')" >&2
  exit 1
fi
ETCD_VERSION=$(awk '$1 == "go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2}' "$K8S_MODULE_DIR/go.mod")
KWOK_VERSION=v0.8.0
# Kubernetes 1.38 needs Go 1.27: for a release whose go.mod says so, the go command takes this
# approved toolchain from the module proxy (about 76 MB, once per machine) whatever Go the
# machine has.
if grep -q '^go 1\.27' "$K8S_MODULE_DIR/go.mod"; then
  export GOTOOLCHAIN=go1.27.3
fi

# Binaries are cached outside the repository so that a fresh clone reuses them.
TETHER_CACHE=${TETHER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tether}
BIN_DIR=${TETHER_K8S_BIN:-$TETHER_CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION/bin}

LOG_DIR=$CLUSTER_DIR/logs
PKI_DIR=$CLUSTER_DIR/pki

# Ports, all on 127.0.0.1.
ETCD_CLIENT_PORT=${ETCD_CLIENT_PORT:-23790}
ETCD_PEER_PORT=${ETCD_PEER_PORT:-23800}
APISERVER_PORT=${APISERVER_PORT:-16443}
KCM_PORT=${KCM_PORT:-16257}
KWOK_PORT=${KWOK_PORT:-16280}
# Kueue (e2e/scripts/kueue-up.sh): its webhooks, its probes, its metrics and its visibility API.
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
KUEUE_WEBHOOK_PORT=${KUEUE_WEBHOOK_PORT:-16943}
KUEUE_HEALTH_PORT=${KUEUE_HEALTH_PORT:-16981}
KUEUE_METRICS_PORT=${KUEUE_METRICS_PORT:-16982}
KUEUE_VISIBILITY_PORT=${KUEUE_VISIBILITY_PORT:-16983}
KUEUE_DIR=$TETHER_CACHE/kueue-$KUEUE_VERSION

# etcd's data directory: $CLUSTER_DIR/etcd, or a directory in memory (/dev/shm) when the
# cluster was started with ETCD_TMPFS=1 (a bench at thousands of nodes: etcd's disk is what
# missed its deadlines there; fsync is off either way). cluster-up.sh records which, so that a
# restart and cluster-down.sh find it whatever their environment.
etcd_data_dir() { cat "$CLUSTER_DIR/etcd-data-dir" 2>/dev/null || echo "$CLUSTER_DIR/etcd"; }

# The linker flags that stamp a Kubernetes binary with its release ($1, e.g. v1.37.2), as
# `kubectl version` and the API server's /version report it.
k8s_ldflags() {
  local minor=${1#v1.}; minor=${minor%%.*}
  local pkg=k8s.io/component-base/version
  echo "-s -w -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor \
 -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
}

# A scratch Go build cache for this script, removed when it exits: the binaries are what is
# cached; Go's build cache for Kubernetes would be ~4 GiB more on disk.
use_scratch_gocache() {
  GOCACHE=$(mktemp -d "${TMPDIR:-/tmp}/tether-go-build.XXXXXX")
  export GOCACHE
  trap 'rm -rf "$GOCACHE"' EXIT
}

# Writes the stand-ins a pinned release's go.mod points at (`=> ./stand-in/<module>`) for the
# modules of it the Go module proxy does not serve yet (see stand-in-apiextensions-api.sh). They
# are written into the release's directory, ignored by git, before each build.
prepare_stand_ins() {
  if grep -q '=> \./stand-in/apiextensions-api' "$K8S_MODULE_DIR/go.mod"; then
    log "writing the stand-in for k8s.io/apiextensions-api (not served by the module proxy yet)"
    (cd "$K8S_MODULE_DIR" && bash "$E2E_DIR/scripts/stand-in-apiextensions-api.sh" \
      "$K8S_MODULE_DIR/stand-in/apiextensions-api") || die "the apiextensions-api stand-in failed"
  fi
}

log() { printf '[tether-e2e] %s\n' "$*" >&2; }
die() { printf '[tether-e2e] ERROR: %s\n' "$*" >&2; exit 1; }
