#!/usr/bin/env bash
# Builds helm (the release pinned in e2e/helm/go.mod) from the Go module proxy into the binaries
# cache, beside kubectl, for the chart in charts/tether. It has a stamp of its own (the hash of
# e2e/helm/go.mod and go.sum), so that changing it never rebuilds Kubernetes, and a cached helm
# is reused, also from a fresh clone.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

helm_want=$(cat "$E2E_DIR/helm/go.mod" "$E2E_DIR/helm/go.sum" | sha256sum | cut -d' ' -f1)
if [[ -x "$BIN_DIR/helm" && "$(cat "$BIN_DIR/.helm-stamp" 2>/dev/null)" == "$helm_want" ]]; then
  exit 0
fi

command -v go >/dev/null || die "go is not installed; helm is built from its Go module"
mkdir -p "$BIN_DIR" "$TETHER_CACHE/logs"
rm -f "$BIN_DIR/.helm-stamp"
build_log="$TETHER_CACHE/logs/build-helm.log"
: >"$build_log"
# e2e/helm/go.sum is complete: a build never rewrites it (a fresh clone stays clean).
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
# Only the binary is kept: Go's build cache for it would be ~1 GiB more on disk.
GOCACHE=$(mktemp -d "${TMPDIR:-/tmp}/tether-go-build.XXXXXX")
export GOCACHE
trap 'rm -rf "$GOCACHE"' EXIT

cd "$E2E_DIR/helm"
helm_version=$(go list -m -f '{{.Version}}' helm.sh/helm/v3) || die "e2e/helm/go.mod does not require helm.sh/helm/v3"
# As helm's own Makefile: its version, and the Kubernetes release it assumes when it renders
# without a cluster (`helm template`, `helm lint`), from the client-go it is built with
# (v0.37.x is Kubernetes 1.37).
client_go=$(go list -m -f '{{.Version}}' k8s.io/client-go) || die "no k8s.io/client-go in e2e/helm/go.mod"
k8s_minor=$(cut -d. -f2 <<<"$client_go")
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

start=$(date +%s)
log "building helm $helm_version into $BIN_DIR (log: $build_log)"
go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/helm" helm.sh/helm/v3/cmd/helm >>"$build_log" 2>&1 \
  || { tail -n 30 "$build_log" >&2; die "helm did not build; read $build_log"; }
"$BIN_DIR/helm" version --short >/dev/null 2>&1 || die "the helm just built does not run"
echo "$helm_want" >"$BIN_DIR/.helm-stamp"
log "helm $helm_version built in $(( $(date +%s) - start ))s"
