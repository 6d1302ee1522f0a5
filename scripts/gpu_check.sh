#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU and CuPy: in one run of at most 5 minutes, the GPU tests,
# the single-GPU benchmark, the host path of a GPU worker against its kernel (sorted and random points
# against the memory bound, pinned pipeline, a job; benchmarks/bench_gpu_job.py) and the distributed
# GPU throughput (one worker per GPU when dask-cuda is there, else one worker process); output under
# $OUT (default ./gpu-results).
#
#   WHEELHOUSE=/path/to/wheels scripts/gpu_check.sh   # offline: install vdbflow (and dask) from wheels
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
  python -m pip install --no-index --find-links "$WHEELHOUSE" vdbflow pytest hypothesis dask distributed 2>&1 | tail -n 3
else
  python -m pip install -e ".[test]" 2>&1 | tail -n 3
fi
status=0
timeout 120 python -m pytest -v -m gpu tests/test_gpu.py tests/test_kernels_build.py 2>&1 | tee "$OUT/gpu-tests.txt" \
  || status=1
timeout 60 python benchmarks/bench_sample_grad.py --device cuda --no-warp --json "$OUT/bench-gpu.json" 2>&1 \
  | tee "$OUT/bench-gpu.txt" || status=1
timeout 60 python benchmarks/bench_gpu_job.py --device cuda --points 16000000 --json "$OUT/bench-gpu-job.json" \
  2>&1 | grep -v INFO | tee "$OUT/bench-gpu-job.txt" || status=1
timeout 60 python - <<'PY' 2>&1 | tee "$OUT/bench-distributed-gpu.txt" || status=1
import time

import cupy
import dask
import distributed
import numpy as np

import vdbflow
from vdbflow import synthetic

vol = synthetic.flow_volume(synthetic.taylor_green(), 256)
lo, hi = vol.topology.index_bbox
n = 32_000_000
pts = np.random.default_rng(0).uniform(lo, hi + 1, (n, 3))
single = vdbflow.sample_grad_arrays(vol, cupy.asarray(pts), space="index", device="cuda")
cupy.cuda.Device().synchronize()
t = time.perf_counter()
vdbflow.sample_grad_arrays(vol, cupy.asarray(pts), space="index", device="cuda")
cupy.cuda.Device().synchronize()
t_single = time.perf_counter() - t
try:
    from dask_cuda import LocalCUDACluster as Cluster
    kwargs = {}
except ImportError:
    Cluster, kwargs = distributed.LocalCluster, {"n_workers": 1, "threads_per_worker": 1}
with Cluster(**kwargs) as cl, distributed.Client(cl) as client, vdbflow.distribute(vol, client, 8) as dvol:
    import dask.array as da
    held = client.persist(da.from_array(pts, chunks=(1 << 23, 3)))
    distributed.wait(held)
    ds = dvol.sample_grad(held, space="index", device="cuda")
    dask.compute(ds["velocity"].data.sum())
    t = time.perf_counter()
    ds = dvol.sample_grad(held, space="index", device="cuda")
    dask.compute(ds["velocity"].data.sum(), ds["velocity_jacobian"].data.sum())
    t_dist = time.perf_counter() - t
print(f"single GPU: {n / t_single / 1e6:.1f} M samples/s; distributed (8 partitions, {Cluster.__name__}): "
      f"{n / t_dist / 1e6:.1f} M samples/s")
PY
exit $status
