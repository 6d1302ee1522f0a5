#!/usr/bin/env bash
# A wheelhouse for scripts/gpu_check.sh on a GPU machine without the registries (scripts/gpu_wheelhouse.py):
# what vdbflow and its GPU extra need that the machine's image lacks, for the machine's Python, at most 50 MB.
#
#   scripts/gpu_wheelhouse.sh [WHEELHOUSE] [EXTRA] [PYTHON_VERSION]   # defaults: ./.wheelhouse gpu-cuda13 3.12
#
# Then carry WHEELHOUSE to the GPU machine and run: WHEELHOUSE=/path/to/wheelhouse scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/gpu_wheelhouse.py "${1:-.wheelhouse}" --extra "${2:-gpu-cuda13}" --python-version "${3:-3.12}"
