#!/usr/bin/env bash
# Builds the Python package on the GPU machine and runs every Python test there, the CUDA ones
# (PyTorch tensors) included. That machine has Python 3.12 with PyTorch, nanobind,
# scikit-build-core and pytest but reaches no package index, so the build uses the installed
# build tools (--no-build-isolation). Headers and libraries it lacks (DLPack, Highway) can be put
# in $FLASHBACK_DEPS (include/, lib/; default .h200deps) by tests/python/h200_deps.sh on a Debian
# machine, and carried along.
#
#   bash tests/python/run_h200.sh [pytest args...]
# Environment: PYTHON (python3), FLASHBACK_HEAD_DIMS (CUDA head dims to build, default 128),
# FLASHBACK_CUDA (ON/OFF, default: on when nvcc is found).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
py=${PYTHON:-python3}
deps=${FLASHBACK_DEPS:-$repo/.h200deps}

defs=(-C "cmake.define.FLASHBACK_HEAD_DIMS=${FLASHBACK_HEAD_DIMS:-128}" -C "build-dir=build/h200")
[ -n "${FLASHBACK_CUDA:-}" ] && defs+=(-C "cmake.define.FLASHBACK_CUDA=$FLASHBACK_CUDA")
if [ -d "$deps" ]; then
  defs+=(-C "cmake.define.CMAKE_PREFIX_PATH=$deps")
  export LD_LIBRARY_PATH="$deps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

echo "=== building flashback (python: $($py --version 2>&1))" >&2
$py -m pip install --no-build-isolation --no-deps --no-index "${defs[@]}" . >&2

echo "=== pytest" >&2
cd /tmp  # import the installed package, not the source tree
$py - <<'PY'
import flashback, torch
print("flashback", flashback.__version__, "from", flashback.__file__)
print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "")
PY
exec $py -m pytest "$repo/tests/python" -p no:cacheprovider -rsxX "${@:--q}"
