#!/usr/bin/env bash
# Installs what the static image build needs when it is missing: Rust's musl target and a C
# compiler for it (musl-gcc, Debian's musl-tools; mimalloc and ring are C). Pinned to bookworm's
# musl-tools; a machine whose Debian no longer carries it gets the candidate, said so.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MUSL_TOOLS_VERSION=1.2.3-1
TARGET=$(uname -m)-unknown-linux-musl

if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  command -v rustup >/dev/null || die "the $TARGET target is missing and there is no rustup to add it"
  log "adding Rust's $TARGET target"
  rustup target add "$TARGET" >/dev/null
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
