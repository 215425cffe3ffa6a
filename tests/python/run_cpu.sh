#!/usr/bin/env bash
# The Python package's CI job: in a virtualenv (default .venv, ignored by git), installs the
# pinned test requirements, builds and installs the package with `pip install .` (through CMake;
# CUDA off: CI has no GPU and compiles CUDA elsewhere), and runs the pytest suite from outside
# the source tree. Tests that need PyTorch or a GPU are reported as skipped.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${FLASHBACK_VENV:-$repo/.venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q -r "$repo/tests/python/requirements.txt"
echo "=== pip install . (flashback Python package)" >&2
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$venv/bin/python" -m pip install -q -C cmake.define.FLASHBACK_CUDA=OFF "$repo"
cd /tmp  # import the installed package, not the source tree
exec "$venv/bin/python" -m pytest "$repo/tests/python" -p no:cacheprovider -rsxX "${@:--q}"
