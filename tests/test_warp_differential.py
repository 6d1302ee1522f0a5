"""vdbflow against warp-lang on the CPU: the same voxels and values built in both."""

import numpy as np
import pytest
from reference import probe_points, random_sparse_voxels

import vdbflow

wo = pytest.importorskip("warp_oracle")

TYPES = {  # name: (dtype, components)
    "int32": (np.int32, 1),
    "int64": (np.int64, 1),
    "uint32": (np.uint32, 1),
    "float32": (np.float32, 1),
    "float64": (np.float64, 1),
    "vec3f": (np.float32, 3),
    "vec3d": (np.float64, 3),
    "vec4f": (np.float32, 4),
    "vec4d": (np.float64, 4),
}


def tolerance(values):
    return 32 * np.finfo(np.float32).eps * max(1.0, float(np.abs(values).max()))


def sheared_transform():
    M = np.eye(4)
    M[:3, :3] = np.array([[0.8, 0.2, 0.0], [-0.1, 1.1, 0.3], [0.0, 0.25, 0.6]])
    M[:3, 3] = [0.5, -2.0, 1.0]
    return M


@pytest.mark.parametrize("type_name", list(TYPES))
def test_value_types_match_warp(rng, type_name):
    dtype, C = TYPES[type_name]
    ijk, values = random_sparse_voxels(rng, components=C, dtype=dtype)
    bg = np.arange(1, C + 1).astype(dtype) if C > 1 else dtype(3)
    vol = vdbflow.Volume.from_voxels(ijk, values, bg)
    assert vol.value_type.name == type_name
    wvol = wo.warp_value_volume(type_name, ijk, values, bg)
    pts = probe_points(rng, ijk, 150).astype(np.float32)
    # closest: exactly equal
    want_v, _ = wo.warp_sample(wvol, type_name, pts, "closest")
    got_v, got_j = vdbflow.sample_grad_arrays(vol, pts, "closest")
    np.testing.assert_array_equal(got_v, want_v.reshape(got_v.shape))
    assert not got_j.any()
    if np.dtype(dtype).kind != "f":
        with pytest.raises(vdbflow.SamplingError, match="closest"):
            vdbflow.sample_grad_arrays(vol, pts, "linear")
        return
    want_v, want_j = wo.warp_sample(wvol, type_name, pts, "linear")
    got_v, got_j = vdbflow.sample_grad_arrays(vol, pts, "linear")
    tol = tolerance(values)
    np.testing.assert_allclose(got_v, want_v.reshape(got_v.shape), atol=tol, rtol=0)
    np.testing.assert_allclose(got_j, want_j.reshape(got_j.shape), atol=2 * tol, rtol=0)


@pytest.mark.parametrize("type_name", ["float32", "float64", "vec3f", "vec4d"])
def test_index_layout_matches_warp(rng, type_name):
    dtype, C = TYPES[type_name]
    ijk, _ = random_sparse_voxels(rng, fill=0.4)
    topo = vdbflow.Volume.from_active(ijk)
    wvol = wo.warp_index_volume(ijk)
    # same voxel order as Warp's index grid
    np.testing.assert_array_equal(topo.active_voxels(), wvol.get_voxels().numpy())
    n = topo.active_voxel_count
    data = rng.standard_normal((n, C) if C > 1 else n).astype(dtype)
    bg = np.linspace(-1, 1, C).astype(dtype) if C > 1 else dtype(-0.75)
    vol = topo.with_data(data, bg)
    pts = probe_points(rng, ijk, 150).astype(np.float32)
    for mode in ("closest", "linear"):
        want_v, want_j = wo.warp_sample_index(wvol, type_name, pts, mode, data, bg)
        got_v, got_j = vdbflow.sample_grad_arrays(vol, pts, mode)
        if mode == "closest":
            np.testing.assert_array_equal(got_v, want_v.reshape(got_v.shape))
        else:
            tol = tolerance(data)
            np.testing.assert_allclose(got_v, want_v.reshape(got_v.shape), atol=tol, rtol=0)
            np.testing.assert_allclose(got_j, want_j.reshape(got_j.shape), atol=2 * tol, rtol=0)


def test_world_space_matches_warp_with_sheared_transform(rng):
    ijk, values = random_sparse_voxels(rng, components=3, dtype=np.float32)
    M = sheared_transform()
    vol = vdbflow.Volume.from_voxels(ijk, values, 0.0, M)
    wvol = wo.warp_value_volume("vec3f", ijk, values, (0.0, 0.0, 0.0), matrix=M)
    # Warp maps world points in float32; compare on index-space points mapped by both to world
    idx = (ijk[rng.integers(0, len(ijk), 300)] + rng.uniform(0.05, 0.95, (300, 3))).astype(np.float32)
    want_v, want_j = wo.warp_sample(wvol, "vec3f", idx, "linear")  # Warp samples in index space
    world = vol.transform.apply(idx.astype(np.float64))
    got_v, got_j = vdbflow.sample_grad_arrays(vol, world, space="world", jacobian_space="index")
    tol = tolerance(values)
    np.testing.assert_allclose(got_v, want_v, atol=tol, rtol=0)
    np.testing.assert_allclose(got_j, want_j, atol=2 * tol, rtol=0)
    # the same index-to-world map in both
    info = wvol.get_grid_info()
    np.testing.assert_allclose(np.array(info.transform_matrix).reshape(3, 3), M[:3, :3], atol=1e-6)
    np.testing.assert_allclose(np.array(info.translation), M[:3, 3], atol=1e-6)
