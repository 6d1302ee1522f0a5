"""The GPU's bits, stated honestly (docs/gpu.md "Bits"): the device code built as NVRTC builds it by default
(multiply-adds contracted into FMAs; here the emulation with ``VDBFLOW_CUDA_EMULATE_FMA=1``) differs from the
CPU's baseline target, within the per-scheme bound scripts/gpu_check_steps.py ``tolerance`` derives; built
with ``VDBFLOW_CUDA_EXACT=1`` (``--fmad=false`` on a GPU, no contraction here) it is the baseline bit for bit."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from gpu_check_steps import tolerance  # noqa: E402 - scripts/ is not a package

pytestmark = pytest.mark.slow

PROBE = """
import sys
import numpy as np
import vdbflow
from vdbflow.core.kernel import MODES
from vdbflow.devices import cuda, cuda_build, emulation

names = ("vdbflow::sample_kernel<float, 3>", "vdbflow::sample_kernel<double, 1>")
built = cuda_build.emulated_library(names)  # two entries, not the whole table: a small build
cuda._emulated_library = lambda: built
rng = np.random.default_rng(5)
vols = {
    "f3": vdbflow.Volume.from_dense(rng.standard_normal((20, 20, 20, 3)).astype(np.float32)),
    "d1": vdbflow.Volume.from_dense(rng.standard_normal((20, 20, 20))),
}
pts = rng.uniform(-1, 20, (3000, 3))
out = {}
for key, vol in vols.items():
    for mode in MODES:
        cv, cj = vdbflow.sample_grad_arrays(vol, pts, mode)
        gv, gj = vdbflow.sample_grad_arrays(vol, emulation.asarray(pts), mode, device="cuda")
        out.update({f"{key}/{mode}/cpu/v": cv, f"{key}/{mode}/cpu/j": cj, f"{key}/{mode}/gpu/v": gv.get()})
        out[f"{key}/{mode}/gpu/j"] = gj.get()
np.savez(sys.argv[1], **out)
"""


def _probe(tmp_path: Path, **env: str) -> dict[str, np.ndarray]:
    path = tmp_path / "probe.npz"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("VDBFLOW_CUDA_", "VDBFLOW_CPU_TARGET"))}
    full = {**base, "VDBFLOW_CPU_TARGET": "baseline", "VDBFLOW_CUDA_EMULATE": "1", **env}
    done = subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, env=full)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(path) as f:
        return dict(f)


def _pairs(got: dict[str, np.ndarray]):
    for key in got:
        if "/cpu/" in key:
            vol, mode, _, part = key.split("/")
            yield vol, mode, part, got[key], got[key.replace("/cpu/", "/gpu/")]


def test_contracted_device_code_stays_within_the_fma_bound(tmp_path):
    got = _probe(tmp_path, VDBFLOW_CUDA_EMULATE_FMA="1")
    differ = 0
    for vol, mode, part, cpu, gpu in _pairs(got):
        scale = 3.5  # |standard normal data| of these volumes stays below it
        tol = tolerance(mode, cpu.dtype, scale, 0 if part == "v" else 1)
        assert np.array_equal(np.isnan(cpu), np.isnan(gpu)), (vol, mode, part)
        err = float(np.nanmax(np.abs(cpu.astype(np.float64) - gpu), initial=0.0))
        assert err <= tol, (vol, mode, part, err, tol)
        differ += not np.array_equal(cpu, gpu, equal_nan=True)
    assert differ >= 10  # contraction did change bits: the bound is exercised, not vacuous


def test_exact_device_code_is_the_cpu_baseline_bit_for_bit(tmp_path):
    got = _probe(tmp_path, VDBFLOW_CUDA_EMULATE_FMA="1", VDBFLOW_CUDA_EXACT="1")
    for vol, mode, part, cpu, gpu in _pairs(got):
        np.testing.assert_array_equal(gpu, cpu, err_msg=f"{vol} {mode} {part}")
