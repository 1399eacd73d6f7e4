#!/usr/bin/env bash
# Builds kube-scheduler alone of the pinned release $1 (e.g. v1.38.0-beta.0, pinned in
# e2e/k8s/$1/) into the cache, and prints its path. For a release whose API server does not build
# from the Go module proxy yet (1.38.0-beta.0: k8s.io/apiextensions-api is not served), its
# kube-scheduler is still the reference tether's decisions under that release are compared with,
# on the default release's control plane (see `make test-matrix`).
set -euo pipefail
version=${1:?usage: build-reference-scheduler.sh <version pinned in e2e/k8s/>}
export K8S_VERSION=$version
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=$TETHER_CACHE/kube-scheduler-$version
want=$(cat "$K8S_MODULE_DIR/go.mod" "$K8S_MODULE_DIR/go.sum" | sha256sum | cut -d' ' -f1)
if [[ -x "$out/kube-scheduler" && "$(cat "$out/.stamp" 2>/dev/null)" == "$want" ]]; then
  echo "$out/kube-scheduler"
  exit 0
fi
command -v go >/dev/null || die "go is not installed; kube-scheduler is built from Go modules"
mkdir -p "$out" "$TETHER_CACHE/logs"
build_log="$TETHER_CACHE/logs/build-kube-scheduler-$version.log"
ldflags=$(k8s_ldflags "$version")
export CGO_ENABLED=0 GOFLAGS=-mod=mod
use_scratch_gocache
prepare_stand_ins
log "building kube-scheduler $version into $out (log: $build_log)"
(cd "$K8S_MODULE_DIR" && go build -trimpath -ldflags "$ldflags" -o "$out/" k8s.io/kubernetes/cmd/kube-scheduler) \
  >"$build_log" 2>&1 || { tail -n 30 "$build_log" >&2; die "the build failed; read $build_log"; }
echo "$want" >"$out/.stamp"
echo "$out/kube-scheduler"
