#!/usr/bin/env bash
# Builds a C disklet into a WebAssembly module with Debian's clang + lld (no libc).
#   sdk/c/build.sh SOURCE.c OUT.wasm [MAX_MEMORY_KIB]
# The module's memory maximum (default 2048 KiB) must fit the grant it is installed with:
# scratch (adisk disklet install --scratch-kib, default 2048) + input area (2 stream buffers + 64 KiB).
set -euo pipefail
src=${1:?usage: build.sh SOURCE.c OUT.wasm [MAX_MEMORY_KIB]}
out=${2:?usage: build.sh SOURCE.c OUT.wasm [MAX_MEMORY_KIB]}
max_kib=${3:-2048}
here=$(cd "$(dirname "$0")" && pwd)
clang=${CLANG:-clang}
# Name what is missing and how to install it, rather than failing on a bare "not found".
if ! command -v "$clang" >/dev/null; then
  echo "build.sh: \`$clang\` (the C compiler for wasm32) is not installed; install it with: sudo apt-get install clang lld" >&2
  exit 127
fi
if ! command -v wasm-ld >/dev/null; then
  echo "build.sh: \`wasm-ld\` (the WebAssembly linker clang uses) is not installed; install it with: sudo apt-get install lld" >&2
  exit 127
fi
"$clang" --target=wasm32 -O2 -ffreestanding -nostdlib -mbulk-memory -I "$here" \
  -Wl,--no-entry -Wl,--strip-all -Wl,-z,stack-size=65536 -Wl,--max-memory=$((max_kib * 1024)) \
  -o "$out" "$src"
