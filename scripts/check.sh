#!/usr/bin/env bash
# The main job: installs what it needs, builds (with CUDA when a GPU is present), and runs
# `flashback check`: the serving trace on the GPU when there is one (--device cuda), else on the
# CPU. Extra arguments go to it (a later --device wins).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=cpu device=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null; then
  preset=cuda device=cuda
fi
bash scripts/build.sh "$preset" >&2
exec "build/$preset/tools/flashback" check --device "$device" "$@"
