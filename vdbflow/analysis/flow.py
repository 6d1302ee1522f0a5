"""Flow-field quantities derived from a velocity-gradient tensor ``J[c, a] = d u_c / d x_a``.

Each function takes the Jacobian DataArray of :meth:`Volume.sample_grad` (dims ``(..., component,
axis)`` with 3 x 3 entries) and returns a DataArray with ``long_name``, ``units`` and ``formula``
attrs; Dask-backed inputs stay lazy (computed chunk by chunk along the points). Units are composed
and simplified by pint (:mod:`vdbflow.core.units`): a Jacobian in ``m/s/m`` gives vorticity in ``1/s`` and
Q in ``1/s^2``; without Jacobian units the results carry none (no ``units`` attr, never ``""``).
CF has no standard names for these quantities in general, so none are set.  The same functions
are reachable as ``ds.vdbflow.<name>()`` on a sample_grad Dataset.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.analysis.plot import PlotMethods
from vdbflow.core import outputs, schema
from vdbflow.core import units as _u
from vdbflow.devices import run
from vdbflow.errors import SamplingError
from vdbflow.io.netcdf import to_netcdf
from vdbflow.io.vtkhdf import to_vtkhdf

CORE = ("component", "axis")


def _check(jac: xr.DataArray) -> None:
    if not set(CORE) <= set(jac.dims) or jac.sizes["component"] != 3 or jac.sizes["axis"] != 3:
        raise SamplingError(
            f"expected a velocity-gradient DataArray with 3 x 3 dims ('component', 'axis'), got dims {jac.dims} "
            f"and sizes {dict(jac.sizes)}"
        )


def _units(jac: xr.DataArray, power: int = 1) -> str | None:
    """The Jacobian's units to ``power``, simplified (None when it has none)."""
    return _u.power(jac.attrs.get("units"), power)


def _attrs(long_name: str, units: str | None, formula: str) -> dict[str, str]:
    return {"long_name": long_name, **({"units": units} if units else {}), "formula": formula}


def _table_attrs(name: str, units: str | None) -> dict[str, str]:
    """The attrs of output ``name`` from the table of outputs (:mod:`vdbflow.core.outputs`)."""
    o = outputs.TABLE[name]
    return _attrs(o.long_name, units, o.formula)


def _apply(
    fn: Any,
    jac: xr.DataArray,
    out_core: tuple[str, ...],
    name: str,
    out_sizes: dict[str, int] | None = None,
) -> xr.DataArray:
    """``fn`` over the 3 x 3 core of ``jac``: quantity ``name``, its attrs and units (the Jacobian's to the
    table's power) from the table of outputs."""
    _check(jac)
    out = xr.apply_ufunc(
        fn,
        jac,
        input_core_dims=[list(CORE)],
        output_core_dims=[list(out_core)],
        dask="parallelized",
        output_dtypes=[np.result_type(jac.dtype, np.float32)],
        dask_gufunc_kwargs={"output_sizes": out_sizes or {}},
    )
    out.name = name
    exponent = outputs.TABLE[name].exponent
    out.attrs = _table_attrs(name, _units(jac, 1 if exponent is None else exponent))
    return out


def _finite_rows(fn: Any, A: np.ndarray) -> np.ndarray:
    """``fn`` of the finite 3 x 3 matrices of ``A`` (..., 3, 3), NaN for the others (LAPACK refuses them)."""
    A = np.asarray(A, np.result_type(A.dtype, np.float32))
    finite = np.isfinite(A).all(axis=(-2, -1))
    out = np.full(A.shape[:-2], np.nan, A.dtype)
    if finite.any():
        out[finite] = fn(A[finite])
    return out


def _sym(J: np.ndarray) -> np.ndarray:
    return 0.5 * (J + np.swapaxes(J, -1, -2))


def _skew(J: np.ndarray) -> np.ndarray:
    return 0.5 * (J - np.swapaxes(J, -1, -2))


def _vorticity(J: np.ndarray) -> np.ndarray:
    return np.stack([J[..., 2, 1] - J[..., 1, 2], J[..., 0, 2] - J[..., 2, 0], J[..., 1, 0] - J[..., 0, 1]], axis=-1)


def _vorticity_magnitude(J: np.ndarray) -> np.ndarray:
    """|curl u| of Jacobians (..., 3, 3) with two temporaries in all (worker processes pay a page
    fault per fresh page), summed in the order ``np.linalg.norm`` sums: (w_x^2 + w_y^2) + w_z^2."""
    w = _vorticity(np.asarray(J, np.result_type(J.dtype, np.float32)))  # integers, float16: float32 at least
    np.multiply(w, w, out=w)
    total = np.add(w[..., 0], w[..., 1])
    total += w[..., 2]
    return np.sqrt(total, out=total)


def _q(J: np.ndarray) -> np.ndarray:
    """Q = (|Omega|^2 - |S|^2) / 2 = -sum_ij J_ij J_ji / 2 of Jacobians (..., 3, 3), with two
    temporaries: the diagonal squares, then each off-diagonal pair twice."""
    J = np.asarray(J, np.result_type(J.dtype, np.float32))  # integers and float16 in float32 at least
    q = np.multiply(J[..., 0, 0], J[..., 0, 0])
    term = np.empty_like(q)
    q += np.multiply(J[..., 1, 1], J[..., 1, 1], out=term)
    q += np.multiply(J[..., 2, 2], J[..., 2, 2], out=term)
    for i, j in ((0, 1), (0, 2), (1, 2)):
        np.multiply(J[..., i, j], J[..., j, i], out=term)
        q += term
        q += term
    q *= -0.5
    return q


def _divergence(J: np.ndarray) -> np.ndarray:
    """(J_xx + J_yy) + J_zz, summed in the order the kernels sum it (derived.h)."""
    J = np.asarray(J, np.result_type(J.dtype, np.float32))
    out = np.add(J[..., 0, 0], J[..., 1, 1])
    out += J[..., 2, 2]
    return out


def _strain_rate_magnitude(J: np.ndarray) -> np.ndarray:
    """|S| = sqrt(2 S:S) of Jacobians (..., 3, 3), in the order of the kernels (derived.h): the diagonal
    squares, then the off-diagonal ones of S counted twice."""
    J = np.asarray(J, np.result_type(J.dtype, np.float32))
    half = J.dtype.type(0.5)
    d = np.multiply(J[..., 0, 0], J[..., 0, 0])
    d += np.multiply(J[..., 1, 1], J[..., 1, 1])
    d += np.multiply(J[..., 2, 2], J[..., 2, 2])
    s01, s02, s12 = ((J[..., i, j] + J[..., j, i]) * half for i, j in ((0, 1), (0, 2), (1, 2)))
    off = np.multiply(s01, s01)
    off += np.multiply(s02, s02)
    off += np.multiply(s12, s12)
    d += off + off
    d += d
    return np.sqrt(d, out=d)


def divergence(jac: xr.DataArray) -> xr.DataArray:
    """div u = trace(J)."""
    return _apply(_divergence, jac, (), "divergence")


def vorticity(jac: xr.DataArray) -> xr.DataArray:
    """omega = curl u, dims (..., axis): a vector along the Jacobian's axes (x y z, or i j k), so it
    sits in one Dataset with the velocity, whose ``component`` labels (u v w) differ."""
    out = _apply(_vorticity, jac, ("axis",), "vorticity", {"axis": 3})
    return out.assign_coords(axis=jac["axis"].values)


def vorticity_magnitude(jac: xr.DataArray) -> xr.DataArray:
    """``|omega|``."""
    return _apply(_vorticity_magnitude, jac, (), "vorticity_magnitude")


def strain_rate(jac: xr.DataArray) -> xr.DataArray:
    """S = (J + J^T) / 2, dims (..., component, axis)."""
    out = _apply(_sym, jac, CORE, "strain_rate", {"component": 3, "axis": 3})
    return out.assign_coords(component=jac["component"].values, axis=jac["axis"].values)


def strain_rate_magnitude(jac: xr.DataArray) -> xr.DataArray:
    """``|S| = sqrt(2 S:S)``, the strain-rate magnitude of Smagorinsky-type models."""
    return _apply(_strain_rate_magnitude, jac, (), "strain_rate_magnitude")


def rotation_rate(jac: xr.DataArray) -> xr.DataArray:
    """Omega = (J - J^T) / 2, dims (..., component, axis)."""
    out = _apply(_skew, jac, CORE, "rotation_rate", {"component": 3, "axis": 3})
    return out.assign_coords(component=jac["component"].values, axis=jac["axis"].values)


def q_criterion(jac: xr.DataArray) -> xr.DataArray:
    """The Q-criterion of a velocity gradient: Q > 0 where rotation dominates strain.

    ``Q = (|Omega|^2 - |S|^2) / 2`` with Frobenius norms of the rotation rate Omega and strain rate S.

    Parameters
    ----------
    jac : xarray.DataArray, dims (..., component, axis)
        A velocity gradient ``J[c, a] = d u_c / d x_a`` with 3 x 3 entries, e.g. the
        ``<name>_jacobian`` variable of :func:`vdbflow.sample_grad` (NumPy or Dask-backed).

    Returns
    -------
    xarray.DataArray
        ``q_criterion`` with the leading dims (and coordinates) of ``jac``, at least float32, in the
        Jacobian's units squared (``1/s^2`` for a Jacobian in ``1/s``; no ``units`` attr when the
        Jacobian has none); attrs ``long_name`` and ``formula``.

    Raises
    ------
    SamplingError
        ``jac`` without 3 x 3 dims ``("component", "axis")``.

    See Also
    --------
    vdbflow.q_criterion_field : Q at every active voxel of a volume.

    Examples
    --------
    A solid-body rotation ``u = 2 (-y, x, 0)`` (m/s) on voxels 0.5 m wide, sampled at one point:

    >>> import numpy as np
    >>> import vdbflow
    >>> from vdbflow import flow
    >>> i, j, k = np.meshgrid(np.arange(8.0), np.arange(8.0), np.arange(8.0), indexing="ij")
    >>> u = np.stack([3.5 - j, i - 3.5, np.zeros_like(k)], axis=-1)  # per voxel: 2 (-y, x, 0) per metre
    >>> vel = vdbflow.Volume.from_dense(u, voxel_size=0.5, active=np.ones(i.shape, bool), name="velocity")
    >>> vel.units, vel.length_units = "m/s", "m"
    >>> ds = vel.sample_grad([[1.75, 1.75, 1.75]])
    >>> ds["velocity_jacobian"].values[0].tolist()
    [[0.0, -2.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    >>> q = flow.q_criterion(ds["velocity_jacobian"])
    >>> q.dims, q.values.tolist(), q.attrs["units"]
    (('point',), [4.0], '1/s^2')
    """

    return _apply(_q, jac, (), "q_criterion")


def lambda2(jac: xr.DataArray) -> xr.DataArray:
    """lambda_2: the middle eigenvalue of S^2 + Omega^2 (a vortex where it is negative)."""

    def l2(J: np.ndarray) -> np.ndarray:
        S, W = _sym(J), _skew(J)
        return _finite_rows(lambda A: np.linalg.eigvalsh(A)[..., 1], S @ S + W @ W)

    return _apply(l2, jac, (), "lambda2")


def swirling_strength(jac: xr.DataArray) -> xr.DataArray:
    """lambda_ci: the imaginary part of J's complex eigenvalue pair (0 where all are real)."""

    def ci(J: np.ndarray) -> np.ndarray:
        return _finite_rows(lambda A: np.abs(np.linalg.eigvals(A).imag).max(axis=-1), J)

    return _apply(ci, jac, (), "swirling_strength")


def laplacian(hessian: xr.DataArray) -> xr.DataArray:
    """The Laplacian of each component, trace of the Hessian over ``(axis, axis2)``: the viscous term
    ``nu * laplacian(u)`` of a velocity field; any field with a Hessian from :meth:`Volume.sample_hessian`."""
    dims = [d for d in hessian.dims if d.endswith("axis") or d.endswith("axis2")][-2:]
    if len(dims) != 2 or hessian.sizes[dims[0]] != 3 or hessian.sizes[dims[1]] != 3:
        raise SamplingError(f"expected a Hessian DataArray with 3 x 3 dims ('axis', 'axis2'), got dims {hessian.dims}")
    out = xr.apply_ufunc(
        lambda H: np.trace(H, axis1=-2, axis2=-1),
        hessian,
        input_core_dims=[dims],
        dask="parallelized",
        output_dtypes=[hessian.dtype],
    )
    out.name = "laplacian"
    out.attrs = _table_attrs("laplacian", _u.normalize(hessian.attrs.get("units")))
    return out


def _helicity(u: np.ndarray, J: np.ndarray) -> np.ndarray:
    """(u_0 w_0 + u_1 w_1) + u_2 w_2 with w = curl u, in the kernels' order (NaN stays NaN)."""
    dtype = np.result_type(u.dtype, J.dtype, np.float32)
    w = _vorticity(np.asarray(J, dtype))
    u = np.asarray(u, dtype)
    h = np.multiply(u[..., 0], w[..., 0])
    h += np.multiply(u[..., 1], w[..., 1])
    h += np.multiply(u[..., 2], w[..., 2])
    return h


def helicity(velocity: xr.DataArray, jac: xr.DataArray) -> xr.DataArray:
    """Helicity density u . omega."""
    _check(jac)
    if "component" not in velocity.dims or velocity.sizes["component"] != 3:
        raise SamplingError(f"expected a velocity with 3 components, got dims {velocity.dims}")
    out = xr.apply_ufunc(
        _helicity,
        velocity.drop_vars("component", errors="ignore"),  # matched by position: (u, v, w) against rows (x, y, z)
        jac.drop_vars("component", errors="ignore"),
        input_core_dims=[["component"], list(CORE)],
        dask="parallelized",
        output_dtypes=[np.result_type(velocity.dtype, jac.dtype, np.float32)],
    )
    out.name = "helicity"
    out.attrs = _table_attrs("helicity", _u.multiply(velocity.attrs.get("units"), _units(jac)))
    return out


def _derive_block(J: np.ndarray, u: np.ndarray | None, name: str) -> np.ndarray:
    """Quantity ``name`` of Jacobians (..., 3, 3) (and velocities (..., 3)) by the kernels' ``derive``."""
    lead = J.shape[:-2]
    dtype = np.result_type(J.dtype, np.float32)
    flat = np.ascontiguousarray(J.reshape(-1, 3, 3), dtype)
    width = outputs.TABLE[name].width
    out = {name: np.empty((len(flat),) + ((width,) if width > 1 else ()), dtype)}
    velocity = None if u is None else np.ascontiguousarray(u.reshape(-1, 3), dtype)
    run("derive", flat, velocity, out, device="cpu")
    return out[name].reshape(lead + out[name].shape[1:])


def derived(jac: xr.DataArray, name: str, velocity: xr.DataArray | None = None) -> xr.DataArray:
    """Any derived quantity of the table of outputs (:data:`vdbflow.core.outputs.TABLE`, kind ``derived``)
    of a velocity gradient ``jac`` (dims (..., component, axis)), computed by the kernels' own formula (the
    one the sampling pass fuses; NumPy or Dask-backed), with the table's attrs and units.  ``velocity``
    (dims (..., component)) is needed by quantities that read it (helicity).  A quantity added to the
    kernels is here without any code of its own; the named functions (:func:`q_criterion`, ...) compute
    the same in NumPy."""
    kind = outputs.TABLE[name].kind if name in outputs.TABLE else None
    if kind != "derived":
        raise SamplingError(f"expected a derived quantity among {', '.join(outputs.names('derived'))}, got {name!r}")
    _check(jac)
    width = outputs.TABLE[name].width
    out_core = ["axis"] if width > 1 else []
    if outputs.TABLE[name].velocity:
        if velocity is None:
            raise SamplingError(f"{name} needs the velocity: derived(jac, {name!r}, velocity=...)")
        args, cores = (jac, velocity), [list(CORE), ["component"]]
        fn = lambda J, u: _derive_block(J, u, name)  # noqa: E731
    else:
        args, cores = (jac,), [list(CORE)]
        fn = lambda J: _derive_block(J, None, name)  # noqa: E731
    out = xr.apply_ufunc(
        fn,
        *args,
        input_core_dims=cores,
        output_core_dims=[out_core],
        dask="parallelized",
        output_dtypes=[np.result_type(jac.dtype, np.float32)],
        dask_gufunc_kwargs={"output_sizes": {"axis": 3} if width > 1 else {}},
    )
    if width > 1:
        out = out.assign_coords(axis=jac["axis"].values)
    out.name = name
    exponent = outputs.TABLE[name].exponent
    units = _units(jac, 1 if exponent is None else exponent)
    if outputs.TABLE[name].velocity and velocity is not None:
        units = _u.multiply(velocity.attrs.get("units"), _units(jac))
    out.attrs = _table_attrs(name, units)
    return out


@xr.register_dataset_accessor("vdbflow")
class VdbflowAccessor:
    """``ds.vdbflow``: derived quantities of a :meth:`Volume.sample_grad` Dataset of a vec3 field."""

    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    def _jacobian(self) -> xr.DataArray:
        names = [v for v in self._ds.data_vars if v.endswith("_jacobian")]
        if len(names) != 1:
            raise SamplingError(f"expected one '<field>_jacobian' variable, found {names}")
        return self._ds[names[0]]

    def _velocity(self) -> xr.DataArray:
        grid = str(self._jacobian().name)[: -len("_jacobian")]
        return self._ds[schema.value_name(grid) if schema.value_name(grid) in self._ds else grid]

    @property
    def plot(self) -> Any:
        """Plots of this Dataset: ``.slice(var)``, ``.jacobian_grid()``, ``.line(var)`` (vdbflow.analysis.plot)."""
        return PlotMethods(self._ds)

    def divergence(self) -> xr.DataArray:
        """Divergence tr(J) of this Dataset's Jacobian (see :func:`vdbflow.analysis.flow.divergence`)."""
        return divergence(self._jacobian())

    def vorticity(self) -> xr.DataArray:
        """Vorticity curl u, dims (..., axis) (see :func:`vdbflow.analysis.flow.vorticity`)."""
        return vorticity(self._jacobian())

    def vorticity_magnitude(self) -> xr.DataArray:
        """``|curl u|`` (see :func:`vdbflow.analysis.flow.vorticity_magnitude`)."""
        return vorticity_magnitude(self._jacobian())

    def strain_rate(self) -> xr.DataArray:
        """Strain-rate tensor S = (J + Jᵀ)/2 (see :func:`vdbflow.analysis.flow.strain_rate`)."""
        return strain_rate(self._jacobian())

    def strain_rate_magnitude(self) -> xr.DataArray:
        """``|S| = sqrt(2 S:S)`` (see :func:`vdbflow.analysis.flow.strain_rate_magnitude`)."""
        return strain_rate_magnitude(self._jacobian())

    def rotation_rate(self) -> xr.DataArray:
        """Rotation-rate tensor Ω = (J − Jᵀ)/2 (see :func:`vdbflow.analysis.flow.rotation_rate`)."""
        return rotation_rate(self._jacobian())

    def q_criterion(self) -> xr.DataArray:
        """``Q = (|Ω|² − |S|²)/2``, positive in vortex cores (see :func:`vdbflow.analysis.flow.q_criterion`)."""
        return q_criterion(self._jacobian())

    def lambda2(self) -> xr.DataArray:
        """λ2: the middle eigenvalue of S² + Ω², negative in vortex cores (:func:`vdbflow.analysis.flow.lambda2`)."""
        return lambda2(self._jacobian())

    def swirling_strength(self) -> xr.DataArray:
        """Imaginary part of J's complex eigenvalues (:func:`vdbflow.analysis.flow.swirling_strength`)."""
        return swirling_strength(self._jacobian())

    def helicity(self) -> xr.DataArray:
        """Helicity density u · curl u (see :func:`vdbflow.analysis.flow.helicity`)."""
        return helicity(self._velocity(), self._jacobian())

    def __getattr__(self, name: str) -> Any:
        """Each derived quantity of the table of outputs without a method of its own (``ds.vdbflow.r_invariant()``),
        by the kernels' formula."""
        if not name.startswith("_") and name in outputs.TABLE and outputs.TABLE[name].kind == "derived":
            return lambda: self.derived(name)
        raise AttributeError(f"'VdbflowAccessor' object has no attribute {name!r}")

    def derived(self, name: str) -> xr.DataArray:
        """Any derived quantity of the table of outputs by the kernels' formula (see
        :func:`vdbflow.analysis.flow.derived`)."""
        needs = outputs.TABLE[name].velocity if name in outputs.TABLE else False
        return derived(self._jacobian(), name, self._velocity() if needs else None)

    def to_vtkhdf(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write this Dataset as a VTKHDF file for ParaView / VTK (:func:`vdbflow.io.vtkhdf.to_vtkhdf`: regular
        lattices as ImageData, other points as PolyData with one vertex a point; whole or not at all)."""
        return to_vtkhdf(self._ds, path, overwrite=overwrite)

    def to_netcdf(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write this Dataset (a result, or a Zarr result opened with xarray) as NetCDF-4 that CF checkers pass:
        flags typed as stored, a history line for this call (:func:`vdbflow.io.netcdf.to_netcdf`)."""
        return to_netcdf(self._ds, path, overwrite=overwrite)

    def laplacian(self) -> xr.DataArray:
        """Laplacian of the field, from the ``<field>_hessian`` variable of a sample_hessian Dataset."""
        names = [v for v in self._ds.data_vars if v.endswith("_hessian")]
        if len(names) != 1:
            raise SamplingError(f"expected one '<field>_hessian' variable (Volume.sample_hessian), found {names}")
        return laplacian(self._ds[names[0]])
