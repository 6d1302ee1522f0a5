"""The CUDA entries fill the card: the sampling, derived and reverse-mode entries fit two blocks of 256 threads a
multiprocessor (at most 128 registers) on sm_80, sm_90 and sm_100, as ptxas reports them through NVRTC 13 (no
GPU needed); the occupancy arithmetic against CUDA's occupancy calculator's figures; ``VDBFLOW_CUDA_EXACT=1``
compiles without contracted multiply-adds; ``vdbflow build-cuda --json`` reports the blocks an SM."""

import json
import re

import pytest
from sampling import sample

from vdbflow.devices import cuda_build, cuda_occupancy, nvrtc
from vdbflow.devices.cuda_build import Resources


def _compiler(major: int) -> nvrtc.Nvrtc:
    libs = nvrtc.library_candidates(major)
    assert libs, f"expected libnvrtc.so.{major} from the test extra"
    return nvrtc.load(libs[0])


@pytest.mark.parametrize(
    ("registers", "shared", "blocks"),
    [
        (32, 0, 8),  # the warp limit: 64 warps of 8
        (64, 0, 4),
        (128, 0, 2),  # 4,096 registers a warp, 4 warps a partition: 16 warps
        (129, 0, 1),  # rounded up to 136 a thread: 3 warps a partition, 12 warps: one block of 8
        (166, 0, 1),  # sample_kernel<float, 3> under __launch_bounds__(256, 1)
        (255, 0, 1),
        (32, 48 * 1024, 4),  # shared memory: 48 KiB + 1 KiB a block of 228 KiB
    ],
)
def test_blocks_per_multiprocessor_as_the_occupancy_calculator_counts(registers, shared, blocks):
    r = Resources(registers, 0, 0, 0, shared)
    assert cuda_occupancy.blocks_per_sm(r, "sm_90", 256) == blocks
    assert cuda_occupancy.occupancy(r, "sm_90", 256) == blocks * 8 / 64


def test_occupancy_refuses_an_architecture_without_a_table():
    with pytest.raises(cuda_occupancy.DeviceError, match="expected an architecture among sm_80, sm_90, sm_100"):
        cuda_occupancy.limits("sm_75")


def test_the_filling_entries_are_the_sampling_derived_and_reverse_ones():
    assert cuda_occupancy.fills_the_card("vdbflow::sample_kernel<float, 3>")
    assert cuda_occupancy.fills_the_card("vdbflow::sample_derived_kernel<double>")
    assert cuda_occupancy.fills_the_card("vdbflow::vjp_kernel<float, 0>")
    assert cuda_occupancy.fills_the_card("vdbflow_route_partition")
    assert not cuda_occupancy.fills_the_card("vdbflow::hessian_kernel<float, 3>")
    assert not cuda_occupancy.fills_the_card("vdbflow::advect_kernel<double>")


SAMPLING = (
    "vdbflow::sample_kernel<float, 3>",
    "vdbflow::sample_kernel<int, 1>",
    "vdbflow::sample_derived_kernel<float>",
    "vdbflow::vjp_kernel<float, 3>",
)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_80", "sm_100"])
def test_sampling_entries_fit_two_blocks_a_multiprocessor(arch, tmp_path, monkeypatch):
    """sm_90 is held for every entry by test_nvrtc's whole build; here the other two architectures."""
    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(tmp_path))
    compiler = _compiler(13)
    # the largest entry and one more drawn each run (tests/sampling.py); `vdbflow build-cuda --arch ARCH --json`
    # reports every entry
    entries = sample(SAMPLING, 1, f"occupancy {arch}", always=SAMPLING[:1])
    built = cuda_build.build_all(entries, arch, compiler, workers=2)
    assert set(built) == set(entries)
    for name, b in built.items():
        log = json.loads(b.path.with_suffix(".json").read_text())["log"]
        r = cuda_build.resources(log)[b.lowered[name]]
        assert cuda_occupancy.blocks_per_sm(r, arch, cuda_build.THREADS_PER_BLOCK) >= 2, (arch, name, r)
        # what two blocks cost is spill, at most a kilobyte (docs/gpu.md "Occupancy" has the figures and why
        # the entries keep two blocks all the same)
        assert r.spill_stores + r.spill_loads <= 1024, (arch, name, r)


@pytest.mark.slow
def test_exact_mode_compiles_without_contracted_multiply_adds(tmp_path, monkeypatch):
    """VDBFLOW_CUDA_EXACT=1: --fmad=false, a cache key of its own, and PTX without an fma (the kernels call
    none themselves: every fma in the default build is a contraction)."""
    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(tmp_path))
    compiler = _compiler(13)
    name = "vdbflow::sample_kernel<float, 3>"
    monkeypatch.delenv("VDBFLOW_CUDA_EXACT", raising=False)
    fused = cuda_build.build_nvrtc(name, "compute_90", compiler)
    monkeypatch.setenv("VDBFLOW_CUDA_EXACT", "1")
    assert "--fmad=false" in cuda_build.nvrtc_options("sm_90")
    exact = cuda_build.build_nvrtc(name, "compute_90", compiler)
    assert exact.path != fused.path and exact.source == "compiled"
    assert len(re.findall(r"\bfma\.rn\.f32\b", fused.path.read_text())) > 10
    assert not re.findall(r"\bfma\.", exact.path.read_text())


@pytest.mark.slow
def test_build_cuda_json_reports_blocks_a_multiprocessor(tmp_path, monkeypatch):
    from test_cli import invoke

    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(tmp_path / "unused"))  # build-cuda --cache sets it: restored

    name = "vdbflow::sample_kernel<float, 3>"
    result = invoke("build-cuda", "--arch", "sm_90", "--entry", name, "--cache", str(tmp_path), "--json")
    assert result.exit_code == 0, result.stderr
    rows = [r for r in json.loads(result.stdout)["entries"] if r["entry"] == name]
    assert len(rows) == 1 and rows[0]["registers"] <= 128
    assert rows[0]["blocks_per_sm"] >= 2 and rows[0]["occupancy"] == rows[0]["blocks_per_sm"] * 8 / 64
    result = invoke("build-cuda", "--arch", "sm_90", "--entry", "vdbflow::nope<float>", "--cache", str(tmp_path))
    assert result.exit_code == 2 and "expected entries among" in result.stderr
