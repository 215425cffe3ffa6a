#!/usr/bin/env bash
# Collects the C/C++ dependencies the GPU machine lacks (DLPack's header, Highway's headers and
# shared library, from this Debian machine's packages; see scripts/deps.sh) into .h200deps/,
# which git ignores locally (.git/info/exclude) and the device run carries.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$repo/.h200deps}
rm -rf "$out"
mkdir -p "$out/include" "$out/lib"
cp -r /usr/include/dlpack /usr/include/hwy "$out/include/"
cp "$(readlink -f /usr/lib/x86_64-linux-gnu/libhwy.so)" "$out/lib/libhwy.so.1"
ln -s libhwy.so.1 "$out/lib/libhwy.so"
grep -qx '/.h200deps/' "$repo/.git/info/exclude" 2>/dev/null || echo '/.h200deps/' >> "$repo/.git/info/exclude"
echo "$out: $(du -sh "$out" | cut -f1)"
