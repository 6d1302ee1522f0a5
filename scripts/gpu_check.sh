#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: in one run of at most 8 minutes, with results under $OUT
# (default ./gpu-results):
#   1. the machine (nvidia-smi, CuPy, NVRTC);
#   2. the CUDA entries built into an empty cache for this GPU (vdbflow build-cuda: compile seconds,
#      registers, stack, spills) and a fresh process's first GPU call on the warm cache (cache-load time);
#   3. every GPU test, on the GPU (VDBFLOW_REQUIRE_GPU=1: without CuPy or a GPU the tests fail, they do not
#      fall back to the emulation), and the count of those that ran: none is a failure;
#   4. sample_grad on device points, sorted and random, against the memory (HBM) bound, the pinned host
#      path and a job against its kernel (benchmarks/bench_gpu_job.py), and the single-GPU benchmark.
# It fails (exit 1) when CuPy is missing, when no GPU is visible, when no GPU test ran, or when a step fails.
#
#   WHEELHOUSE=/path/to/wheels scripts/gpu_check.sh   # offline: vdbflow, its test and GPU needs from a
#                                                     # wheelhouse made by scripts/gpu_wheelhouse.sh
#   scripts/gpu_check.sh                              # online: pip install -e ".[test,gpu-cuda13]" here
#   GPU_EXTRA=gpu scripts/gpu_check.sh                # a CUDA 12 host (default: gpu-cuda13)
# The steps' time limits add up to 8 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}
GPU_EXTRA=${GPU_EXTRA:-gpu-cuda13}
mkdir -p "$OUT"
export VDBFLOW_CUDA_CACHE="$(pwd)/$OUT/cuda-cache" VDBFLOW_REQUIRE_GPU=1
unset VDBFLOW_CUDA_EMULATE
rm -rf "$VDBFLOW_CUDA_CACHE"
if [ -n "${WHEELHOUSE:-}" ]; then
  timeout 90 python -m pip install --no-index --find-links "$WHEELHOUSE" "vdbflow[test,$GPU_EXTRA]" 2>&1 | tail -n 3
else
  timeout 90 python -m pip install -e ".[test,$GPU_EXTRA]" 2>&1 | tail -n 3
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  python -c "import cupy; print('cupy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(),
'GPUs', cupy.cuda.runtime.getDeviceCount())"
} 2>&1 | tee "$OUT/machine.txt"
if ! python -c "import cupy, sys; sys.exit(0 if cupy.cuda.runtime.getDeviceCount() > 0 else 1)" 2>/dev/null; then
  echo "gpu_check: CuPy is missing or sees no GPU: nothing to check" | tee -a "$OUT/machine.txt"
  exit 1
fi
status=0
# 2. build into the empty cache, then a fresh process's first call on the warm cache
timeout 110 vdbflow build-cuda --json > "$OUT/build-cuda.json" 2> "$OUT/build-cuda.err" || status=1
timeout 30 vdbflow build-cuda | tee "$OUT/build-cuda.txt" || status=1   # every entry cached now: the table
timeout 30 python - <<'PY' 2>&1 | tee "$OUT/cache-load.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
import time

t0 = time.perf_counter()
import cupy
import numpy as np

import vdbflow
from vdbflow.devices import cuda, cuda_build

t1 = time.perf_counter()
vol = vdbflow.Volume.from_dense(np.random.rand(32, 32, 32, 3).astype(np.float32))
pts = cupy.random.uniform(0, 31, (100_000, 3))
t2 = time.perf_counter()
v, j = vdbflow.sample_grad_arrays(vol, pts, device="cuda")
cupy.cuda.Device().synchronize()
t3 = time.perf_counter()
print(f"imports {t1 - t0:.2f} s; first GPU call on the warm cache {t3 - t2:.3f} s; {cuda_build.build_summary()}")
if "compiled" in cuda_build.build_summary() or t3 - t2 > 1.0:
    raise SystemExit("expected the first call to load its entry from the cache in under a second")
PY
# 3. every GPU test, on the GPU; none run is a failure
timeout 130 python -m pytest -v -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
ran=$(grep -cE "^tests/test_gpu\.py::.* PASSED" "$OUT/gpu-tests.txt" || true)
echo "GPU tests passed on the GPU: $ran" | tee -a "$OUT/gpu-tests.txt"
[ "$ran" -gt 0 ] || { echo "gpu_check: no GPU test ran" | tee -a "$OUT/gpu-tests.txt"; status=1; }
# 4. the kernel against the memory bound, the host path and a job against the kernel
timeout 50 python benchmarks/bench_gpu_job.py --device cuda --points 16000000 --json "$OUT/bench-gpu-job.json" \
  2>&1 | grep -v INFO | tee "$OUT/bench-gpu-job.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
timeout 40 python benchmarks/bench_sample_grad.py --device cuda --no-warp --json "$OUT/bench-gpu.json" 2>&1 \
  | tee "$OUT/bench-gpu.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "gpu_check: exit $status" | tee -a "$OUT/machine.txt"
exit $status
