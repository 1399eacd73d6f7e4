#!/usr/bin/env bash
# Builds promtool (Prometheus's rule checker and rule unit-test runner, for deploy/monitoring) from
# the Go module proxy into the binaries cache, at the Prometheus release e2e/promtool/go.mod pins.
# Skips the build when the cache holds that build already: a stamp of its own records the hash of
# go.mod, go.sum and the build flags, so that changing it never rebuilds Kubernetes.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROMTOOL_DIR=$E2E_DIR/promtool
# Prometheus 3.X.Y is the Go module version v0.30X.Y; the version printed by `promtool --version`.
prom_module_version=$(awk '$1 == "github.com/prometheus/prometheus" { print $2 }' "$PROMTOOL_DIR/go.mod")
[[ $prom_module_version =~ ^v0\.([0-9]+)\.([0-9]+)$ ]] || die "e2e/promtool/go.mod does not pin github.com/prometheus/prometheus"
minor=${BASH_REMATCH[1]}
prom_version=$(( 10#$minor / 100 )).$(( 10#$minor % 100 )).${BASH_REMATCH[2]}
# remove_all_sd: promtool's rule commands need none of Prometheus's service discoveries.
tags=remove_all_sd
ldflags="-s -w -X github.com/prometheus/common/version.Version=$prom_version"

want=$( (cat "$PROMTOOL_DIR/go.mod" "$PROMTOOL_DIR/go.sum"; echo "$tags $ldflags") | sha256sum | cut -d' ' -f1)
if [[ -x "$BIN_DIR/promtool" && "$(cat "$BIN_DIR/.promtool-stamp" 2>/dev/null)" == "$want" ]]; then
  exit 0
fi

command -v go >/dev/null || die "go is not installed; promtool is built from Go modules"
mkdir -p "$BIN_DIR" "$TETHER_CACHE/logs"
build_log="$TETHER_CACHE/logs/build-promtool-$prom_version.log"
log "building promtool $prom_version into $BIN_DIR (a few minutes, once; log: $build_log)"
# The binary is what is cached; its Go build cache (~1 GiB) goes with the build.
GOCACHE=$(mktemp -d "${TMPDIR:-/tmp}/tether-promtool-build.XXXXXX")
export GOCACHE
trap 'rm -rf "$GOCACHE"' EXIT
rm -f "$BIN_DIR/.promtool-stamp"
(
  cd "$PROMTOOL_DIR"
  CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -tags "$tags" -ldflags "$ldflags" \
    -o "$BIN_DIR/promtool" github.com/prometheus/prometheus/cmd/promtool
) >"$build_log" 2>&1 || { tail -n 30 "$build_log" >&2; die "promtool did not build; read $build_log"; }
"$BIN_DIR/promtool" --version >>"$build_log" 2>&1 || die "the promtool built does not run; read $build_log"
echo "$want" >"$BIN_DIR/.promtool-stamp"
log "promtool $prom_version built"
