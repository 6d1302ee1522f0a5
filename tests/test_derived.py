"""Flow quantities computed in the kernels from the Jacobian they hold (kernels/vdbflow/derived.h), against
vdbflow.analysis.flow on the same Jacobians and against float64 NumPy references (eigenvalues by LAPACK).

Stated tolerances: divergence, vorticity, |vorticity|, Q, helicity and |S| are the same bits as
vdbflow.analysis.flow (both round every product before adding, in the same order); lambda2 and the
swirling strength are computed in float64 (Jacobi rotations; Cardano's cubic) and rounded once to the
Jacobian's dtype: within ``8 eps |J|^2`` (lambda2; S^2 + W^2 may cancel to far below |J|^2) of LAPACK in
float64, and within
``4 sqrt(eps) |J|`` (the swirling strength, which has a square-root branch where the complex pair
appears; ``64 eps |J|`` where lambda_ci > 0.01 |J|).
"""

import numpy as np
import pytest
import xarray as xr
from reference import random_sparse_voxels

import vdbflow
from vdbflow.analysis import flow
from vdbflow.core.kernel import DERIVED
from vdbflow.devices import cpu
from vdbflow.errors import SamplingError
from vdbflow.ops.request import SampleRequest
from vdbflow.ops.sampling import sample_arrays, sample_dataset

EXACT = ("divergence", "vorticity", "vorticity_magnitude", "q_criterion", "helicity", "strain_rate_magnitude")


def vec3_volume(rng, dtype, rotated=True):
    ijk, values = random_sparse_voxels(rng, n_leaves=30, spread=4, fill=0.7, components=3)
    M = np.eye(4)
    if rotated:
        a = 0.4
        M[:3, :3] = 0.5 * np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1.3]])
        M[:3, 3] = [1.0, -2.0, 0.5]
    tiles = (np.array([[128, 0, 0]]), np.array([128]), np.array([[0.5, -1.0, 2.0]]))
    return ijk, vdbflow.Volume.from_voxels(ijk, values.astype(dtype), 0.25, M, tiles=tiles)


def points_of(rng, vol, ijk, n=3000):
    inside = ijk[rng.integers(0, len(ijk), n)] + rng.uniform(-0.6, 0.6, (n, 3))
    special = np.array([[np.nan, 0, 0], [np.inf, 1, 1], [200.5, 60.25, 70.0], [-1e7, 0, 0]])
    with np.errstate(invalid="ignore"):  # the non-finite points stay non-finite
        return vol.transform.apply(np.concatenate([inside, special]))


def flow_reference(J: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
    """The flow module's quantities of Jacobians (N, 3, 3) and velocities (N, 3)."""
    jac = xr.DataArray(J, dims=("point", "component", "axis"))
    vel = xr.DataArray(u, dims=("point", "component"))
    out = {name: getattr(flow, name)(jac).values for name in DERIVED if name not in ("helicity", "r_invariant")}
    out["helicity"] = flow.helicity(vel, jac).values
    out["r_invariant"] = r_invariant_float64(J)
    return out


def r_invariant_float64(J: np.ndarray) -> np.ndarray:
    """R = -det(A) of the traceless part A of J, in float64 (LAPACK's determinant)."""
    A = J.astype(np.float64)
    A = A - np.trace(A, axis1=1, axis2=2)[:, None, None] * np.eye(3) / 3
    return -np.linalg.det(A)


def lambda2_float64(J: np.ndarray) -> np.ndarray:
    J = J.astype(np.float64)
    S, W = 0.5 * (J + np.swapaxes(J, 1, 2)), 0.5 * (J - np.swapaxes(J, 1, 2))
    return np.linalg.eigvalsh(S @ S + W @ W)[:, 1], np.linalg.norm(J, axis=(1, 2)) ** 2


def swirling_float64(J: np.ndarray) -> np.ndarray:
    return np.abs(np.linalg.eigvals(J.astype(np.float64)).imag).max(axis=1)


def check_against_references(out, J, u, complex_pairs=True):
    eps = np.finfo(J.dtype).eps
    ref = flow_reference(J, u)
    finite = np.isfinite(J).all(axis=(1, 2))
    for name in EXACT:
        assert out[name].dtype == J.dtype, name
        np.testing.assert_array_equal(out[name], ref[name], err_msg=name)  # the same bits (NaN where NaN)
    l2, norm = lambda2_float64(J[finite])  # norm: |J|_F^2
    assert np.all(np.abs(out["lambda2"][finite] - l2) <= 8 * eps * norm + np.finfo(J.dtype).tiny)
    assert np.isnan(out["lambda2"][~finite]).all() and np.isnan(out["swirling_strength"][~finite]).all()
    ci, size = swirling_float64(J[finite]), np.linalg.norm(J[finite].astype(np.float64), axis=(1, 2))
    got = out["swirling_strength"][finite]
    assert np.all(np.abs(got - ci) <= 4 * np.sqrt(eps) * size)
    clear = ci > 0.01 * size
    assert clear.sum() > 100 or not complex_pairs  # the points exercise the complex branch
    assert np.all(np.abs(got[clear] - ci[clear]) <= 64 * eps * size[clear])
    # and the flow module's (LAPACK in the Jacobian's dtype) within the same bounds
    assert np.all(np.abs(out["lambda2"][finite] - ref["lambda2"][finite]) <= 64 * eps * norm + 1e-30)
    assert np.all(np.abs(got - ref["swirling_strength"][finite]) <= 4 * np.sqrt(eps) * size)
    # r_invariant: evaluated in double and rounded once: within half an ulp of the dtype, plus double rounding
    r = ref["r_invariant"][finite]
    bound = eps * np.abs(r) + 64 * np.finfo(np.float64).eps * size**3 + np.finfo(J.dtype).tiny
    assert np.all(np.abs(out["r_invariant"][finite] - r) <= bound)
    assert np.isnan(out["r_invariant"][~finite]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["linear", "closest", "catmull_rom", "lag4"])
@pytest.mark.parametrize("order", ["coherent", "scattered"])
def test_fused_outputs_equal_flow_on_the_same_jacobians(rng, dtype, mode, order, monkeypatch):
    ijk, vol = vec3_volume(rng, dtype)
    pts = points_of(rng, vol, ijk)
    plain = SampleRequest(mode, ("value", "jacobian"), "world", point_order=order)
    base = sample_arrays(vol, plain, pts)
    fused = sample_arrays(vol, plain.replace(outputs=("value", "jacobian") + DERIVED), pts)
    np.testing.assert_array_equal(fused["value"], base["value"])  # the fused pass samples the same bits
    np.testing.assert_array_equal(fused["jacobian"], base["jacobian"])
    check_against_references(fused, base["jacobian"], base["value"], complex_pairs=mode != "closest")
    if mode == "closest":  # a zero Jacobian
        assert not fused["jacobian"][np.isfinite(pts).all(axis=1)].any()
    alone = sample_arrays(vol, plain.replace(outputs=DERIVED), pts)  # no value or Jacobian written
    assert set(alone) == set(DERIVED)
    for name in DERIVED:
        np.testing.assert_array_equal(alone[name], fused[name], err_msg=name)
    monkeypatch.setenv("VDBFLOW_SIMD", "0")  # the scalar loops (the host's vector path is simd.h)
    scalar = sample_arrays(vol, plain.replace(outputs=("value", "jacobian") + DERIVED), pts)
    for name in scalar:
        np.testing.assert_array_equal(scalar[name], fused[name], err_msg=name)


def test_index_space_jacobians_and_each_quantity_alone(rng):
    ijk, vol = vec3_volume(rng, np.float32)
    pts = points_of(rng, vol, ijk, 500)
    request = SampleRequest("linear", ("value", "jacobian"), "world", "index")
    base = sample_arrays(vol, request, pts)
    ref = flow_reference(base["jacobian"], base["value"])
    for name in EXACT:
        got = sample_arrays(vol, request.replace(outputs=(name,)), pts)
        assert list(got) == [name]
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)


def test_derived_with_a_hessian_request_and_derive_entry(rng):
    ijk, vol = vec3_volume(rng, np.float64)
    pts = points_of(rng, vol, ijk, 800)
    request = SampleRequest("catmull_rom", ("value", "jacobian", "hessian") + DERIVED, "world")
    out = sample_arrays(vol, request, pts)
    check_against_references(out, out["jacobian"], out["value"])
    direct = {name: np.empty_like(out[name]) for name in DERIVED}
    cpu.derive(out["jacobian"], out["value"], direct)
    for name in DERIVED:
        np.testing.assert_array_equal(direct[name], out[name], err_msg=name)


def test_analytic_values():
    """Solid-body rotation plus a pure strain, where every quantity is known in closed form."""
    w, s = 2.0, 0.5  # rotation rate about z, strain rate along x (u = (s x - w y, w x - s y, 0))
    J = np.array([[[s, -w, 0.0], [w, -s, 0.0], [0.0, 0.0, 0.0]]])
    u = np.array([[1.0, 2.0, 3.0]])
    out = {name: np.empty((1, 3) if name == "vorticity" else (1,)) for name in DERIVED}
    cpu.derive(J, u, out)
    assert out["divergence"][0] == 0.0
    np.testing.assert_array_equal(out["vorticity"][0], [0.0, 0.0, 2 * w])
    assert out["vorticity_magnitude"][0] == 2 * w
    assert out["q_criterion"][0] == pytest.approx(w * w - s * s, abs=1e-15)
    assert out["helicity"][0] == pytest.approx(3.0 * 2 * w)
    assert out["strain_rate_magnitude"][0] == pytest.approx(2 * s)
    assert out["swirling_strength"][0] == pytest.approx(np.sqrt(w * w - s * s), rel=1e-14)
    assert out["lambda2"][0] == pytest.approx(s * s - w * w, abs=1e-14)  # S^2 + W^2 = diag(s2 - w2, s2 - w2, 0)


def test_refusals(rng):
    with pytest.raises(SamplingError, match="unknown"):
        SampleRequest("linear", ("value", "q_critrion"))
    with pytest.raises(SamplingError, match="fields"):
        SampleRequest("linear", ("hessian", "q_criterion"))
    with pytest.raises(SamplingError, match="fields"):
        SampleRequest("linear", ("jacobian", "hessian"))  # a Hessian comes with the value and the Jacobian
    ijk, values = random_sparse_voxels(rng, n_leaves=3, spread=2, fill=0.5, components=1)
    scalar = vdbflow.Volume.from_voxels(ijk, values.astype(np.float32))
    with pytest.raises(SamplingError, match="vec3 float field"):
        sample_arrays(scalar, SampleRequest("linear", ("q_criterion",)), ijk.astype(float))
    with pytest.raises(SamplingError, match="derived quantities among"):
        cpu.derive(np.zeros((1, 3, 3)), None, {"q": np.zeros(1)})


def test_dataset_variables_and_units(rng):
    ijk, vol = vec3_volume(rng, np.float32)
    vol.units, vol.length_units = "m/s", "m"
    pts = points_of(rng, vol, ijk, 100)[:100]
    ds = sample_dataset(vol, SampleRequest("linear", ("value",) + DERIVED, "world"), pts)
    assert ds["q_criterion"].attrs["units"] == "1/s^2" and ds["vorticity"].dims == ("point", "axis")
    assert ds["helicity"].attrs["units"] == "m/s^2" and ds["divergence"].attrs["units"] == "1/s"
    assert list(ds["axis"].values) == ["x", "y", "z"] and "value_jacobian" not in ds
    ref = sample_dataset(vol, SampleRequest("linear", ("value", "jacobian"), "world"), pts)
    np.testing.assert_array_equal(ds["q_criterion"].values, flow.q_criterion(ref["value_jacobian"]).values)
    assert ds["q_criterion"].attrs["long_name"] == flow.q_criterion(ref["value_jacobian"]).attrs["long_name"]


def test_distributed_derived_equal_single_process(rng):
    distributed = pytest.importorskip("distributed")
    from vdbflow.distribution.volume import distribute

    ijk, vol = vec3_volume(rng, np.float32)
    pts = points_of(rng, vol, ijk, 2000)
    request = SampleRequest("linear", ("value",) + DERIVED, "world")
    local = sample_arrays(vol, request, pts)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
    ):
        dvol = distribute(vol, client, 3)
        try:
            arrays = dvol.sample_arrays(request, pts)
            got = {name: a.compute() for name, a in arrays.items()}
        finally:
            dvol.close()
    for name in request.outputs:  # background-only points included (their derived values from the kernels)
        np.testing.assert_array_equal(got[name], local[name], err_msg=name)


def test_series_derive_from_the_interpolated_jacobian(rng):
    """Through a series, derived quantities are those of the Jacobian interpolated in time (Q of the
    interpolant, never the interpolant of Q): equal to the flow module on the series' own Jacobians."""
    ijk, values = random_sparse_voxels(rng, n_leaves=12, spread=3, fill=0.8, components=3)
    steps = [vdbflow.Volume.from_voxels(ijk, (k + 1.0) * values + k) for k in range(3)]
    series = vdbflow.VolumeSeries(steps, [0.0, 1.0, 2.5])
    pts = ijk[rng.integers(0, len(ijk), 400)] + rng.uniform(-0.4, 0.4, (400, 3))
    t = rng.uniform(0.0, 2.5, 400)
    for time in ("linear", "pchip"):
        fields = series.sample_arrays(SampleRequest("linear", ("value", "jacobian")), pts, t, time)
        got = series.sample_arrays(SampleRequest("linear", DERIVED), pts, t, time)
        assert set(got) == set(DERIVED)
        ref = flow_reference(fields["jacobian"], fields["value"])
        for name in EXACT:
            np.testing.assert_array_equal(got[name], ref[name], err_msg=f"{time} {name}")
        l2, norm = lambda2_float64(fields["jacobian"])
        assert np.all(np.abs(got["lambda2"] - l2) <= 8 * np.finfo(float).eps * norm)
