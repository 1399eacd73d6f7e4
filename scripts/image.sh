#!/usr/bin/env bash
# Builds tether's image, FROM scratch: the release binary with exactly what it needs to run (the
# shared libraries `ldd` names, CA certificates, a passwd naming user 65532) and nothing else —
# no shell, no package manager, what a distroless base gives, but without pulling one: no
# registry needs to be reachable. The Dockerfile copies the filesystem this script assembles in
# target/image/rootfs; it is the image's only definition.
#
#   scripts/image.sh [TAG]           (TAG defaults to tether:latest; ENGINE=docker|podman|buildah)
#
# The engine: docker when its daemon answers, else podman, else buildah.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tag=${1:-tether:latest}
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
log "building tether $version ($commit), profile dist (release, fat LTO)"
TETHER_COMMIT=$commit cargo build --profile dist --locked --bin tether
bin=target/dist/tether

ctx=target/image
rm -rf "$ctx"
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
cp "$bin" "$root/usr/local/bin/tether"
# The dynamic loader and the libraries the binary links, at the paths it looks them up.
libs=$(ldd "$bin" | awk '/=> \// {print $3} /^[[:space:]]*\/[^ ]*ld-linux/ {print $1}')
[[ -n $libs ]] || die "ldd named no libraries for $bin"
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
ca=/etc/ssl/certs/ca-certificates.crt
[[ -f $ca ]] || die "$ca is missing (Debian's ca-certificates package provides it)"
cp "$ca" "$root$ca"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
chmod 1777 "$root/tmp"
chown -R 65532:65532 "$root/home/nonroot" 2>/dev/null || true
cp Dockerfile "$ctx/Dockerfile"

args=(--build-arg "TETHER_COMMIT=$commit" --build-arg "TETHER_VERSION=$version" -t "$tag" -f "$ctx/Dockerfile" "$ctx")
log "building $tag with $engine"
case $engine in
  docker) docker build "${args[@]}" ;;
  podman) podman build "${args[@]}" ;;
  buildah) buildah bud "${args[@]}" ;;
  *) die "unknown engine $engine (docker, podman or buildah)" ;;
esac
log "built $tag"
