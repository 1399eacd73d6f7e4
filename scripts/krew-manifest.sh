#!/usr/bin/env bash
# Writes DIR/tether.yaml, the krew manifest of the kubectl plugin for release TAG: one platform
# per archive tether-TAG-linux-ARCH.tar.gz in DIR, with its download URL on GitHub (REPOSITORY,
# owner/name) and its sha256. scripts/release.sh runs it for its own archive; the release
# workflow runs it again once every architecture's archive is gathered.
#
#   scripts/krew-manifest.sh DIR TAG REPOSITORY
set -euo pipefail

dir=${1:?the directory of the archives}
tag=${2:?the release tag}
repository=${3:?owner/name on GitHub}
shopt -s nullglob
archives=("$dir"/tether-"$tag"-linux-*.tar.gz)
(( ${#archives[@]} )) || { echo "[krew] no archive tether-$tag-linux-*.tar.gz in $dir" >&2; exit 1; }
{
  cat <<KREW
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: tether
spec:
  version: $tag
  homepage: https://github.com/$repository
  shortDescription: Explain and simulate tether's scheduling decisions
  description: |
    tether is a Kubernetes scheduler whose profiles live in the cluster as custom resources.
    As a kubectl plugin it asks the running scheduler why a pod went where it went, or what
    keeps it pending (kubectl tether explain NAMESPACE/POD), and what a profile change would
    do before it merges (kubectl tether simulate -f PROFILE).
  platforms:
KREW
  for archive in "${archives[@]}"; do
    arch=${archive##*-linux-}; arch=${arch%.tar.gz}
    cat <<KREW
  - selector:
      matchLabels: {os: linux, arch: $arch}
    uri: https://github.com/$repository/releases/download/$tag/$(basename "$archive")
    sha256: "$(sha256sum "$archive" | cut -d' ' -f1)"
    bin: tether
KREW
  done
} >"$dir/tether.yaml"
