#!/usr/bin/env bash
# Installs what the static image build needs when it is missing: Rust's musl target and a C
# compiler for it (musl-gcc, Debian's musl-tools; mimalloc and ring are C); with ARCH=aarch64 on
# x86_64, Debian's aarch64 cross gcc (scripts/build-static.sh). Pinned to bookworm's
# musl-tools; a machine whose Debian no longer carries it gets the candidate, said so.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MUSL_TOOLS_VERSION=1.2.3-1
# ARCH=aarch64 (arm64) on an x86_64 machine: the cross compiler instead (bookworm's).
CROSS_GCC_VERSION=4:12.2.0-3
QEMU_VERSION=1:7.2+dfsg-7+deb12u18+b3
case ${ARCH:-$(uname -m)} in
  x86_64|amd64) ARCH=x86_64 ;;
  aarch64|arm64) ARCH=aarch64 ;;
  *) die "ARCH=${ARCH:-$(uname -m)}: x86_64 (amd64) or aarch64 (arm64)" ;;
esac
TARGET=$ARCH-unknown-linux-musl

if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  command -v rustup >/dev/null || die "the $TARGET target is missing and there is no rustup to add it"
  log "adding Rust's $TARGET target"
  rustup target add "$TARGET" >/dev/null
fi
if [[ $ARCH != "$(uname -m)" ]]; then
  # The cross compiler, and qemu-user to run what it built (e2e/tests/image.rs).
  command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64-static >/dev/null && exit 0
  command -v apt-get >/dev/null && [[ $(id -u) == 0 ]] \
    || die "aarch64-linux-gnu-gcc or qemu-aarch64-static is missing; install gcc-aarch64-linux-gnu and qemu-user-static (as root)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  for package in "gcc-aarch64-linux-gnu=$CROSS_GCC_VERSION" "qemu-user-static=$QEMU_VERSION"; do
    log "installing $package from Debian"
    if ! apt-get install -y -qq "$package" >/dev/null; then
      log "the pinned version is not available here; installing Debian's candidate"
      apt-get install -y -qq "${package%%=*}" >/dev/null
    fi
  done
  command -v aarch64-linux-gnu-gcc >/dev/null || die "gcc-aarch64-linux-gnu did not install"
  command -v qemu-aarch64-static >/dev/null || die "qemu-user-static did not install"
  exit 0
fi
command -v musl-gcc >/dev/null && exit 0
command -v apt-get >/dev/null || die "musl-gcc is missing and this machine has no apt-get; install musl-tools"
[[ $(id -u) == 0 ]] || die "musl-gcc is missing; install musl-tools (apt-get install musl-tools, as root)"
log "installing musl-tools $MUSL_TOOLS_VERSION from Debian"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if ! apt-get install -y -qq "musl-tools=$MUSL_TOOLS_VERSION" >/dev/null; then
  log "the pinned version is not available here; installing Debian's candidate"
  apt-get install -y -qq musl-tools >/dev/null
fi
command -v musl-gcc >/dev/null || die "musl-tools did not install"
