"""The CUDA entry points compile ahead of time (nvcc -> PTX for sm_90), so device code cannot rot
on machines without a GPU; the CPU extension is built from the same headers."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from sampling import sample

import vdbflow
import vdbflow.core.value_types
from vdbflow import _core
from vdbflow.devices import cuda as cuda_backend
from vdbflow.devices import cuda_launch

KERNELS = cuda_backend.kernel_dir()


@pytest.mark.skipif(
    shutil.which("nvcc") is None or shutil.which("c++filt") is None, reason="nvcc or c++filt is not on the PATH"
)
@pytest.mark.slow
def test_cuda_entry_points_compile_to_ptx(tmp_path):
    """sample.cu compiles with nvcc, with every template instance the CUDA backend asks NVRTC for
    (its name expressions) instantiated explicitly, and each instance is an entry of the PTX; the
    device side lays the kernel record out byte for byte as the CPU extension reports it."""
    names = cuda_backend.name_expressions()
    # a sample of the instances (one a template, drawn each run: tests/sampling.py); `vdbflow build-cuda
    # --arch sm_90 --json` compiles every entry, and tests/test_nvrtc.py samples them with NVRTC
    families: dict[str, list[str]] = {}
    for name in names:
        families.setdefault(name.split("<", 1)[0], []).append(name)
    compiled = [x for family, members in sorted(families.items()) for x in sample(members, 1, f"ptx {family}")]
    # the device compilation lays KernelAbi out as the CPU extension does (its exported offsets)
    layout = [f'static_assert(sizeof(vdbflow::KernelAbi) == {_core.ABI_SIZE}, "KernelAbi size");\n']
    layout += [
        f'static_assert(offsetof(vdbflow::KernelAbi, {name}) == {offset}, "KernelAbi::{name}");\n'
        for name, _, offset, _ in _core.ABI_FIELDS
    ]
    wrapper = tmp_path / "instances.cu"
    wrapper.write_text(
        '#include <cstddef>\n#include "sample.cu"\n'
        + "".join(layout)
        + "".join(f"void* vdbflow_instance_{i} = (void*)&{name};\n" for i, name in enumerate(compiled))
    )
    out = tmp_path / "sample.ptx"
    result = subprocess.run(
        ["nvcc", "-ptx", "-arch=sm_90", "-std=c++17", f"-I{KERNELS}", str(wrapper), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    mangled = re.findall(r"\.entry\s+(\w+)", out.read_text())
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True).stdout
    entries = {line.split("(")[0].removeprefix("void ") for line in demangled.splitlines()}
    # every instance the CUDA backend may ask for exists in the PTX
    wanted = {cuda_launch.entry_name(np.dtype(dt), c) for dt in (np.float32, np.float64) for c in (1, 3, 4, 9)}
    wanted |= {cuda_launch.entry_name(np.dtype(dt), 1) for dt in (np.int32, np.int64, np.uint32)}
    wanted |= {
        cuda_backend.entry("sample_vjp", np.dtype(dt), c) for dt in (np.float32, np.float64) for c in (1, 3, 4, 9)
    }
    wanted |= {
        cuda_backend.entry("sample_hessian", np.dtype(dt), c) for dt in (np.float32, np.float64) for c in (1, 3, 4)
    }
    wanted |= {
        cuda_backend.entry("grid_gradient", np.dtype(dt), c) for dt in (np.float32, np.float64) for c in (1, 3, 4, 9)
    }
    assert wanted <= set(names), wanted - set(names)
    plain = {  # the extern "C" entry points
        "vdbflow_route_partition",
        "vdbflow_stencil_inside",
        "vdbflow_defined_voxels",
        "vdbflow_scatter_rows",
        "vdbflow_active_voxels_at",
    }
    assert set(compiled) | plain <= entries, (set(compiled) | plain) - entries


def test_cpu_extension_is_built_from_kernels():
    assert (KERNELS / "vdbflow" / "sample.h").is_file() and (KERNELS / "vdbflow" / "grid.h").is_file()
    assert _core.MAX_COMPONENTS == vdbflow.core.value_types.MAX_COMPONENTS
    from vdbflow.ops.sampling import MODES

    assert (MODES["closest"], MODES["linear"]) == (_core.MODE_CLOSEST, _core.MODE_LINEAR)
    assert list(MODES.values()) == list(range(_core.SCHEME_LAST + 1))


def test_stencil_reach_is_what_sampling_reads(rng):
    """The reach the kernels export (STENCIL_RADIUS) is the stencil's real reach: a point's value or
    Jacobian changes when the voxel `reach` steps beyond its base cell changes, and never beyond that."""
    from vdbflow.ops.sampling import STENCIL_RADIUS

    ijk = np.stack(np.meshgrid(*[np.arange(-8, 9)] * 3, indexing="ij"), -1).reshape(-1, 3)
    base = rng.standard_normal(len(ijk))
    for mode, reach in STENCIL_RADIUS.items():
        point = np.array([[0.3, 0.45, 0.6]]) if mode != "closest" else np.array([[0.6, 0.2, 0.2]])
        ref = np.concatenate(vdbflow.sample_grad_arrays(vdbflow.Volume.from_voxels(ijk, base), point, mode), axis=None)
        for step, changes in ((reach, True), (reach + 1, False)):
            bumped = base.copy()
            bumped[np.all(ijk == (step, 0, 0), axis=1)] += 1.0
            got = np.concatenate(
                vdbflow.sample_grad_arrays(vdbflow.Volume.from_voxels(ijk, bumped), point, mode), axis=None
            )
            assert (got != ref).any() == changes, (mode, step)


def test_hash_tables_find_every_key(rng):
    keys = np.unique(rng.integers(-(2**28), 2**28, (5000, 3)), axis=0).astype(np.int32)
    slots = np.arange(len(keys), dtype=np.int32)
    table, repeated = _core.build_table(keys, slots)
    assert repeated == -1 and len(table) >= 2 * len(keys)
    np.testing.assert_array_equal(_core.table_lookup(table, keys), slots)
    shifted = keys + np.array([1, 0, 0], np.int32)
    slot_of = {tuple(k): s for k, s in zip(keys.tolist(), slots.tolist(), strict=True)}
    expect = [slot_of.get(tuple(m), -1) for m in shifted.tolist()]
    np.testing.assert_array_equal(_core.table_lookup(table, shifted), expect)
    assert _core.build_table(np.concatenate([keys, keys[3:4]]), np.arange(len(keys) + 1, dtype=np.int32))[1] == len(
        keys
    )


# --- CPU targets: a portable baseline, and the point loops compiled again for wider vector units ---

# Run in a fresh interpreter with VDBFLOW_CPU_TARGET set: every entry point of the kernel table
# (values and Jacobians in both point orders, integer closest values, Hessians, the reverse mode,
# grid gradients) on one random volume.
TARGET_PROBE = """
import sys
import numpy as np
import vdbflow
from vdbflow import _core
from vdbflow.devices import cpu

rng = np.random.default_rng(7)
ijk = np.unique(rng.integers(-20, 20, (4000, 3)), axis=0)
data = rng.standard_normal((len(ijk), 3)).astype(np.float32)
vol = vdbflow.Volume.from_voxels(ijk, data, background=[0.5, -1.0, 2.0])
pts = rng.uniform(-24, 24, (30000, 3))
out = {}
for order in ("coherent", "scattered"):
    v, j = vdbflow.sample_grad_arrays(vol, pts, "linear", point_order=order)
    out[f"linear_{order}_value"], out[f"linear_{order}_jacobian"] = v, j
v, j = vdbflow.sample_grad_arrays(vol, pts, "lag4")
out["lag4_value"], out["lag4_jacobian"] = v, j
_, _, h = vdbflow.sample_hessian_arrays(vol, pts[:5000], "lag4")
out["lag4_hessian"] = h
r = vdbflow.sample_grad_vjp(vol, pts[:5000], np.ones((5000, 3), np.float32), np.ones((5000, 3, 3), np.float32))
out["vjp_points"], out["vjp_voxels"] = r.points, r.voxel_data
out["grid_fd4"] = vdbflow.gradient_field(vol, "fd4").voxel_data
ints = vdbflow.Volume.from_voxels(ijk, rng.integers(-1000, 1000, len(ijk)).astype(np.int32))
out["int_closest"] = vdbflow.sample_grad_arrays(ints, pts, "closest", jacobian=False)[0]
np.savez(sys.argv[1], **out)
print(_core.CPU_TARGET, cpu.CPU_TARGET)
"""


def _probe(tmp_path, target: str) -> tuple[str, dict[str, np.ndarray]]:
    path = tmp_path / f"{target}.npz"
    env = {**os.environ, "VDBFLOW_CPU_TARGET": target}
    flags = ["-S"] if sys.flags.no_site else []
    result = subprocess.run(
        [sys.executable, *flags, "-W", "error::RuntimeWarning", "-c", TARGET_PROBE, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    with np.load(path) as f:
        return result.stdout.split()[0], dict(f)


def test_cpu_targets_are_reported():
    targets, supported = _core.CPU_TARGETS, _core.CPU_TARGETS_SUPPORTED
    assert targets[0] == supported[0]  # the baseline (or native) build runs here
    assert set(supported) <= set(targets) and _core.CPU_TARGET in supported
    if targets[0] == "native":  # VDBFLOW_NATIVE=ON: one target, tuned for the build machine
        assert targets == ("native",) and _core.CPU_TARGET_FLAGS == "-march=native"
    else:
        assert _core.CPU_TARGET_FLAGS == ("" if _core.CPU_TARGET == targets[0] else f"-march={_core.CPU_TARGET}")
    if os.environ.get("VDBFLOW_CPU_TARGET", "auto") == "auto":  # the widest this CPU runs
        assert _core.CPU_TARGET == supported[-1]


def test_every_cpu_target_runs_and_agrees(tmp_path):
    """Each target the CPU supports runs when asked for and gives the same results, up to the last bits
    (FMA contraction); a wider target really is another compilation: its results differ from the
    baseline's in the last bits somewhere."""
    results = {}
    for target in _core.CPU_TARGETS_SUPPORTED:
        ran, results[target] = _probe(tmp_path, "baseline" if target == _core.CPU_TARGETS[0] else target)
        assert ran == target
    base = results[_core.CPU_TARGETS[0]]
    for target, got in results.items():
        for key, ref in base.items():
            if key == "int_closest":
                np.testing.assert_array_equal(got[key], ref, err_msg=target)
                continue
            scale = float(np.abs(ref).max()) if ref.size else 1.0
            tol = 64 * np.finfo(ref.dtype).eps * max(scale, 1.0)
            np.testing.assert_allclose(got[key], ref, rtol=0, atol=tol, err_msg=f"{target}: {key}")
    base_name = _core.CPU_TARGETS[0]
    if base_name in ("x86-64", "x86-64-v2") and "x86-64-v3" in results:  # no FMA in the baseline, FMA in v3
        v3 = results["x86-64-v3"]
        assert any(not np.array_equal(v3[k], base[k]) for k in base), "x86-64-v3 computed like the baseline"


def test_unknown_cpu_target_warns_and_falls_back(tmp_path):
    env = {**os.environ, "VDBFLOW_CPU_TARGET": "z80"}
    flags = ["-S"] if sys.flags.no_site else []
    code = "import json, vdbflow._core as c; print(json.dumps([c.CPU_TARGET, c.CPU_TARGETS_SUPPORTED]))"
    result = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "VDBFLOW_CPU_TARGET=z80 is not among the compiled targets" in result.stderr
    chosen, supported = json.loads(result.stdout)
    assert chosen == supported[-1]
