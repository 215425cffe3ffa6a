#!/usr/bin/env bash
# The tests: installs what it needs, builds the CPU preset and runs every CPU test (label cpu),
# then the Python package's NumPy tests when the package is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh cpu
ctest --preset cpu -j "$(nproc)"
if [ -f pyproject.toml ] && [ -f scripts/test_python.sh ]; then
  bash scripts/test_python.sh
fi
