"""The sampling headers under GCC's undefined-behaviour sanitizer: values at misaligned addresses
(an uncompressed .nvdb grid starts at byte 193 + its name's length, so mapped values are misaligned for
three name lengths in four) and integer data at points whose index coordinates overflow.  A test-only
driver (tests/harness/sanitized_sample.cpp) samples the kernel arrays of a Volume; its output must match
``Volume.sample_grad`` exactly, and any sanitizer report fails the run."""

import shlex
import shutil
import subprocess

import numpy as np
import pytest

import vdbflow
from vdbflow import _core
from vdbflow.devices import cuda as cuda_backend
from vdbflow.ops.sampling import MODES

pytestmark = pytest.mark.slow  # builds and runs a sanitized driver

HARNESS = cuda_backend.kernel_dir().parent / "tests" / "harness" / "sanitized_sample.cpp"
if not HARNESS.is_file():  # an installed package: the harness lives next to this file
    from pathlib import Path

    HARNESS = Path(__file__).parent / "harness" / "sanitized_sample.cpp"


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on the PATH")
    exe = tmp_path_factory.mktemp("ubsan") / "sanitized_sample"
    # the flags of the kernels that run (CMakeLists.txt; _core.CPU_TARGET_FLAGS: the -march of the target
    # dispatched to, none for the portable baseline), so that FMA contraction and results agree bit for bit
    flags = [
        "-std=c++17",
        "-O3",
        *shlex.split(_core.CPU_TARGET_FLAGS),
        "-fno-math-errno",
        "-g",
        "-fsanitize=undefined,float-cast-overflow",
        "-fno-sanitize-recover=all",
    ]
    result = subprocess.run(
        ["g++", *flags, f"-I{cuda_backend.kernel_dir()}", str(HARNESS), "-o", str(exe)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0 and "sanitizer" in result.stderr and "cannot find" in result.stderr:
        pytest.skip(f"libubsan is not installed: {result.stderr[:200]}")
    assert result.returncode == 0, result.stderr
    return exe


def _dump(vol: vdbflow.Volume, points: np.ndarray, folder) -> None:
    k = vol.kernel_arrays()
    for level, table in enumerate(k.tables):
        np.ascontiguousarray(table, np.int32).tofile(folder / f"table{level}")
    k.masks.tofile(folder / "masks")
    k.prefix.tofile(folder / "prefix")
    k.leaf_offset.tofile(folder / "leaf_offset")
    np.ascontiguousarray(vol.voxel_data).tofile(folder / "values")
    np.ascontiguousarray(k.tile_values).tofile(folder / "tile_values")
    np.ascontiguousarray(k.background).tofile(folder / "background")
    vol.transform.kernel_parameters().tofile(folder / "transform")
    np.ascontiguousarray(points, np.float64).tofile(folder / "points")


def _run(driver, folder, kind: str, shift: int, mode: str, C: int, index_layout: bool, world: bool) -> np.ndarray:
    result = subprocess.run(
        [str(driver), str(folder), kind, str(shift), str(MODES[mode]), str(C), str(int(index_layout)), str(int(world))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "runtime error" not in result.stderr, result.stderr[-2000:]
    return np.array([[float(x) for x in line.split()] for line in result.stdout.splitlines()])


@pytest.mark.parametrize("index_layout", [False, True])
def test_misaligned_values_read_exactly_without_undefined_behaviour(driver, tmp_path, rng, index_layout):
    ijk = np.unique(rng.integers(0, 24, (2500, 3)), axis=0)
    data = rng.standard_normal((len(ijk), 3)).astype(np.float32)
    if index_layout:
        topology = vdbflow.Volume.from_active(ijk)
        vol = topology.with_data(data, background=[0.5, -1.0, 2.0])
    else:
        vol = vdbflow.Volume.from_voxels(ijk, data, background=[0.5, -1.0, 2.0])
    points = np.concatenate([rng.uniform(-2, 26, (300, 3)), ijk[:40].astype(np.float64)])  # nodes: fd4's path
    _dump(vol, points, tmp_path)
    for mode in ("closest", "linear", "lag4", "fd4"):
        ref = vol.sample_grad(points, mode=mode, space="index")
        expect = np.concatenate([ref["value"].values, ref["value_jacobian"].values.reshape(len(points), 9)], axis=1)
        for shift in (1, 2, 3):
            got = _run(driver, tmp_path, "f32", shift, mode, 3, index_layout, world=False)
            np.testing.assert_array_equal(got.astype(np.float32), expect, err_msg=f"{mode}, shift {shift}")


def test_integer_data_at_overflowing_index_coordinates(driver, tmp_path, rng):
    """Integer data has no NaN: a point whose index coordinate overflows must not cast NaN to int
    in the kernels, and the Python API refuses it before the kernels run."""
    ijk = np.unique(rng.integers(0, 16, (300, 3)), axis=0)
    vol = vdbflow.Volume.from_voxels(ijk, rng.integers(-100, 100, len(ijk)).astype(np.int32), voxel_size=1e-300)
    points = np.array([[1e10, 0.0, 0.0], [0.0, -1e12, 0.0]])  # finite in world space, inf in index space
    _dump(vol, points, tmp_path)
    got = _run(driver, tmp_path, "i32", 0, "closest", 1, False, world=True)
    np.testing.assert_array_equal(got[:, 0], [0, 0])
    with pytest.raises(vdbflow.errors.PointsError, match="index coordinates are finite"):
        vol.sample(points, mode="closest")
