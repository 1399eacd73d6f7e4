#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and kwok from the
# upstream Go modules into the cache. Skips the build when the cache already holds the pinned
# versions (a stamp records the hash of e2e/k8s/$K8S_VERSION/go.mod and go.sum).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# kstatus (sigs.k8s.io/cli-utils' health verdict, as Flux and kpt compute it) has a stamp of its
# own, so that changing it never rebuilds Kubernetes.
kstatus_want=$(cat "$E2E_DIR/kstatus/go.mod" "$E2E_DIR/kstatus/go.sum" "$E2E_DIR/kstatus/main.go" | sha256sum | cut -d' ' -f1)
if [[ ! -x "$BIN_DIR/kstatus" || "$(cat "$BIN_DIR/.kstatus-stamp" 2>/dev/null)" != "$kstatus_want" ]]; then
  command -v go >/dev/null || die "go is not installed; the e2e helpers are built from Go modules"
  mkdir -p "$BIN_DIR"
  log "building the kstatus helper into $BIN_DIR"
  (cd "$E2E_DIR/kstatus" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/kstatus" .) \
    || die "the kstatus helper did not build"
  echo "$kstatus_want" >"$BIN_DIR/.kstatus-stamp"
fi

# argocd-health (an Argo CD health check run with gopher-lua, Argo CD's Lua engine) likewise.
argocd_want=$(cat "$E2E_DIR/argocd-health/go.mod" "$E2E_DIR/argocd-health/go.sum" "$E2E_DIR/argocd-health/main.go" | sha256sum | cut -d' ' -f1)
if [[ ! -x "$BIN_DIR/argocd-health" || "$(cat "$BIN_DIR/.argocd-health-stamp" 2>/dev/null)" != "$argocd_want" ]]; then
  command -v go >/dev/null || die "go is not installed; the e2e helpers are built from Go modules"
  mkdir -p "$BIN_DIR"
  log "building the argocd-health helper into $BIN_DIR"
  (cd "$E2E_DIR/argocd-health" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/argocd-health" .) \
    || die "the argocd-health helper did not build"
  echo "$argocd_want" >"$BIN_DIR/.argocd-health-stamp"
fi

stand_in_scripts() {
  if grep -q '=> \./stand-in/' "$K8S_MODULE_DIR/go.mod"; then cat "$E2E_DIR"/scripts/stand-in-*.sh; fi
}
stamp_want=$( (cat "$K8S_MODULE_DIR/go.mod" "$K8S_MODULE_DIR/go.sum"; echo "$KWOK_VERSION"; stand_in_scripts) |
  sha256sum | cut -d' ' -f1)
if [[ -f "$BIN_DIR/.stamp" && "$(cat "$BIN_DIR/.stamp")" == "$stamp_want" ]]; then
  log "binaries for Kubernetes $K8S_VERSION already cached in $BIN_DIR"
  exit 0
fi

command -v go >/dev/null || die "go is not installed; the local control plane is built from Go modules"
mkdir -p "$BIN_DIR" "$TETHER_CACHE/logs"
build_log="$TETHER_CACHE/logs/build-$K8S_VERSION.log"
: >"$build_log"
rm -f "$BIN_DIR/.stamp"

ldflags=$(k8s_ldflags "$K8S_VERSION")
export CGO_ENABLED=0 GOFLAGS=-mod=mod
use_scratch_gocache
prepare_stand_ins

start=$(date +%s)
log "building Kubernetes $K8S_VERSION, etcd $ETCD_VERSION and kwok $KWOK_VERSION into $BIN_DIR (log: $build_log)"
(
  cd "$K8S_MODULE_DIR"
  go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/etcd" go.etcd.io/etcd/server/v3
  # kwok is built outside the Kubernetes module, with its own go.mod.
  GOBIN="$BIN_DIR" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
) >>"$build_log" 2>&1 || { tail -n 30 "$build_log" >&2; die "the build failed; read $build_log"; }

for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok; do
  [[ -x "$BIN_DIR/$b" ]] || die "the build did not produce $b; read $build_log"
done
echo "$stamp_want" >"$BIN_DIR/.stamp"
log "built in $(( $(date +%s) - start ))s"
