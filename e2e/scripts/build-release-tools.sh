#!/usr/bin/env bash
# Builds the tools the release tests use from the Go module proxy into the cache: actionlint
# (checks .github/workflows/), krew and its validate-krew-manifest (check and install the kubectl
# plugin's manifest from a local archive). Pinned; skipped when the cache holds them.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ACTIONLINT_VERSION=v1.7.12
KREW_VERSION=v0.4.3
dir=$TETHER_CACHE/release-tools-actionlint-$ACTIONLINT_VERSION-krew-$KREW_VERSION
if [[ -x $dir/bin/actionlint && -x $dir/bin/krew && -x $dir/bin/validate-krew-manifest ]]; then
  echo "$dir/bin"
  exit 0
fi
command -v go >/dev/null || die "go is not installed; the release tools are built from their Go modules"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
use_scratch_gocache
mkdir -p "$dir/bin" "$TETHER_CACHE/logs"
build_log=$TETHER_CACHE/logs/build-release-tools.log
log "building actionlint $ACTIONLINT_VERSION and krew $KREW_VERSION into $dir (log: $build_log)" >&2
{
  GOBIN=$dir/bin go install -trimpath "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION" &&
  GOBIN=$dir/bin go install -trimpath "sigs.k8s.io/krew/cmd/krew@$KREW_VERSION" &&
  GOBIN=$dir/bin go install -trimpath "sigs.k8s.io/krew/cmd/validate-krew-manifest@$KREW_VERSION"
} >"$build_log" 2>&1 || { tail -n 20 "$build_log" >&2; die "the release tools did not build"; }
echo "$dir/bin"
