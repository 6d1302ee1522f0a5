#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and CuPy: runs the GPU tests and the GPU benchmark
# in one go and leaves their output under $OUT (default ./gpu-results).
#
#   WHEELHOUSE=/path/to/wheels scripts/gpu_check.sh   # offline: install vdbflow from built wheels
#   scripts/gpu_check.sh                              # online: pip install -e . from this checkout
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  python -c "import cupy; print('cupy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion())"
} 2>&1 | tee "$OUT/machine.txt"
if [ -n "${WHEELHOUSE:-}" ]; then
  python -m pip install --no-index --find-links "$WHEELHOUSE" vdbflow pytest hypothesis 2>&1 | tail -n 3
else
  python -m pip install -e ".[test]" 2>&1 | tail -n 3
fi
status=0
python -m pytest -v -m gpu tests/test_gpu.py tests/test_kernels_build.py 2>&1 | tee "$OUT/gpu-tests.txt" || status=1
python benchmarks/bench_sample_grad.py --device cuda --no-warp --json "$OUT/bench-gpu.json" 2>&1 \
  | tee "$OUT/bench-gpu.txt" || status=1
exit $status
