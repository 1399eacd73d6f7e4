#!/usr/bin/env bash
# Writes the SBOM of tether's binary for one target: every crate compiled into it, with its
# version, license and checksum, as CycloneDX JSON, by cargo-cyclonedx (CycloneDX's own cargo
# plugin, installed once, pinned, into the cache).
#
#   scripts/sbom.sh TARGET OUT.json
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target=${1:?the target triple}
out=${2:?the output file}
CYCLONEDX_VERSION=0.5.9
tools=${XDG_CACHE_HOME:-$HOME/.cache}/tether/tools/cargo-cyclonedx-$CYCLONEDX_VERSION
log() { printf '[sbom] %s\n' "$*" >&2; }
die() { printf '[sbom] ERROR: %s\n' "$*" >&2; exit 1; }

if [[ ! -x $tools/bin/cargo-cyclonedx ]]; then
  log "installing cargo-cyclonedx $CYCLONEDX_VERSION into $tools"
  cargo install --quiet --locked --root "$tools" --version "$CYCLONEDX_VERSION" cargo-cyclonedx \
    || die "cargo-cyclonedx $CYCLONEDX_VERSION did not install"
fi
# It writes <name>.cdx.json beside each manifest; only the root package's is kept.
rm -f tether.cdx.json
PATH="$tools/bin:$PATH" cargo cyclonedx --quiet --manifest-path Cargo.toml --format json \
  --target "$target" --override-filename tether.cdx >/dev/null \
  || die "cargo cyclonedx failed"
[[ -f tether.cdx.json ]] || die "cargo cyclonedx wrote no tether.cdx.json"
mkdir -p "$(dirname "$out")"
mv tether.cdx.json "$out"
find . -name 'tether.cdx.json' -not -path './target/*' -delete
log "wrote $out"
