#!/usr/bin/env bash
# A wheelhouse for scripts/gpu_check.sh on a GPU host without the package registries: vdbflow's own wheel
# (its CPU extension built here, so build on the GPU host's platform and Python minor version) and every
# wheel it and its test extra need, with the CUDA extra that matches the host's driver.
#
#   scripts/gpu_wheelhouse.sh [WHEELHOUSE] [EXTRA]     # defaults: ./wheelhouse, gpu-cuda13 (or: gpu, CUDA 12)
#
# Then carry WHEELHOUSE to the GPU host and run: WHEELHOUSE=/path/to/wheelhouse scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELHOUSE=${1:-wheelhouse}
EXTRA=${2:-gpu-cuda13}
mkdir -p "$WHEELHOUSE"
python -m pip wheel --no-deps --wheel-dir "$WHEELHOUSE" .          # vdbflow, with its compiled CPU kernels
python -m pip download --dest "$WHEELHOUSE" ".[test,$EXTRA]"        # what it, the tests and the GPU need
ls "$WHEELHOUSE" | wc -l | xargs echo "wheels in $WHEELHOUSE:"
