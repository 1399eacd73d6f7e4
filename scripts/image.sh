#!/usr/bin/env bash
# Builds tether's image, FROM scratch, with no registry: a fully static binary (the musl target;
# no host library is copied) with CA certificates and a passwd naming user 65532, nothing else —
# no shell, no package manager. Reproducible: the same commit gives the same image ID on two
# builds (the binary built with paths remapped and the commit's time as SOURCE_DATE_EPOCH, every
# file and the image's creation stamped with that time). An SBOM of what went into the binary is
# written beside it (target/image/sbom.cdx.json). scripts/Dockerfile.rootfs copies the
# filesystem this script assembles in target/image/rootfs.
#
#   scripts/image.sh [TAG]       TAG defaults to tether:latest
#     ENGINE=docker|podman|buildah  the engine (docker when its daemon answers, else podman,
#                                   else buildah); podman and buildah build reproducibly
#     PROFILE=dist|release          the cargo profile (dist, fat LTO, unless told; the tests use
#                                   release, minutes faster)
#     ARCH=amd64|arm64              the image's architecture (this machine's unless told; arm64
#                                   on amd64 is cross-built, see scripts/build-static.sh: FROM
#                                   scratch, the image runs nothing while it is built)
#
# The binary comes from scripts/build-static.sh: it needs the musl target (`rustup target add
# x86_64-unknown-linux-musl`, done there when rustup is there) and a C compiler for it
# (`musl-gcc`, Debian's musl-tools: mimalloc and ring are C).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tag=${1:-tether:latest}
profile=${PROFILE:-dist}
log() { printf '[image] %s\n' "$*" >&2; }
die() { printf '[image] ERROR: %s\n' "$*" >&2; exit 1; }

engine=${ENGINE:-}
if [[ -z $engine ]]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then engine=docker
  elif command -v podman >/dev/null 2>&1; then engine=podman
  elif command -v buildah >/dev/null 2>&1; then engine=buildah
  else die "none of docker (with a daemon that answers), podman or buildah is installed"
  fi
fi
command -v "$engine" >/dev/null 2>&1 || die "ENGINE=$engine is not installed"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
# The commit's time stamps everything, so that two builds of one commit are the same bytes.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
export SOURCE_DATE_EPOCH=$epoch
case ${ARCH:-$(uname -m)} in
  x86_64|amd64) arch=x86_64 platform=linux/amd64 ;;
  aarch64|arm64) arch=aarch64 platform=linux/arm64 ;;
  *) die "ARCH=${ARCH:-$(uname -m)}: amd64 or arm64" ;;
esac
bin=$(ARCH=$arch PROFILE=$profile scripts/build-static.sh)
target=$arch-unknown-linux-musl

ctx=target/image
rm -rf "$ctx"
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
cp "$bin" "$root/usr/local/bin/tether"
ca=/etc/ssl/certs/ca-certificates.crt
[[ -f $ca ]] || die "$ca is missing (Debian's ca-certificates package provides it)"
cp "$ca" "$root$ca"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
chmod 0755 "$root/usr/local/bin/tether" "$root" "$root/usr" "$root/usr/local" "$root/usr/local/bin" \
  "$root/etc" "$root/etc/ssl" "$root/etc/ssl/certs" "$root/home"
chmod 0644 "$root$ca" "$root/etc/passwd" "$root/etc/group"
chmod 1777 "$root/tmp"
chmod 0755 "$root/home/nonroot"
find "$root" -exec touch -h -d "@$epoch" {} +
cp scripts/Dockerfile.rootfs "$ctx/Dockerfile"
scripts/sbom.sh "$target" "$ctx/sbom.cdx.json"

args=(--platform "$platform" --build-arg "TETHER_COMMIT=$commit" --build-arg "TETHER_VERSION=$version" -t "$tag" -f "$ctx/Dockerfile")
log "building $tag ($platform) with $engine"
case $engine in
  # The image's creation time and every layer's file times are the commit's; no layer is
  # taken from a cache, so a second build proves the first.
  podman) podman build --no-cache --timestamp "$epoch" "${args[@]}" "$ctx" ;;
  buildah) buildah bud --no-cache --timestamp "$epoch" "${args[@]}" "$ctx" ;;
  # docker's classic builder stamps the build's own time; buildx with
  # `--output type=docker,rewrite-timestamp=true` and SOURCE_DATE_EPOCH reproduces it.
  docker) docker build "${args[@]}" "$ctx" ;;
  *) die "unknown engine $engine (docker, podman or buildah)" ;;
esac
log "built $tag (SBOM: $ctx/sbom.cdx.json)"
