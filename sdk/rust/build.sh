#!/usr/bin/env bash
# Builds the Rust disklet examples (sdk/rust/examples/*) into WebAssembly modules and copies
# them to OUT_DIR as NAME.wasm (count_if.wasm, histogram.wasm, …).
#   sdk/rust/build.sh OUT_DIR [EXAMPLE…]          (default: every example)
# Needs cargo and Rust's wasm32-unknown-unknown target (rustup target add wasm32-unknown-unknown).
# The modules declare a memory maximum of ADISK_MAX_MEMORY_KIB (default 2048 KiB, whole 64 KiB
# pages); it must fit the grant they are installed with: scratch (adisk disklet install
# --scratch-kib, default 2048) + input area (2 stream buffers + 64 KiB) per input.
# Cargo builds in ADISK_SDK_RUST_TARGET_DIR (default /tmp/sdk-rust-target): never the main
# workspace's target directory, whose lock a running `cargo test` holds. ADISK_JOBS: cargo -j
# (default 1).
set -euo pipefail
usage="usage: build.sh OUT_DIR [EXAMPLE…]"
out=${1:?$usage}
shift
here=$(cd "$(dirname "$0")" && pwd)
target=wasm32-unknown-unknown

# Name what is missing and how to install it, rather than failing on a bare "not found".
if ! command -v cargo >/dev/null || ! command -v rustc >/dev/null; then
  echo "build.sh: \`cargo\` and \`rustc\` (Rust) are not installed; install them with: curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal && rustup target add $target" >&2
  exit 127
fi
# The toolchain cargo will use here (rust-toolchain files and RUSTUP_TOOLCHAIN apply).
sysroot=$(cd "$here" && rustc --print sysroot)
if [ ! -d "$sysroot/lib/rustlib/$target/lib" ]; then
  echo "build.sh: Rust's $target target is not installed for $(cd "$here" && rustc --version); install it with: rustup target add $target" >&2
  exit 127
fi

if [ $# -eq 0 ]; then
  for dir in "$here"/examples/*/; do
    [ -f "$dir/Cargo.toml" ] && set -- "$@" "$(basename "$dir")"
  done
fi
packages=()
for name in "$@"; do
  if [ ! -f "$here/examples/$name/Cargo.toml" ]; then
    echo "build.sh: no example \`$name\` in $here/examples" >&2
    exit 64
  fi
  packages+=(-p "adisk-example-${name//_/-}")
done

export CARGO_TARGET_DIR=${ADISK_SDK_RUST_TARGET_DIR:-/tmp/sdk-rust-target}
(cd "$here" && cargo build --quiet --release --target "$target" -j "${ADISK_JOBS:-1}" "${packages[@]}")

mkdir -p "$out"
for name in "$@"; do
  cp "$CARGO_TARGET_DIR/$target/release/$name.wasm" "$out/$name.wasm"
done
