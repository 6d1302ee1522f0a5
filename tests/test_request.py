"""One request, one door: a SampleRequest is checked when made and knows its result shapes; every
volume-like object answers it with ``sample_arrays`` - a Volume against the NumPy reference, the
others against the Volume's own arrays, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from reference import ReferenceVolume, probe_points, random_sparse_voxels

import vdbflow
from vdbflow.ops import sampling
from vdbflow.ops.request import HESSIAN_MODES, OUTPUTS, SampleRequest
from vdbflow.ops.results import result_dataset


def test_a_request_resolves_its_spaces_and_refuses_what_is_unknown():
    r = SampleRequest("lag4", OUTPUTS, "world")
    assert (r.jacobian_space, r.hessian_space) == ("world", "world")  # defaults follow the points' space
    r = SampleRequest("lag4", OUTPUTS, "world", "index")
    assert (r.jacobian_space, r.hessian_space) == ("index", "index")
    assert r.jacobian and r.hessian and r.mode_code == sampling.MODES["lag4"]
    assert SampleRequest("linear", ("value",)).jacobian is False
    with pytest.raises(vdbflow.SamplingError, match="expected mode to be one of 'closest', 'linear'.*got 'cubic'"):
        SampleRequest("cubic")
    with pytest.raises(vdbflow.SamplingError, match="expected a mode with a second derivative.*got 'closest'"):
        SampleRequest("closest", OUTPUTS)
    with pytest.raises(vdbflow.SamplingError, match=r"expected outputs .* got \('value', 'hessian'\)"):
        SampleRequest("linear", ("value", "hessian"))
    with pytest.raises(vdbflow.SamplingError, match="expected space to be one of 'index', 'world', got 'voxel'"):
        SampleRequest("linear", space="voxel")
    with pytest.raises(vdbflow.SamplingError, match="expected jacobian_space"):
        SampleRequest("linear", jacobian_space="nope")
    with pytest.raises(vdbflow.SamplingError, match="expected point_order"):
        SampleRequest("linear", point_order="random")
    with pytest.raises(vdbflow.DeviceError, match="expected device 'cpu', 'cuda' or 'auto', got 'tpu'"):
        SampleRequest("linear", device="tpu")
    assert "closest" not in HESSIAN_MODES and set(HESSIAN_MODES) < set(sampling.MODES)


@pytest.mark.parametrize("type_name", ["float32", "vec3d", "vec4f", "int64"])
def test_a_request_knows_its_shapes_and_dtypes(type_name):
    vt = vdbflow.VALUE_TYPES[type_name]
    r = SampleRequest("closest" if not vt.is_float else "linear", ("value", "jacobian"))
    C = vt.components
    base = (5, 2) if C == 1 else (5, 2, C)
    assert r.shapes((5, 2), C) == {"value": base, "jacobian": base + (3,)}
    assert r.dtypes(vt) == {
        "value": vt.dtype,
        "jacobian": np.dtype(np.float64 if vt.dtype.itemsize == 8 or not vt.is_float else np.float32),
    }
    if vt.is_float:
        h = SampleRequest("lag4", OUTPUTS)
        assert h.shapes((7,), C)["hessian"] == ((7, 3, 3) if C == 1 else (7, C, 3, 3))


def test_integer_data_is_refused_what_it_cannot_give():
    vt = vdbflow.VALUE_TYPES["int32"]
    assert SampleRequest("closest").for_value_type(vt).mode == "closest"
    with pytest.raises(vdbflow.SamplingError, match="expected mode='closest' for int32 data"):
        SampleRequest("linear").for_value_type(vt)
    with pytest.raises(vdbflow.SamplingError, match="expected float32 or float64 data for Hessians, got int32"):
        SampleRequest("lag4", OUTPUTS).for_value_type(vt)


@pytest.mark.parametrize("components", [1, 3])
def test_a_volume_answers_a_request_as_the_reference(rng, components):
    ijk, values = random_sparse_voxels(rng, components=components)
    vol = vdbflow.Volume.from_voxels(ijk, values, background=0.5)
    ref = ReferenceVolume(ijk, values, 0.5)
    pts = probe_points(rng, ijk, 100)
    arrays = vol.sample_arrays(SampleRequest("linear", ("value", "jacobian")), pts)
    want_v, want_j = ref.sample(pts)
    shape = (len(pts),) if components == 1 else (len(pts), components)
    assert arrays["value"].shape == shape and arrays["jacobian"].shape == shape + (3,)
    np.testing.assert_allclose(arrays["value"].reshape(len(pts), -1), want_v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(arrays["jacobian"].reshape(len(pts), -1, 3), want_j, rtol=1e-12, atol=1e-12)
    # the array functions are this door: the same bits
    v, j = vdbflow.sample_grad_arrays(vol, pts)
    assert v.tobytes() == arrays["value"].tobytes() and j.tobytes() == arrays["jacobian"].tobytes()
    values_only = vol.sample_arrays(SampleRequest("linear", ("value",)), pts)
    assert list(values_only) == ["value"] and values_only["value"].tobytes() == v.tobytes()


def test_given_buffers_are_filled_and_checked(rng):
    ijk, values = random_sparse_voxels(rng, components=3, dtype=np.float32)
    vol = vdbflow.Volume.from_voxels(ijk, values)
    pts = probe_points(rng, ijk, 50)
    request = SampleRequest("lag4", OUTPUTS)
    hess = np.empty((len(pts), 3, 3, 3), np.float32)
    arrays = sampling.sample_arrays(vol, request, pts, {"hessian": hess})
    assert arrays["hessian"] is hess
    _, _, want = vdbflow.sample_hessian_arrays(vol, pts, "lag4")
    assert hess.tobytes() == want.tobytes()
    with pytest.raises(vdbflow.ShapeError, match="expected separate jacobian and hessian buffers"):
        shared = np.empty(len(pts) * 9 * 4, np.float32)
        sampling.sample_arrays(
            vol,
            request,
            pts,
            {
                "jacobian": shared[: len(pts) * 9].reshape(-1, 3, 3),
                "hessian": shared[: len(pts) * 27].reshape(-1, 3, 3, 3),
            },
        )


def test_a_series_answers_a_request_as_its_steps_interpolated(rng):
    ijk, values = random_sparse_voxels(rng, components=3)
    steps = [vdbflow.Volume.from_voxels(ijk, values * (k + 1)) for k in range(3)]
    series = vdbflow.VolumeSeries(steps, [0.0, 1.0, 3.0])
    pts = probe_points(rng, ijk, 40)
    t = rng.uniform(0.0, 3.0, len(pts))
    request = SampleRequest("linear", ("value", "jacobian"), "index")
    arrays = series.sample_arrays(request, pts, t, "linear")
    # the oracle: each step's own arrays, interpolated linearly in NumPy
    per_step = [s.sample_arrays(request, pts) for s in steps]
    i = np.clip(np.searchsorted([0.0, 1.0, 3.0], t, side="right") - 1, 0, 1)
    t0, t1 = np.array([0.0, 1.0])[i], np.array([1.0, 3.0])[i]
    w = (t - t0) / (t1 - t0)
    for name in ("value", "jacobian"):
        stack = np.stack([a[name] for a in per_step])
        lo, hi = stack[i, np.arange(len(pts))], stack[i + 1, np.arange(len(pts))]
        ww = w.reshape((-1,) + (1,) * (lo.ndim - 1))
        np.testing.assert_allclose(arrays[name], (1 - ww) * lo + ww * hi, rtol=1e-12, atol=1e-12)
    with pytest.raises(vdbflow.SamplingError, match="for a series, got a Hessian"):
        series.sample_arrays(SampleRequest("lag4", OUTPUTS), pts, t)


def test_a_distributed_volume_answers_a_request_bit_for_bit(rng):
    distributed = pytest.importorskip("distributed")
    ijk, values = random_sparse_voxels(rng, components=3, dtype=np.float32)
    vol = vdbflow.Volume.from_voxels(ijk, values)
    pts = probe_points(rng, ijk, 200)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
        vdbflow.distribute(vol, client, partitions=3, halo=2) as dvol,
    ):
        for request in (SampleRequest("lag4", ("value", "jacobian")), SampleRequest("lag4", OUTPUTS, "world", "index")):
            lazy = dvol.sample_arrays(request, pts)
            assert list(lazy) == list(request.outputs)
            got = dict(zip(lazy, client.compute(list(lazy.values()), sync=True), strict=True))
            want = vol.sample_arrays(request, pts)
            for name in request.outputs:
                assert got[name].dtype == want[name].dtype and got[name].tobytes() == want[name].tobytes(), name


def test_one_function_makes_every_dataset(rng):
    """The Dataset of a request: Hessian axes of their own when their space is not the Jacobian's."""
    ijk, values = random_sparse_voxels(rng)
    vol = vdbflow.Volume.from_voxels(ijk, values, voxel_size=0.5)
    vol.units, vol.length_units = "K", "m"
    pts = probe_points(rng, ijk, 10)
    request = SampleRequest("lag4", OUTPUTS, "index", "index", "world")
    ds = result_dataset(vol, request, pts, vol.sample_arrays(request, pts))
    assert ds["value_jacobian"].dims == ("point", "axis") and ds["axis"].values.tolist() == ["i", "j", "k"]
    assert ds["value_hessian"].dims == ("point", "haxis", "haxis2") and ds["haxis"].values.tolist() == ["x", "y", "z"]
    assert ds["value_hessian"].attrs["units"] == "K/m^2" and ds["value_jacobian"].attrs["units"] == "K/voxel"
    same = vol.sample_hessian(pts, "lag4", "index", "index", "world")
    assert same.identical(ds)


def test_the_jacobian_alone_on_every_path(tmp_path):
    """Issue 50 row 9: ``outputs=("jacobian",)`` and ``("jacobian", "inside")`` are allowed, eager, lazy and
    distributed, for vector, scalar and integer data, and give the Jacobian (and flags) of
    ``("value", "jacobian", "inside")`` bit for bit."""
    import dask.array as da
    from distributed import Client, LocalCluster

    from vdbflow import synthetic

    vel = synthetic.flow_volume(synthetic.make_field("taylor_green"), 16, 2 * np.pi, np.dtype("float32"))
    rng = np.random.default_rng(5)
    pts = vel.transform.apply(rng.uniform(-1, 16, (600, 3)))
    scalar = vdbflow.Volume.from_voxels(vel.active_voxels(), rng.standard_normal(vel.active_voxel_count).astype("f4"))
    ints = vdbflow.Volume.from_voxels(vel.active_voxels(), np.arange(vel.active_voxel_count, dtype=np.int64))
    for vol, mode, space in ((vel, "linear", "world"), (scalar, "lag4", "index"), (ints, "closest", "index")):
        ref = vol.sample_grad(pts, mode, space=space, outputs=("value", "jacobian", "inside"))
        jac = next(n for n in ref.data_vars if str(n).endswith("_jacobian"))
        alone = vol.sample_grad(pts, mode, space=space, outputs=("jacobian",))
        assert list(alone.data_vars) == [jac]
        np.testing.assert_array_equal(alone[jac].values, ref[jac].values)
        lazy = vol.sample_grad(da.from_array(pts, chunks=(150, 3)), mode, space=space, outputs=("jacobian", "inside"))
        assert sorted(lazy.data_vars) == sorted([jac, "stencil_inside"])
        np.testing.assert_array_equal(lazy[jac].values, ref[jac].values)
        np.testing.assert_array_equal(lazy["stencil_inside"].values, ref["stencil_inside"].values)
    ref = vel.sample_grad(pts, outputs=("value", "jacobian"))
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        Client(cluster) as client,
        vdbflow.distribute(vel, client, 2) as dvol,
    ):
        far = dvol.sample_grad(pts, outputs=("jacobian",)).compute()  # points outside every partition too
    assert list(far.data_vars) == ["velocity_jacobian"]
    np.testing.assert_array_equal(far["velocity_jacobian"].values, ref["velocity_jacobian"].values)
