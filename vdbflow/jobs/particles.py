"""The particle section of a job (``advect:``): seeds from the points section, trajectories to the store.

Each chunk of seeds (``points.chunk`` of them, or fewer so that every worker gets one: :func:`seed_chunk`)
is one task, ``vdbflow-advect-*``, that advects its particles whole through the
volume (:func:`vdbflow.advect`: on a worker's CPU, in the compiled kernels) and returns their rows of
every output; the store is written chunk by chunk as the tasks finish.  Particles never meet, so
there is no traffic between workers and a worker holds one chunk of results at a time.  The volume is
memory-mapped from its file on each worker (opened once per worker process), or, for a synthetic
field without a file, sent to every worker once; a ``volume.series`` of files is opened once per
worker too, its steps read as the particles' times need them.  A volume too large for one worker is advected
from Python through a :class:`~vdbflow.DistributedVolume` instead (``vdbflow.advect(dvol, ...)``).

Outputs, on ``(particle, time, axis)`` - or the seeds' plane or lattice dims for ``particle``:
``position``, ``status``, ``end_time``, and as asked ``<name>`` (velocity), ``<name>_jacobian`` and
``ftle``; each as :func:`vdbflow.advect` returns it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.core import schema
from vdbflow.core.volume import Volume
from vdbflow.errors import NanoVDBError, OpenVDBError, StorageError, TimeError, VolumeError
from vdbflow.jobs.chunks import opened
from vdbflow.jobs.config.model import ConfigError
from vdbflow.jobs.estimates import SERIES_CACHE_STEPS
from vdbflow.ops.chunk_graph import map_chunks, stack_chunks
from vdbflow.temporal.particles import advect, step_plan
from vdbflow.temporal.series import StepIdentity, VolumeSeries, open_series

ADVECT_KEY = "vdbflow-advect"  # task-key prefix of the seed chunks (jobs.progress groups by it)


@dataclass(frozen=True)
class SeriesFiles:
    """A series of .nvdb files as the tasks open it (:func:`vdbflow.open_series`): paths in time order,
    their times (None: each file's time record), the grid and the steps kept open per worker.

    ``identities`` (recorded where this is made, on the client) travel with it to the workers, so a
    file replaced or rewritten after the job started is refused wherever it is opened
    (:class:`~vdbflow.temporal.series.StepChangedError`), and :meth:`StepIdentity.sha256` hashes
    exactly the files the workers read."""

    paths: tuple[str, ...]
    times: tuple[float, ...] | None
    grid: str | None
    cache: int | str  # "auto" until the job's executor knows the workers' memory (estimates.series_cache)
    identities: tuple[StepIdentity, ...] = ()

    def __post_init__(self) -> None:
        if not self.identities:
            object.__setattr__(self, "identities", tuple(StepIdentity.of(p) for p in self.paths))

    def open(self) -> VolumeSeries:
        times = None if self.times is None else list(self.times)
        cache = SERIES_CACHE_STEPS if self.cache == "auto" else int(self.cache)
        return open_series(list(self.paths), times, self.grid, cache=cache, identities=self.identities)


@functools.lru_cache(maxsize=2)  # series kept open in a worker process between tasks
def _opened_series(files: SeriesFiles) -> VolumeSeries:
    return files.open()


def _advect_chunk(source: Any, seeds: np.ndarray, settings: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """One chunk's particles: position (n, S, 3), status (n,), end_time (n,), then as asked velocity
    (n, S, 3), Jacobian (n, S, 3, 3) and FTLE (n,), and the seeds' x, y, z (n,) each (the coordinates
    come from here, so that no seed chunk waits in a worker's memory for its coordinates' writes)."""
    if isinstance(source, SeriesFiles):
        vol: Any = _opened_series(source)
    else:
        vol = opened(source)
        if not isinstance(vol, Volume):
            raise VolumeError(f"expected a grid of values to advect through in {source.path}, got an index grid")
    outputs = settings["outputs"]
    ds = advect(
        vol,
        np.asarray(seeds, np.float64).reshape(-1, 3),
        settings["t0"],
        settings["t1"],
        settings["dt"],
        settings["method"],
        settings["mode"],
        save_every=settings["save_every"],
        with_velocity="velocity" in outputs,
        with_jacobian="jacobian" in outputs,
        with_ftle="ftle" in outputs,
        time=settings["time"],
        device=settings["device"],
    )
    name = vol.template.name if isinstance(vol, VolumeSeries) else vol.name
    names = ["position", "status", "end_time"]
    names += [
        v
        for v, o in ((schema.value_name(name), "velocity"), (f"{name}_jacobian", "jacobian"), ("ftle", "ftle"))
        if o in outputs
    ]
    start = np.asarray(seeds, np.float64).reshape(-1, 3)
    return (*(ds[v].values for v in names), *(np.ascontiguousarray(start[:, a]) for a in range(3)))


def series_steps(cfg: Any) -> tuple[tuple[float, int], ...]:
    """A series job's steps as (time, file bytes) (headers and time records only) for its plan, checked against
    ``advect``'s ``[t0, t1]`` of the config ``cfg``; a ConfigError naming the key otherwise."""
    s, a = cfg.volume.series, cfg.advect
    assert s is not None and a is not None  # a series job is a particle job (JobConfig checks it)
    files = SeriesFiles(tuple(map(os.fspath, s.files())), None if s.times is None else tuple(s.times), s.grid, 1)
    try:
        times = files.open().times
    except (VolumeError, TimeError, NanoVDBError, OpenVDBError, StorageError) as err:
        raise ConfigError(f"volume.series{cfg.where('volume.series')}: {err}") from None
    lo, hi = float(times[0]), float(times[-1])
    if not (lo <= min(a.t0, a.t1) and max(a.t0, a.t1) <= hi):
        raise ConfigError(
            f"advect{cfg.where('advect')}: expected t0 and t1 inside the series' times [{lo!r}, {hi!r}], "
            f"got t0={a.t0!r}, t1={a.t1!r}"
        )
    return tuple(zip(map(float, times), (identity.size for identity in files.identities), strict=True))


def seed_chunk(seeds: int, chunk: int, workers: int, row: int = 1) -> int:
    """Seeds per task: ``points.chunk``, or fewer so that every one of ``workers`` gets a task (a particle
    costs the same wherever it runs, and 20,000 seeds in one chunk ran on one of two workers); whole
    rows of ``row`` seeds (a plane's or lattice's first dim), at least one, so that the results unravel
    to its shape chunk by chunk: a chunk across rows made the reshape hold pieces of many chunks at once
    (a worker's memory grew with the seeds: 295 MiB for 10^6, 450 MiB for 10^7)."""
    per_task = max(1, min(chunk, -(-seeds // max(1, workers))))
    return max(row, per_task // row * row) if row > 1 else per_task


def particle_dataset(cfg: Any, source: Any, template: Volume, seeds: Any) -> xr.Dataset:
    """The lazy result of a particle job: ``seeds`` a Dask (N, 3) array, ``source`` the Volume (or a
    future of it), ``(path, grid)`` or the :class:`SeriesFiles` workers open, ``template`` the volume
    (a series: its first step; names and units)."""
    from dask.base import tokenize

    spec, mode = cfg.advect, cfg.sampling.mode
    if template.components != 3 or not template.value_type.is_float:
        raise VolumeError(
            f"advect: expected a vec3 float velocity grid, got {template.name!r} with "
            f"{template.components} component(s) of {template.value_type.name}"
        )
    n, h, save_steps, times = step_plan(spec.t0, spec.t1, spec.dt, spec.save_every)
    S = len(times)
    settings = {
        "t0": spec.t0,
        "t1": spec.t1,
        "dt": spec.dt,
        "method": spec.method,
        "mode": mode,
        "save_every": spec.save_every,
        "outputs": list(spec.outputs),
        "time": spec.time,
        "device": cfg.sampling.device,
    }
    name = template.name
    shapes: list[tuple[str, tuple[int, ...], Any]] = [
        ("position", (S, 3), np.float64),
        ("status", (), np.int8),
        ("end_time", (), np.float64),
    ]
    if "velocity" in spec.outputs:
        shapes.append((schema.value_name(name), (S, 3), np.float64))
    if "jacobian" in spec.outputs:
        shapes.append((schema.jacobian_name(name), (S, 3, 3), np.float64))
    if "ftle" in spec.outputs:
        shapes.append(("ftle", (), np.float64))
    shapes += [(label, (), np.float64) for label in "xyz"]  # the seeds' coordinates, from the same tasks
    dims = schema.trajectory_dims(name)
    token = tokenize(source, settings, seeds.name)
    parts = map_chunks(_advect_chunk, source, seeds, settings, name=ADVECT_KEY, token=token)
    names = [f"vdbflow-trajectory-{var}-{token}" for var, _, _ in shapes]
    columns = stack_chunks(parts, seeds.chunks[:1], [(shape, dtype) for _, shape, dtype in shapes], names)
    attrs = schema.trajectory_attrs(name, template.units, template.length_units)
    data, seed_columns = {}, {}
    for column, (var, _, _) in zip(columns, shapes, strict=True):
        if var in ("x", "y", "z"):
            seed_columns[var] = column
        else:
            data[var] = (dims[var], column, attrs[var])
    coords: dict[str, Any] = {
        "time": ("time", times, dict(schema.TIME_ATTRS)),
        "axis": ("axis", schema.labels(schema.AXIS_LABELS["world"]), dict(schema.WORLD_AXIS_ATTRS)),
    }
    for label in "xyz":
        coords[label] = ("particle", seed_columns[label], schema.seed_coord_attrs(label, template.length_units))
    if "velocity" in spec.outputs or "jacobian" in spec.outputs:
        coords["component"] = (
            "component",
            schema.labels(template.component_names),
            {"long_name": f"component of {name}"},
        )
    periodic = getattr(template, "periodic", None)
    if periodic is not None:  # positions stay unwrapped (continuous across faces); their images in the box too
        wrapped = data["position"][1].map_blocks(periodic.wrap_world_points_of, template.transform, dtype=np.float64)
        long_name = "particle position moved by whole periods into the box"
        data["position_wrapped"] = (dims["position"], wrapped, {**attrs["position"], "long_name": long_name})
    return xr.Dataset(
        data,
        coords=coords,
        attrs={
            **({"periodic": periodic.describe()} if periodic is not None else {}),
            "featureType": "trajectory",
            "method": spec.method,
            "sampling_mode": mode,
            "t0": spec.t0,
            "t1": spec.t1,
            "dt": h,
            "steps": n,
            "save_every": spec.save_every,
            # a series: its time interpolation, and the steps each worker kept open (volume.series.cache, resolved)
            **(
                {"time_interpolation": spec.time, "series_cache": source.cache}
                if isinstance(source, SeriesFiles)
                else {}
            ),
        },
    )
