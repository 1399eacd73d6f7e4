#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue/cmd/kueue at $KUEUE_VERSION) from the Go module proxy
# into the cache, with the CRDs and webhook configurations of the same module beside it. Skips the
# build when the cache holds that version.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ -x "$KUEUE_DIR/bin/kueue" && -f "$KUEUE_DIR/webhooks.yaml" && -f "$KUEUE_DIR/visibility/tls.crt" ]]; then
  log "Kueue $KUEUE_VERSION already cached in $KUEUE_DIR"
  exit 0
fi
command -v go >/dev/null || die "go is not installed; Kueue is built from its Go module"
# Kueue's own go.mod asks for Go 1.25: the machine's Go builds it (GOTOOLCHAIN left as it is,
# unless lib.sh set 1.27 for Kubernetes 1.38, which builds it too).
export CGO_ENABLED=0 GOFLAGS=-mod=mod
use_scratch_gocache
mkdir -p "$KUEUE_DIR/bin" "$KUEUE_DIR/crds" "$TETHER_CACHE/logs"
build_log="$TETHER_CACHE/logs/build-kueue-$KUEUE_VERSION.log"
start=$(date +%s)
log "building Kueue $KUEUE_VERSION into $KUEUE_DIR (log: $build_log)"
# Its visibility API server reads its certificate from /visibility, a path of the machine's root:
# the build points it into the cache instead (a variable of Kueue's, set at link time), where a
# self-signed certificate is written after the build (the APIService skips verifying it, as
# Kueue's own manifests do).
GOBIN="$KUEUE_DIR/bin" go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/visibility.certDir=$KUEUE_DIR/visibility" \
  "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION" \
  >"$build_log" 2>&1 || { tail -n 20 "$build_log" >&2; die "Kueue did not build"; }
# Written only once the build succeeded: the cache check counts on it.
mkdir -p "$KUEUE_DIR/visibility"
openssl req -x509 -new -newkey rsa:2048 -nodes -days 3650 -subj "/CN=localhost" \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$KUEUE_DIR/visibility/tls.key" -out "$KUEUE_DIR/visibility/tls.crt" 2>/dev/null \
  || die "openssl did not make the visibility server's certificate"
module_dir=$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[[ -d $module_dir/config/components/crd/bases ]] || die "Kueue's module has no CRDs at config/components/crd/bases"
cp "$module_dir"/config/components/crd/bases/*.yaml "$KUEUE_DIR/crds/"
cp "$module_dir/config/components/webhook/manifests.yaml" "$KUEUE_DIR/webhooks.yaml"
chmod -R u+w "$KUEUE_DIR"
log "Kueue $KUEUE_VERSION built in $(( $(date +%s) - start ))s"
