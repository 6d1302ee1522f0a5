"""Bad input gets a clear vdbflow error or a documented result, never a crash or garbage."""

import re

import numpy as np
import pytest

import vdbflow


@pytest.fixture
def vec4():
    ijk = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1], [2147483640, 0, 0]])
    return vdbflow.Volume.from_voxels(ijk, np.arange(24, dtype=np.float32).reshape(6, 4), background=-1.0)


@pytest.mark.parametrize("shape", [(5, 2), (3,), (5, 3, 1), (5, 4)])
def test_wrong_point_shapes(vec4, shape):
    expected = f"expected points of shape (N, 3) or (..., 3), got {shape}"
    with pytest.raises(vdbflow.PointsError, match=re.escape(expected)):
        vec4.sample_grad(np.zeros(shape), space="index")


@pytest.mark.parametrize(
    "points", [np.zeros((2, 3), complex), np.zeros((2, 3), bool), np.array([["a", "b", "c"]]), np.zeros((2, 3), object)]
)
def test_wrong_point_dtypes(vec4, points):
    with pytest.raises(vdbflow.PointsError, match="expected float16/32/64 or integer points, got dtype"):
        vdbflow.sample_grad_arrays(vec4, points)


@pytest.mark.parametrize("dtype", [">f8", ">f4", "<f2"])
def test_big_endian_and_half_points_are_the_same_numbers(vec4, dtype):
    pts = np.array([[0.5, 0.25, 0.75], [1.0, 0.5, 0.0], [0.0, 0.0, 0.5]])
    got = vdbflow.sample_grad_arrays(vec4, pts.astype(dtype), space="index")
    want = vdbflow.sample_grad_arrays(
        vec4, pts.astype(np.dtype(dtype).newbyteorder("=")).astype(np.float64), space="index"
    )
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_out_must_be_a_pair(vec4):
    pts = np.zeros((2, 3))
    for out in (np.empty((2, 2, 4), np.float32), (np.empty((2, 4), np.float32),), [None, None, None]):
        with pytest.raises(vdbflow.ShapeError, match=r"expected out=\(values, jacobian\)"):
            vdbflow.sample_grad_arrays(vec4, pts, out=out)
    values = np.empty((2, 4), np.float32)
    got = vdbflow.sample_grad_arrays(vec4, pts, out=[values, None])  # a list is a pair too
    assert got[0] is values


def test_out_buffers_that_overlap_the_points_or_each_other(vec4):
    block = np.zeros(64, np.float32)
    points = block[:6].reshape(2, 3)
    with pytest.raises(vdbflow.ShapeError, match="overlaps them in memory"):
        vdbflow.sample_grad_arrays(vec4, points, out=(block[4:12].reshape(2, 4), None), space="index")
    with pytest.raises(vdbflow.ShapeError, match="overlap in memory"):
        vdbflow.sample_grad_arrays(vec4, np.zeros((2, 3)), out=(block[:8].reshape(2, 4), block[:24].reshape(2, 4, 3)))
    # buffers beside the points in one block are fine, and the points are read unchanged
    got, _ = vdbflow.sample_grad_arrays(
        vec4, points, out=(block[8:16].reshape(2, 4), None), space="index", jacobian=False
    )
    np.testing.assert_array_equal(got, vec4.sample(np.zeros((2, 3)), space="index")["value"].values)


def test_fractional_leaf_indices_are_refused(vec4):
    with pytest.raises(vdbflow.VolumeError, match="expected integer leaf indices, got dtype float64"):
        vec4.select_leaves([0.5, 1.0])
    assert vec4.select_leaves(np.array([1, 0, 1])).leaf_count == 2


def test_topology_offsets_the_kernels_would_trust(vec4):
    """Leaf offsets, value counts and tile rows are checked where they enter, without overflow."""
    origins, masks = np.zeros((1, 3), np.int32), np.full((1, 8), 2**64 - 1, np.uint64)
    for offset in (10**12, 2**63 - 1, -1, 1):
        with pytest.raises(vdbflow.VolumeError, match="expected each leaf's value rows inside"):
            vdbflow.Topology(origins, masks, leaf_offset=[offset], value_count=512)
    with pytest.raises(vdbflow.VolumeError, match="value_count"):
        vdbflow.Topology(origins, masks, leaf_offset=[0], value_count=2**63)
    ok = vdbflow.Topology(origins, masks, leaf_offset=[1], value_count=513)  # NanoVDB: row 0 is the background
    assert ok.with_data(np.arange(513, dtype=np.float32)).sample([[0, 0, 1]], "closest", "index")["value"] == 2
    with pytest.raises(vdbflow.VolumeError, match="tile value indices"):
        vdbflow.Topology(
            origins, masks, None, [[4096, 0, 0]], [8], leaf_offset=[0], value_count=512, tile_value_index=[512]
        )


def test_transforms_whose_inverse_overflows_are_refused():
    with pytest.raises(vdbflow.VolumeError, match="finite inverse"):
        vdbflow.Transform.from_voxel_size(1e-310)
    assert np.isfinite(vdbflow.Transform.from_voxel_size(1e-300).world_to_index).all()


def test_ragged_points(vec4):
    with pytest.raises(vdbflow.PointsError, match=r"\(N, 3\)"):
        vdbflow.sample_grad_arrays(vec4, [[0, 0, 0], [1, 2]])


def test_integer_points_are_index_coordinates(vec4):
    v, _ = vdbflow.sample_grad_arrays(vec4, np.array([[1, 1, 1]], np.int64), "closest")
    np.testing.assert_array_equal(v, [[16, 17, 18, 19]])


@pytest.mark.parametrize("mode", ["linear", "closest"])
def test_nan_and_inf_points_give_nan_for_float_data(vec4, mode):
    pts = np.array([[np.nan, 0, 0], [0, np.inf, 0], [0, 0, -np.inf], [0.5, 0.5, 0.5]])
    v, j = vdbflow.sample_grad_arrays(vec4, pts, mode)
    assert np.isnan(v[:3]).all() and np.isnan(j[:3]).all()
    assert np.isfinite(v[3]).all() and np.isfinite(j[3]).all()


def test_nan_points_are_an_error_for_integer_data():
    vol = vdbflow.Volume.from_voxels([[0, 0, 0]], np.array([5], np.int32))
    with pytest.raises(vdbflow.PointsError, match="got 1 points with NaN or inf"):
        vdbflow.sample_grad_arrays(vol, np.array([[0, 0, 0], [np.nan, 0, 0]]), "closest")


def test_coordinates_outside_int32_read_background(vec4):
    pts = np.array(
        [
            [3e9, 0, 0],
            [-3e9, 5, 5],
            [1e300, -1e300, 0],
            [0, 0, 2147483647.5],
            [-2147483648.5, 0, 0],
            [2147483647.0, 0.25, 0.0],
            [9.2e18, 9.3e18, -9.3e18],
        ]
    )
    for mode in ("linear", "closest"):
        v, j = vdbflow.sample_grad_arrays(vec4, pts, mode)
        np.testing.assert_array_equal(v, np.full((len(pts), 4), -1.0))
        np.testing.assert_array_equal(j, 0.0)
    # a stored voxel near the top of the range is still found
    v, _ = vdbflow.sample_grad_arrays(vec4, np.array([[2147483640.0, 0, 0]]), "closest")
    np.testing.assert_array_equal(v, [[20, 21, 22, 23]])


def test_empty_point_sets(vec4):
    v, j = vdbflow.sample_grad_arrays(vec4, np.zeros((0, 3)))
    assert v.shape == (0, 4) and j.shape == (0, 4, 3)
    ds = vec4.sample_grad(np.zeros((0, 3)))
    assert ds.sizes["point"] == 0 and ds["value_jacobian"].shape == (0, 4, 3)


def test_transposed_jacobian_buffer_is_rejected(vec4):
    n = 7
    pts = np.zeros((n, 3))
    with pytest.raises(vdbflow.ShapeError, match=r"expected jacobian \(7, 4, 3\) \[component, axis\], got \(7, 3, 4\)"):
        vdbflow.sample_grad_arrays(vec4, pts, out=(None, np.empty((n, 3, 4), np.float32)))
    with pytest.raises(vdbflow.ShapeError, match="expected jacobian of dtype float32, got float64"):
        vdbflow.sample_grad_arrays(vec4, pts, out=(None, np.empty((n, 4, 3))))
    with pytest.raises(vdbflow.ShapeError, match=r"expected values \(7, 4\)"):
        vdbflow.sample_grad_arrays(vec4, pts, out=(np.empty((n, 3), np.float32), None))
    with pytest.raises(vdbflow.ShapeError, match="writeable C-contiguous"):
        vdbflow.sample_grad_arrays(vec4, pts, out=(None, np.empty((n, 3, 4), np.float32).transpose(0, 2, 1)))
    values, jac = np.empty((n, 4), np.float32), np.empty((n, 4, 3), np.float32)
    rv, rj = vdbflow.sample_grad_arrays(vec4, pts, out=(values, jac))
    assert rv is values and rj is jac


def test_bad_choices(vec4):
    pts = np.zeros((1, 3))
    with pytest.raises(vdbflow.SamplingError, match="mode to be one of 'closest', 'linear', 'lag4'.*, got 'cubic'"):
        vec4.sample_grad(pts, mode="cubic")
    with pytest.raises(vdbflow.SamplingError, match="space to be one of 'index', 'world', got 'voxel'"):
        vec4.sample(pts, space="voxel")
    with pytest.raises(vdbflow.SamplingError, match="jacobian_space"):
        vec4.sample_grad(pts, jacobian_space="grid")
    with pytest.raises(vdbflow.DeviceError, match="'cpu', 'cuda' or 'auto', got 'tpu'"):
        vec4.sample(pts, device="tpu")


def test_cuda_without_gpu_is_a_clear_error(vec4):
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present; covered by the GPU tests")
    except Exception:
        pass
    with pytest.raises(vdbflow.DeviceError, match="device='cuda' needs"):
        vec4.sample(np.zeros((1, 3)), device="cuda")


def test_volumes_are_read_only(vec4):
    with pytest.raises(ValueError, match="read-only"):
        vec4.voxel_data[0, 0] = 5
