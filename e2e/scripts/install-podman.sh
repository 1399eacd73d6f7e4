#!/usr/bin/env bash
# Installs podman and runc from Debian's packages when they are missing (the image test builds
# tether's image and runs it; no container registry is needed, the image is built FROM scratch).
# Pinned to bookworm's versions; a machine whose Debian no longer carries them gets the
# candidate, said so.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PODMAN_VERSION=4.3.1+ds1-8+deb12u1+b3
RUNC_VERSION=1.1.5+ds1-1+deb12u1

if command -v podman >/dev/null && command -v runc >/dev/null; then
  exit 0
fi
command -v apt-get >/dev/null || die "podman and runc are missing and this machine has no apt-get; install them"
log "installing podman $PODMAN_VERSION and runc $RUNC_VERSION from Debian"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if ! apt-get install -y -qq "podman=$PODMAN_VERSION" "runc=$RUNC_VERSION" >/dev/null; then
  log "the pinned versions are not available here; installing Debian's candidates"
  apt-get install -y -qq podman runc >/dev/null
fi
command -v podman >/dev/null && command -v runc >/dev/null || die "podman or runc did not install"
log "$(podman --version), $(runc --version | head -n1)"
