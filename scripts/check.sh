#!/usr/bin/env bash
# The main job: installs what it needs, builds (with CUDA when a GPU is present), and runs
# `flashback check` (the serving trace runs on the CPU for now). Extra arguments go to it.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null; then
  preset=cuda
fi
bash scripts/build.sh "$preset" >&2
exec "build/$preset/tools/flashback" check "$@"
