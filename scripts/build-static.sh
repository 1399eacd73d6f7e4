#!/usr/bin/env bash
# Builds tether as a fully static binary (the musl target; no host library is linked),
# reproducibly: paths remapped, the commit's time as SOURCE_DATE_EPOCH. Prints the binary's path.
# scripts/image.sh and scripts/release.sh both build through here, so that one build serves both.
#
#   scripts/build-static.sh            PROFILE=dist|release (dist, fat LTO, unless told)
#                                      ARCH=x86_64|aarch64 (amd64|arm64; this machine's unless told)
#
# Needs Rust's <arch>-unknown-linux-musl target (added here when rustup is there) and a C
# compiler for it (mimalloc and ring are C): musl-gcc (Debian's musl-tools) for this machine's
# architecture; for aarch64 on x86_64, Debian's gcc-aarch64-linux-gnu, its compiler and linker,
# with Rust's own (self-contained) musl C library and start files. e2e/scripts/install-musl.sh
# (ARCH likewise) installs them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

profile=${PROFILE:-dist}
log() { printf '[build] %s\n' "$*" >&2; }
die() { printf '[build] ERROR: %s\n' "$*" >&2; exit 1; }
host=$(uname -m)
case ${ARCH:-$host} in
  x86_64|amd64) arch=x86_64 ;;
  aarch64|arm64) arch=aarch64 ;;
  *) die "ARCH=${ARCH:-$host}: x86_64 (amd64) or aarch64 (arm64)" ;;
esac
target=$arch-unknown-linux-musl

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
  command -v rustup >/dev/null || die "the $target target is missing and there is no rustup to add it"
  log "adding the $target target"
  rustup target add "$target" >/dev/null
fi
# The C compiler, and for a cross build the linker, with Rust's self-contained musl.
cross_flags=""
if [[ $arch == "$host" ]]; then
  cc=musl-gcc
  command -v musl-gcc >/dev/null \
    || die "musl-gcc is missing: install musl-tools (apt-get install musl-tools, or e2e/scripts/install-musl.sh)"
elif [[ $arch == aarch64 && $host == x86_64 ]]; then
  cc=aarch64-linux-gnu-gcc
  command -v "$cc" >/dev/null \
    || die "$cc is missing: install gcc-aarch64-linux-gnu (ARCH=aarch64 e2e/scripts/install-musl.sh)"
  cross_flags="-C linker=$cc -C link-self-contained=yes"
else
  die "no cross build from $host to $arch here"
fi

commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
target_dir=${CARGO_TARGET_DIR:-target}
# Every path that could reach the binary (panic locations, generated code) is remapped: the
# checkout, the target directory, the registry's sources.
flags="-C target-feature=+crt-static $cross_flags --remap-path-prefix=$PWD=/tether --remap-path-prefix=$(realpath -m "$target_dir")=/target --remap-path-prefix=$cargo_home=/cargo"
target_env=$(echo "$target" | tr 'a-z-' 'A-Z_')
log "building tether ($commit) for $target, profile $profile"
# RUSTFLAGS, when set, would replace the target's flags (and the remapping with them).
env -u RUSTFLAGS TETHER_COMMIT="$commit" "CC_${target//-/_}=$cc" "CARGO_TARGET_${target_env}_RUSTFLAGS=$flags" \
  cargo build --quiet --profile "$profile" --locked --target "$target" --bin tether >&2
bin=$target_dir/$target/$profile/tether
if command -v file >/dev/null && file "$bin" | grep -q 'dynamically linked'; then
  die "$bin is dynamically linked"
fi
echo "$bin"
