#!/usr/bin/env bash
# Makes one release's artifacts for this machine's architecture: what
# .github/workflows/release.yml runs on each architecture before it publishes.
#
#   scripts/release.sh VERSION        VERSION is the git tag: vMAJOR.MINOR.PATCH[-PRE]
#
# The tag scheme: a release is the tag v<Cargo.toml's version>; the chart's version and
# appVersion are that version without the v, and so is the image's tag (the chart's default).
# Writes target/publish/VERSION/:
#   tether-VERSION-linux-ARCH.tar.gz   the static binary (scripts/build-static.sh), LICENSE, README
#   tether-VERSION-linux-ARCH.sbom.cdx.json   its SBOM (scripts/sbom.sh)
#   tether-CHART_VERSION.tgz           the chart, packaged (helm: $HELM, else helm on PATH),
#                                      its alerts' runbook URLs at this tag's docs
#   tether.yaml                        the krew manifest of the kubectl plugin, naming every
#                                      archive in the directory with its sha256
#   checksums.txt                      sha256 of each file above
# PROFILE=release builds faster than the shipped dist (fat LTO) profile (the tests use it).
# TETHER_REPOSITORY (owner/name on GitHub, the workflow's github.repository) names where the
# krew manifest's archives are downloaded from and where the chart's runbooks are.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf '[release] %s\n' "$*" >&2; }
die() { printf '[release] ERROR: %s\n' "$*" >&2; exit 1; }

tag=${1:?the version, e.g. v0.1.0}
[[ $tag =~ ^v([0-9]+\.[0-9]+\.[0-9]+)(-[0-9A-Za-z.-]+)?$ ]] \
  || die "$tag is not a release tag (vMAJOR.MINOR.PATCH[-PRE])"
version=${tag#v}
cargo_version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
chart_version=$(sed -n 's/^version: *//p' charts/tether/Chart.yaml | tr -d '"')
app_version=$(sed -n 's/^appVersion: *//p' charts/tether/Chart.yaml | tr -d '"')
[[ $cargo_version == "$version" ]] || die "Cargo.toml says $cargo_version, the tag $tag"
[[ $app_version == "$version" ]] || die "charts/tether/Chart.yaml's appVersion is $app_version, the tag $tag"
[[ $chart_version == "$version" ]] || die "charts/tether/Chart.yaml's version is $chart_version, the tag $tag"
repository=${TETHER_REPOSITORY:-tether-dev/tether}
helm=${HELM:-helm}
command -v "$helm" >/dev/null || die "helm is missing (HELM names one)"

case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) die "no release for $(uname -m)" ;;
esac
out=target/publish/$tag
mkdir -p "$out"
bin=$(scripts/build-static.sh)
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

# The archive: the same bytes for the same commit (sorted, owned by 0, the commit's time).
name=tether-$tag-linux-$arch
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$bin" "$stage/tether"
cp LICENSE README.md "$stage/"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
  -C "$stage" -cf - tether LICENSE README.md | gzip -n -9 >"$out/$name.tar.gz"
scripts/sbom.sh "$(uname -m)-unknown-linux-musl" "$out/$name.sbom.cdx.json"

# The chart, its alerts' runbooks pointed at this tag's docs in the repository released from.
chart_stage=$stage/chart/tether
mkdir -p "$(dirname "$chart_stage")"
cp -R charts/tether "$chart_stage"
sed -i "s|^  runbookBaseURL: .*|  runbookBaseURL: https://github.com/$repository/blob/$tag/docs/operate.md|" \
  "$chart_stage/values.yaml"
grep -q "^  runbookBaseURL: https://github.com/$repository/blob/$tag/" "$chart_stage/values.yaml" \
  || die "charts/tether/values.yaml has no alerts.runbookBaseURL to point at $tag"
"$helm" package "$chart_stage" --destination "$out" >/dev/null
[[ -f $out/tether-$chart_version.tgz ]] || die "helm wrote no $out/tether-$chart_version.tgz"

scripts/krew-manifest.sh "$out" "$tag" "$repository"
(cd "$out" && sha256sum -- *.tar.gz *.tgz *.sbom.cdx.json tether.yaml >checksums.txt)
log "wrote $out: $(cd "$out" && ls | tr '\n' ' ')"
