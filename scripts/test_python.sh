#!/usr/bin/env bash
# The Python package's tests (label `python`): pip install . into .venv, then pytest with NumPy
# (PyTorch/GPU tests are reported as skipped here; tests/python/run_h200.sh runs them on a GPU).
set -euo pipefail
exec bash "$(dirname "$0")/../tests/python/run_cpu.sh" "$@"
