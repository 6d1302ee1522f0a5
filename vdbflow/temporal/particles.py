"""Lagrangian particles: trajectories (:func:`advect`) and finite-time Lyapunov exponents
(:func:`ftle`) through a steady :class:`~vdbflow.Volume`, a :class:`~vdbflow.VolumeSeries` or a
:class:`~vdbflow.DistributedVolume` of vec3 velocity, in world space.

Integrators (explicit Runge-Kutta, ``h = (t1 - t0) / n`` with ``n = ceil(|t1 - t0| / dt)``):
``euler`` (first order), ``rk2`` (the explicit midpoint rule, second order), ``rk4`` (the classical
fourth-order method).  Three engines give the same trajectories bit for bit: through a steady float
Volume, whole trajectories in the kernels (``kernels/vdbflow/advect.h``); through a DistributedVolume,
the particles resident on the workers of the partitions owning their cells, integrated there in the
kernels and moved worker to worker as they cross partitions (:mod:`vdbflow.temporal.resident`; the
results are lazy Dask arrays, assembled on the workers); otherwise stage by stage, every stage
sampling all live particles in one call.

A particle stops, with a status, the first time a stage point is non-finite or samples a non-finite
value (``status`` 2) or the stencil of ``mode`` there leaves the active voxels (``status`` 1, see
:func:`vdbflow.ops.coverage.stencil_inside`); its later positions are NaN and ``end_time`` is the time of
its last valid position.  Every stored position is one where the field is defined.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.core import schema, units
from vdbflow.errors import PointsError, SamplingError, TimeError
from vdbflow.ops.coverage import InsideCheck
from vdbflow.ops.sampling import points_in
from vdbflow.temporal.integration import ACTIVE, LEFT_DATA, NON_FINITE, Run, step_plan
from vdbflow.temporal.resident import advect_resident
from vdbflow.temporal.sources import as_source
from vdbflow.temporal.steps import (
    MAX_STEPS,
    TABLEAUS,
    check_trajectory_memory,
    save_every_of,
    saved_bytes_per_step,
    saved_steps,
    step_count,
    trajectory_bytes_limit,
)

STATUS_MEANINGS = schema.STATUS_MEANINGS
__all__ = [  # the integration's names, importable from here too
    "ACTIVE",
    "LEFT_DATA",
    "MAX_STEPS",
    "NON_FINITE",
    "TABLEAUS",
    "InsideCheck",
    "check_trajectory_memory",
    "save_every_of",
    "saved_bytes_per_step",
    "saved_steps",
    "step_count",
    "step_plan",
    "trajectory_bytes_limit",
]


def _real(value: Any, name: str) -> float:
    """A time, step or interval as a float; a TimeError naming it otherwise."""
    if isinstance(value, (str, bytes)) or value is None:
        raise TimeError(f"expected a real number for {name}, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TimeError(f"expected a real number for {name}, got {value!r}") from None


def _seeds(seeds: Any) -> Any:
    if getattr(seeds, "chunks", None) is not None and hasattr(seeds, "dask"):  # a Dask array: left lazy
        if seeds.ndim < 1 or seeds.shape[-1] != 3 or seeds.size == 0 or seeds.dtype.kind not in "fiu":
            raise PointsError(f"expected seeds of shape (N, 3) or (..., 3), numeric, got {seeds.shape} {seeds.dtype}")
        return seeds.astype(np.float64)
    try:
        arr = np.asarray(seeds, np.float64)
    except (TypeError, ValueError) as err:
        raise PointsError(f"expected seeds as a (..., 3) numeric array, got {type(seeds).__name__}: {err}") from None
    if arr.ndim < 1 or arr.shape[-1] != 3 or arr.size == 0:
        raise PointsError(f"expected seeds of shape (N, 3) or (..., 3), at least one, got {arr.shape}")
    return arr


def advect(
    source: Any,
    seeds: Any,
    t0: float,
    t1: float,
    dt: float,
    method: str = "rk4",
    mode: str = "linear",
    *,
    save_every: int = 1,
    with_velocity: bool = False,
    with_jacobian: bool = False,
    time: str = "linear",
    device: str = "cpu",
    with_ftle: bool = False,
) -> xr.Dataset:
    """Trajectories of particles through a velocity field, in world space.

    The particles start at ``seeds`` at time ``t0`` and are integrated to ``t1`` (backwards when
    ``t1 < t0``) with ``n = ceil(|t1 - t0| / dt)`` equal steps of at most ``dt``.  A particle stops
    the first time a stage point is non-finite, samples a non-finite value or its ``mode`` stencil
    leaves the active voxels (module docstring).

    Parameters
    ----------
    source : Volume, VolumeSeries, DistributedVolume or analytic field
        A vec3 velocity: a Volume (steady), a VolumeSeries or DistributedSeries (interpolated in time
        with ``time``), a DistributedVolume (a halo of one leaf, ``distribute(..., halo=8)``, keeps
        most steps inside their partition), or an analytic field (:mod:`vdbflow.synthetic`,
        :mod:`vdbflow.synthetic.unsteady`).
        Velocity in length units per time unit.
    seeds : array_like, shape (N, 3) or (..., 3)
        Start positions in world space (the volume's length units), at least one; flattened in C
        order to the ``particle`` dim.  A Dask array stays lazy through a DistributedVolume or
        DistributedSeries: each chunk of seeds is made and routed on a worker, never on the client.
    t0, t1 : float
        Start and end times (finite; inside the series' times for a VolumeSeries).
    dt : float
        The largest time step, > 0.
    method : {"euler", "rk2", "rk4"}, default ``"rk4"``
        The explicit Runge-Kutta integrator.
    mode : str, default ``"linear"``
        The sampling scheme (see :func:`vdbflow.sample`).
    save_every : int, default 1
        Keep positions every ``save_every`` steps (and always at ``t1``).
    with_velocity : bool, default False
        Also return the velocity at the stored positions.
    with_jacobian : bool, default False
        Also return the world-space velocity Jacobian at the stored positions.
    time : {"none", "linear", "pchip"}, default ``"linear"``
        Interpolation in time between the steps of a VolumeSeries.
    device : {"cpu", "cuda"}, default ``"cpu"``
        Where the trajectories through a float Volume are integrated ("cuda": one GPU thread a
        particle, CuPy).  Series, distributed and analytic sources run on the CPU.
    with_ftle : bool, default False
        Also integrate the flow-map gradient along each path (the variational equation, as
        :func:`ftle`) and return each particle's FTLE over ``[t0, t1]``.

    Returns
    -------
    xarray.Dataset
        ``position`` (particle, time, axis) float64, in length units, NaN after a particle
        stopped; ``status`` (particle) int8 (0 active, 1 left the data, 2 non-finite);
        ``end_time`` (particle), the time of its last valid position; with ``with_velocity`` the
        velocity, named after the source's volume (``velocity`` for an analytic field), dims
        (particle, time, component), and with ``with_jacobian`` ``<name>_jacobian``
        (particle, time, component, axis) = d u_c / d x_a, both at
        the stored positions, in the source's units (per length unit); with ``with_ftle`` ``ftle``
        (particle), per unit of time, NaN for a particle that stopped.  Attrs record the method,
        mode, times, step and number of sample calls.

    Raises
    ------
    SamplingError
        An unknown ``method``, ``mode`` or ``time``, a source that is not a vec3 velocity of a known
        kind, or ``save_every`` < 1.
    TimeError
        Non-finite ``t0`` or ``t1``, ``dt`` <= 0, or times outside a series.
    PointsError
        Seeds that are not a non-empty (..., 3) numeric array.
    DeviceError
        An unknown ``device``, or ``"cuda"`` for a source other than a float Volume, or without CuPy
        and a GPU.

    See Also
    --------
    ftle : finite-time Lyapunov exponents of the same flow.
    """
    src = as_source(source, mode, time, device)
    pts = _seeds(seeds)
    t0, t1, dt = _real(t0, "t0"), _real(t1, "t1"), _real(dt, "dt")
    if not isinstance(pts, np.ndarray) and not src.resident_for(t0, t1):
        pts = np.asarray(pts)  # Dask seeds stay lazy only for particles resident on a cluster
    if with_ftle and not (math.isfinite(t1 - t0) and t1 != t0):
        raise TimeError(f"expected t1 != t0 for with_ftle (an FTLE needs a nonzero time), got t0 = t1 = {t0!r}")
    run = Run(
        src,
        pts.reshape(-1, 3),
        float(t0),
        float(t1),
        float(dt),
        method,
        save_every,
        with_velocity,
        with_jacobian,
        variational=with_ftle,
    )
    if run.resident:  # through a cluster: the particles live on the workers, the results too (lazy)
        advect_resident(run, pts.reshape(-1, 3))
    N = run.position.shape[0]
    name = src.name
    var_attrs, var_dims = schema.trajectory_attrs(name, src.units, src.length_units), schema.trajectory_dims(name)
    coords = {
        "particle": ("particle", np.arange(N), {"long_name": "particle index (seeds in C order)"}),
        "time": ("time", run.times, dict(schema.TIME_ATTRS)),
        "axis": ("axis", schema.labels(schema.AXIS_LABELS["world"]), dict(schema.WORLD_AXIS_ATTRS)),
    }
    arrays = {"position": run.position, "status": run.status, "end_time": run.end_time}
    if run.velocity is not None or run.jacobian is not None:
        coords["component"] = ("component", schema.labels(src.component_names), {"long_name": f"component of {name}"})
    if run.velocity is not None:
        arrays[schema.value_name(name)] = run.velocity
    if run.jacobian is not None:
        arrays[schema.jacobian_name(name)] = run.jacobian
    if run.F is not None:
        arrays["ftle"] = _ftle_of(run.F, float(t1) - float(t0))
    data = {var: (var_dims[var], arr, var_attrs[var]) for var, arr in arrays.items()}
    # positions stay unwrapped (continuous across faces); their images in the box as well
    if src.periodic is not None and isinstance(run.position, np.ndarray):
        wrapped = src.periodic.wrap_world_points(src.transform, run.position)
        data["position_wrapped"] = (
            var_dims["position"],
            wrapped.reshape(run.position.shape),
            {
                **var_attrs["position"],
                "long_name": "particle position moved by whole periods into the box",
            },
        )
    attrs = {
        "featureType": "trajectory",
        "method": method,
        "sampling_mode": mode,
        "source": src.kind,
        "t0": run.t0,
        "t1": run.t1,
        "dt": run.h,
        "steps": run.n,
        "save_every": int(save_every),
        "seed_shape": np.array(pts.shape[:-1]),
        "sample_calls": run.evaluations,
    }
    if src.kind == "series":
        attrs["time_interpolation"] = time
    if src.periodic is not None:
        attrs["periodic"] = src.periodic.describe()
    if run.resident:  # resident particles: how they travelled (vdbflow.temporal.resident)
        attrs.update(
            rounds=run.rounds,
            migrations=run.migrations,
            stage_by_stage_steps=run.stage_by_stage_steps,
            client_steps=run.client_steps,
        )
    return xr.Dataset(data, coords=coords, attrs=attrs)


def _largest_stretch(F: np.ndarray) -> np.ndarray:
    """lambda_max(F^T F) of (..., 3, 3) flow-map gradients (NaN where F is)."""
    out = np.full(F.shape[:-2], np.nan)
    good = np.isfinite(F).all(axis=(-2, -1))
    C = np.einsum("...ca,...cb->...ab", F[good], F[good])
    out[good] = np.linalg.eigvalsh(C)[..., -1]
    return out


def _ftle_of(F: Any, T: float) -> Any:
    """log(sqrt(lambda_max(F^T F))) / |T| of (..., 3, 3) flow-map gradients (NaN where F is); chunk by
    chunk for a Dask array (a distributed run's)."""
    if not isinstance(F, np.ndarray):
        return F.map_blocks(_ftle_of, T, drop_axis=(F.ndim - 2, F.ndim - 1), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(_largest_stretch(F)) / (2 * abs(T))


def ftle(
    source: Any,
    seeds: Any,
    t0: float,
    T: float,
    dt: float | None = None,
    *,
    method: str = "variational",
    integrator: str = "rk4",
    mode: str = "linear",
    time: str = "linear",
    dims: Any = None,
    device: str = "cpu",
) -> xr.Dataset:
    """Finite-time Lyapunov exponents of the flow map from ``t0`` to ``t0 + T``.

    FTLE = ``log(sqrt(lambda_max(F^T F))) / |T|``, with F the gradient of the flow map (backward
    for T < 0).  ``method="variational"`` integrates dF/dt = J(x(t), t) F with the sampled
    Jacobians alongside each particle (the same ``integrator``), F(t0) = I.
    ``method="finite_difference"`` takes F from the final positions of neighbouring seeds
    (numpy.gradient along each lattice dim, one-sided at the edges) through the lattice's own
    directions: ``F = P G^+`` with ``P`` and ``G`` the gradients of the final and initial positions
    along the lattice dims - for a plane of seeds, the stretching within the plane.  Seeds whose
    particle stops (``status`` != 0) get NaN (and, for finite_difference, so do their neighbours).

    Parameters
    ----------
    source : Volume, VolumeSeries, DistributedVolume or analytic field
        A vec3 velocity, as for :func:`advect`.
    seeds : array_like, shape (N, 3) or (..., 3)
        Start positions in world space (length units); a lattice (..., 3) keeps its shape in the
        result.  ``finite_difference`` needs a lattice of at most 3 dims with at least 2 seeds
        along each.
    t0 : float
        Start time.
    T : float
        Integration time, finite and nonzero (negative: backward).
    dt : float, optional
        The largest time step; default ``|T| / 100``.
    method : {"variational", "finite_difference"}, default ``"variational"``
        How F is found (above).
    integrator : {"euler", "rk2", "rk4"}, default ``"rk4"``
        The Runge-Kutta integrator of the particles (and of F).
    mode : str, default ``"linear"``
        The sampling scheme (see :func:`vdbflow.sample`).
    time : {"none", "linear", "pchip"}, default ``"linear"``
        Interpolation in time between the steps of a VolumeSeries.
    dims : str or sequence of str, optional
        Names of the seeds' leading dims (as in :func:`vdbflow.sample`).
    device : {"cpu", "cuda"}, default ``"cpu"``
        Where the particles (and F) are integrated through a float Volume, as for :func:`advect`.

    Returns
    -------
    xarray.Dataset
        On the seeds' leading dims: ``ftle`` float64, per unit of time (``units``: the velocity's over the length's),
        ``status`` int8 (as in :func:`advect`), and ``final_position`` (..., axis), the position at
        ``t0 + T`` in length units; coordinates ``x, y, z`` (the seeds at ``t0``) and ``axis``.

    Raises
    ------
    SamplingError
        An unknown ``method``, ``integrator``, ``mode`` or ``time``, or a source that is not a vec3
        velocity of a known kind.
    TimeError
        A non-finite or zero ``T``, a non-finite ``t0``, ``dt`` <= 0, or times outside a series.
    PointsError
        Seeds that are not a non-empty (..., 3) numeric array, or not a lattice fit for
        ``finite_difference``.
    DeviceError
        As for :func:`advect`.

    See Also
    --------
    advect : the trajectories themselves.
    """
    if method not in ("variational", "finite_difference"):
        raise SamplingError(f"expected method 'variational' or 'finite_difference', got {method!r}")
    t0, T = _real(t0, "t0"), _real(T, "T")
    dt = None if dt is None else _real(dt, "dt")
    if not (math.isfinite(T) and T != 0):
        raise TimeError(f"expected a finite, nonzero integration time T, got {T!r}")
    pts, lead, dims_, _ = points_in(_seeds(seeds), dims)
    pts = np.asarray(pts, np.float64)
    if method == "finite_difference" and (len(lead) > 3 or min(lead) < 2):
        raise PointsError(
            f"expected a lattice of seeds (..., 3) with at least 2 seeds along each of at most 3 "
            f"dims for method='finite_difference', got shape {pts.shape}"
        )
    src = as_source(source, mode, time, device)
    step = abs(T) / 100 if dt is None else float(dt)
    run = Run(
        src,
        pts.reshape(-1, 3),
        float(t0),
        float(t0) + float(T),
        step,
        integrator,
        1_000_000_000,
        False,
        False,
        variational=method == "variational",
    )
    if run.resident:
        advect_resident(run, pts.reshape(-1, 3))
    final = run.position[:, -1].reshape(lead + (3,))
    if method == "variational":
        F = run.F.reshape(lead + (3, 3))
    else:
        final = np.asarray(final)  # the lattice's gradients, in memory
        axes = range(len(lead))
        P = np.stack([np.gradient(final, axis=d) for d in axes], axis=-1)  # (..., 3, L)
        G = np.stack([np.gradient(pts, axis=d) for d in axes], axis=-1)
        F = np.full(lead + (3, 3), np.nan)
        good = np.isfinite(P).all(axis=(-2, -1))
        F[good] = P[good] @ np.linalg.pinv(G[good])
    value = _ftle_of(F, T)

    coords: dict[str, Any] = {
        "axis": ("axis", schema.labels(schema.AXIS_LABELS["world"]), dict(schema.WORLD_AXIS_ATTRS))
    }
    for a, label in enumerate("xyz"):
        coords[label] = (dims_, pts[..., a], schema.seed_coord_attrs(label, src.length_units))
    length = units.normalize(src.length_units)
    data = {
        "ftle": (dims_, value, schema.ftle_attrs(src.units, src.length_units, method)),
        "status": (dims_, run.status.reshape(lead), schema.status_attrs()),
        "final_position": (
            dims_ + ("axis",),
            final,
            {"long_name": "position at t0 + T", **({"units": length} if length else {})},
        ),
    }
    attrs = {
        "t0": float(t0),
        "T": float(T),
        "method": method,
        "integrator": integrator,
        "sampling_mode": mode,
        "dt": run.h,
        "steps": run.n,
        "source": src.kind,
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)
