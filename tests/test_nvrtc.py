"""sample.cu compiles as the CUDA backend compiles it at run time: NVRTC 12 and 13 from the NVIDIA wheels of
the test extra (they run without a GPU), each entry in its own program with the backend's own options
(vdbflow.devices.cuda_build), and each entry's resources fit its launch.  The suite compiles the entries that
set the bounds and a sample of the others, drawn each run (tests/sampling.py); `vdbflow build-cuda --arch sm_90
--json` compiles and reports all of them (docs/gpu.md)."""

import json

import numpy as np
import pytest
from sampling import sample

from vdbflow.devices import cuda, cuda_build, cuda_launch, cuda_occupancy, nvrtc

# the entries that set the bounds below (the most spill, the largest stacks, the most registers), always compiled
BOUNDING = (
    "vdbflow::sample_kernel<float, 3>",
    "vdbflow::sample_derived_kernel<float>",
    "vdbflow::hessian_kernel<double, 3>",
    "vdbflow::reduce_kernel<double, 3>",
    "vdbflow::advect_series_kernel<float>",
)
REGISTER_FILE = 65536  # 32-bit registers a multiprocessor (sm_50 .. sm_120)
STACK = 1024  # bytes of stack frame a thread of any entry but the particle ones may keep
# the particle entries keep a Runge-Kutta step's stages, the scheme's weights and, around the loop body NVRTC
# leaves out of line, the run's spec, grid and transform in local memory (docs/gpu.md "Stacks over 1 KB")
STACK_PARTICLES = 4352
SPILL_HESSIAN = 64  # the vec3 Hessians at 255 registers (NVRTC 12.9/13.5 sm_90: 44-60 B); the others spill nothing


def _compiler(major: int) -> nvrtc.Nvrtc:
    libs = nvrtc.library_candidates(major)
    assert libs, f"expected libnvrtc.so.{major} from the test extra (nvidia-cuda-nvrtc-cu12 / nvidia-cuda-nvrtc)"
    compiler = nvrtc.load(libs[0])
    assert compiler.version[0] == major
    return compiler


@pytest.mark.slow
@pytest.mark.parametrize("major", [12, 13])
def test_entries_compile_with_nvrtc_and_fit_their_launch(major, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(tmp_path))
    compiler = _compiler(major)
    arch = cuda_build.choose_arch(90, compiler)
    assert arch == "sm_90"  # H100 / H200: machine code, no JIT in the driver
    every = (*cuda.name_expressions(), *cuda_build.EXTERN_ENTRIES)
    assert set(BOUNDING) <= set(every)
    names = sample(every, 5, f"nvrtc {major}", always=BOUNDING)
    built = cuda_build.build_all(names, arch, compiler, workers=2)
    assert set(built) == set(names)
    rows = []
    for name, b in sorted(built.items()):
        image = b.path.read_bytes()
        lowered = b.lowered[name]
        assert image[:4] == b"\x7fELF" and lowered.encode() in image, name  # a cubin holding the entry
        meta = json.loads(b.path.with_suffix(".json").read_text())
        found = cuda_build.resources(meta["log"]).get(lowered)
        assert found is not None, f"ptxas reported nothing for {name}"
        assert found.registers * cuda_build.THREADS_PER_BLOCK <= REGISTER_FILE, (name, found)
        # the sampling, derived, reverse-mode and gradient entries fill the card: two blocks an SM at least
        # (sample.cu VDB_BOUNDS_FILL); what that costs is spill, at most a kilobyte (NVRTC 12.9, 2026-12-06:
        # sample_kernel<float, 3> 728 B, sample_derived 992 B; docs/gpu.md "Occupancy"); the Hessian and
        # statistics entries keep one block and spill nothing but the vec3 Hessians' few bytes; the particle
        # entries (a whole Runge-Kutta step in registers) may spill, at most a kilobyte (NVRTC 12.9: 40-52 B)
        spill = found.spill_stores + found.spill_loads
        # no frame over a kilobyte (the driver reserves it for every thread the card holds): no local array sized
        # for MAX_COMPONENTS (a run-time count goes through its components), weights of the values and Jacobians
        # without second derivatives (3 x 168 B), one set for a Hessian (3 x 200 B); NVRTC 12.9/13.5 sm_90,
        # 2026-12-06: at most 1,008 B (docs/gpu.md "Occupancy"); the particle entries 2.3-4.1 KB
        assert found.stack <= (STACK_PARTICLES if "advect" in name else STACK), (name, found)
        if cuda_occupancy.fills_the_card(name):
            assert cuda_occupancy.blocks_per_sm(found, arch, cuda_build.THREADS_PER_BLOCK) >= 2, (name, found)
            assert spill <= 1024, (name, found)
        else:
            allowed = 1024 if "advect" in name else (SPILL_HESSIAN if "hessian_kernel" in name else 0)
            assert spill <= allowed, (name, found)
        rows.append((name, found))
    with capsys.disabled():  # the resources table, in the test log of every CI run
        print(f"\nNVRTC {compiler.version[0]}.{compiler.version[1]} {arch}: registers / stack / spill bytes")
        for name, r in rows:
            print(f"  {name:44s} {r.registers:4d} {r.stack:6d} {r.spill_stores + r.spill_loads:6d}")
    again = cuda_build.build_all(names[:3], arch, compiler, workers=1)
    assert all(b.source == "cached" for b in again.values())


def test_nvrtc_refusals_carry_the_compiler_log():
    compiler = _compiler(12)
    with pytest.raises(nvrtc.NvrtcError, match=r"(?s)NVRTC 12\.\d+ compiling bad\.cu.*undefined"):
        compiler.compile("__global__ void k() { undefined_call(); }", "bad.cu", ("-arch=sm_90",), (), "cubin")


def test_architecture_choice():
    compiler = _compiler(12)
    supported = compiler.supported_archs()
    assert cuda_build.choose_arch(90, compiler) == "sm_90"
    newest = max(supported)
    assert cuda_build.choose_arch(newest + 50, compiler) == f"compute_{newest}"  # a newer GPU: PTX the driver JITs
    with pytest.raises(cuda_build.DeviceError, match="compute capability 20"):
        cuda_build.choose_arch(20, compiler)


def test_ptx_for_a_compute_architecture(tmp_path, monkeypatch):
    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(tmp_path))
    b = cuda_build.build_nvrtc("vdbflow_scatter_rows", "compute_90", _compiler(13))
    text = b.path.read_text()
    assert b.path.suffix == ".ptx" and ".entry vdbflow_scatter_rows" in text and ".target sm_90" in text


def test_name_expressions_cover_every_call():
    """Each name the backend builds for a value type and component count is one of its name expressions."""
    names = set(cuda.name_expressions())
    for dt in cuda_launch.VALUE_DTYPES:
        for c in (1, 2, 3, 4, 9):
            assert cuda_launch.entry_name(dt, c) in names
    for dt in cuda_launch.FLOAT_DTYPES:
        for c in (1, 2, 3, 4, 9):
            assert {cuda.entry("sample_vjp", dt, c), cuda.entry("sample_hessian", dt, c)} <= names
            assert cuda.entry("grid_gradient", dt, c) in names
        plain = ("advect", "advect_series", "sample_derived", "derive")
        assert {cuda.entry(template, dt) for template in plain} <= names
    with pytest.raises(cuda_build.DeviceError, match="expected sample_hessian data of float32, float64, got int32"):
        cuda.entry("sample_hessian", np.int32, 1)


def test_build_cuda_needs_an_architecture_it_can_read(tmp_path, monkeypatch):
    """Without a GPU to take it from, `vdbflow build-cuda` asks for --arch; a malformed one is refused;
    both exit 2 with the error on stderr and nothing built."""
    from test_cli import invoke

    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(tmp_path / "unused"))  # restored after the test
    result = invoke("build-cuda", "--cache", str(tmp_path / "cache"))
    assert result.exit_code == 2 and "expected --arch (e.g. --arch sm_90)" in result.stderr, result.stderr
    result = invoke("build-cuda", "--arch", "sm90", "--cache", str(tmp_path / "cache"))
    assert result.exit_code == 2 and "expected an architecture like sm_90" in result.stderr, result.stderr
    assert not [p for p in (tmp_path / "cache").glob("*") if p.suffix in (".cubin", ".ptx")]
