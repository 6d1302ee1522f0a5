#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py): every step in a process of its own with its own time limit, PASS/FAIL
# a step, exit 0 only when every step passed, the JSON summary in $OUT/gpu-check.json when OUT is set.
#
#   scripts/gpu_check.sh                       # a GPU machine whose Python has vdbflow (checks, installs nothing)
#   WHEELHOUSE=/path scripts/gpu_check.sh      # offline: a venv of its own filled from scripts/gpu_wheelhouse.sh's
#   scripts/gpu_check.sh --emulate             # every step on the CPU under VDBFLOW_CUDA_EMULATE=1 (CI runs this)
#
# PYTHON names the interpreter (default: python3, the image's, that holds CuPy).
set -uo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
