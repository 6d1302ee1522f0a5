"""The CUDA entry points compile ahead of time (nvcc -> PTX for sm_90), so device code cannot rot
on machines without a GPU; the CPU extension is built from the same headers."""

import re
import shutil
import subprocess

import numpy as np
import pytest

import vdbflow
from vdbflow import _core
from vdbflow.backends import cuda as cuda_backend

KERNELS = cuda_backend.kernel_dir()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on the PATH")
def test_cuda_entry_points_compile_to_ptx(tmp_path):
    out = tmp_path / "sample.ptx"
    result = subprocess.run(
        ["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", f"-I{KERNELS}", str(KERNELS / "sample.cu"), "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    entries = set(re.findall(r"\.entry\s+(\w+)", out.read_text()))
    # every entry the CUDA backend may ask for exists in the PTX
    wanted = {cuda_backend.entry_name(np.dtype(dt), c) for dt in (np.float32, np.float64) for c in (1, 3, 4, 9)}
    wanted |= {cuda_backend.entry_name(np.dtype(dt), 1) for dt in (np.int32, np.int64, np.uint32)}
    wanted |= {cuda_backend.vjp_entry_name(np.dtype(dt), c) for dt in (np.float32, np.float64) for c in (1, 3, 4, 9)}
    wanted |= {cuda_backend.hessian_entry_name(np.dtype(dt), c) for dt in (np.float32, np.float64) for c in (1, 3, 4)}
    assert wanted <= entries, wanted - entries


def test_cpu_extension_is_built_from_kernels():
    assert (KERNELS / "vdbflow" / "sample.h").is_file() and (KERNELS / "vdbflow" / "grid.h").is_file()
    assert _core.MAX_COMPONENTS == vdbflow.value_types.MAX_COMPONENTS
    from vdbflow.sampling import MODES

    assert (MODES["closest"], MODES["linear"]) == (_core.MODE_CLOSEST, _core.MODE_LINEAR)


def test_hash_tables_find_every_key(rng):
    keys = np.unique(rng.integers(-2**28, 2**28, (5000, 3)), axis=0).astype(np.int32)
    slots = np.arange(len(keys), dtype=np.int32)
    table, repeated = _core.build_table(keys, slots)
    assert repeated == -1 and len(table) >= 2 * len(keys)
    np.testing.assert_array_equal(_core.table_lookup(table, keys), slots)
    shifted = keys + np.array([1, 0, 0], np.int32)
    slot_of = {tuple(k): s for k, s in zip(keys.tolist(), slots.tolist(), strict=True)}
    expect = [slot_of.get(tuple(m), -1) for m in shifted.tolist()]
    np.testing.assert_array_equal(_core.table_lookup(table, shifted), expect)
    assert _core.build_table(np.concatenate([keys, keys[3:4]]), np.arange(len(keys) + 1, dtype=np.int32))[1] \
        == len(keys)


def test_cuda_source_compiles_with_nvrtc():
    """The run-time path: the same NVRTC that CuPy uses compiles sample.cu with the backend's options."""
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    prog = nvrtc.createProgram((KERNELS / "sample.cu").read_text(), "sample.cu", [], [])
    try:
        nvrtc.compileProgram(prog, [*cuda_backend.nvrtc_options(), "--gpu-architecture=compute_90"])
    except Exception as err:  # the log says why
        pytest.fail(f"NVRTC failed: {err}\n{nvrtc.getProgramLog(prog)}")
    assert ".entry vdbflow_sample_f32_c3" in nvrtc.getPTX(prog).decode()
