"""One pass per chunk: the samples of a job whose volume every worker reads whole.

When the job's volume fits a worker many times over (``REPLICATE_FRACTION`` of its memory; the volume is
memory-mapped from its file, or sent once to each worker when synthetic), each chunk of points is one
task, ``vdbflow-chunk-*``: it makes its points (the generator of :mod:`vdbflow.jobs.points`, or its
block of a points file), samples every grid with the job's request - values, Jacobians and the derived
quantities in one kernel pass, only the asked outputs written - flags the stencils that leave the data
where asked, runs the analytic check of a synthetic field on its points, and returns its rows of every
output, which the store tasks of the same worker encode and write.  No point crosses the network, no
task waits on another chunk, and a worker holds one chunk of results at a time.  Larger volumes are
partitioned across the workers instead (:mod:`vdbflow.distribution`), each point routed to its partition.

Each task also returns the seconds it spent making points, sampling and checking (``CHUNK_PHASES``),
which the job summary reports as its worker time by step.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from operator import getitem
from typing import Any

import numpy as np

from vdbflow.core import outputs as output_table
from vdbflow.core import schema
from vdbflow.core.kernel import DERIVED
from vdbflow.devices import run
from vdbflow.io.grid_ref import GridRef
from vdbflow.ops.chunk_graph import PerChunk, map_chunks, reduce_chunks, stack_chunks
from vdbflow.ops.request import OUTPUTS, SampleRequest

CHUNK_KEY = "vdbflow-chunk"  # task-key prefix of the chunk tasks (jobs.progress groups by it)
TALLY_KEY = "vdbflow-tally"  # the partitioned path's point tallies (non-finite points, the edge of the data)
ANALYTIC_KEY = "vdbflow-analytic"  # each one-pass chunk's analytic errors, picked from its task's result
SECONDS_KEY = "vdbflow-seconds"  # ... and its seconds by phase
CHUNK_PHASES = ("points", "sampling", "checks")  # the seconds each chunk task returns
REPLICATE_FRACTION = 0.125  # a volume up to this share of a worker's memory is read whole by every worker
ANALYTIC_CHECK_PER_CHUNK = 65_536  # points of each chunk compared with a synthetic field's analytic values


def template(source: GridRef | Any) -> Any:
    """A job's grid on the client: its file read here (memory-mapped; not kept, the snapshot's mapping
    ends with the job), or the in-memory Volume."""
    return source.read() if isinstance(source, GridRef) else source


def on_workers(source: GridRef | Any, client: Any) -> Any:
    """What a job's tasks are given of a grid: its GridRef (each worker opens the file once, as
    :func:`opened` does), or the in-memory Volume scattered once to every worker."""
    return source if isinstance(source, GridRef) else client.scatter(source, broadcast=True)


def opened(source: GridRef | Any) -> Any:
    """The grid a task samples: its file opened once per worker process (:meth:`GridRef.open`: a job's volume
    file is its private snapshot, so a path names one file for the job's life), or the Volume."""
    return source.open() if isinstance(source, GridRef) else source


@dataclass(frozen=True)
class AnalyticCheck:
    """What a chunk compares with a synthetic field: ``output`` (``jacobian`` or a derived quantity) of the
    first grid, against the field's analytic Jacobian (derived by the kernels' own function), at points
    of ``space`` whose ``mode`` stencil reads only active voxels; ``index_to_world`` (4, 4)."""

    field: Any
    output: str
    mode: str
    space: str
    jacobian_space: str
    index_to_world: np.ndarray


def analytic_error(check: AnalyticCheck, X: np.ndarray, P: np.ndarray, topology: Any) -> np.ndarray:
    """(1, 2): max |X - X_exact| over the interior points of a chunk (at most ``ANALYTIC_CHECK_PER_CHUNK``
    evenly spaced points of it) and their count.  Interior points are those whose stencil reads only
    active voxels (:func:`vdbflow.ops.coverage.stencil_inside`), where the error is the scheme's own,
    free of the background."""
    from vdbflow.ops.coverage import stencil_inside

    if len(P) > ANALYTIC_CHECK_PER_CHUNK:  # a check, not an output: evenly spaced points of the chunk
        pick = np.linspace(0, len(P) - 1, ANALYTIC_CHECK_PER_CHUNK).astype(np.int64)
        X, P = X[pick], P[pick]
    finite = np.isfinite(P).all(axis=1)
    if not finite.all():  # non-finite points have no analytic value (the summary counts them)
        X, P = X[finite], P[finite]
    M = np.asarray(check.index_to_world, np.float64)
    world = P if check.space == "world" else P @ M[:3, :3].T + M[:3, 3]
    exact = check.field.jacobian(world)
    if check.jacobian_space == "index":
        exact = exact @ M[:3, :3]
    if check.output != "jacobian":
        quantity = {check.output: np.empty(X.shape, np.float64)}
        velocity = check.field.velocity(world) if check.output == "helicity" else None
        run(
            "derive",
            np.ascontiguousarray(exact, np.float64),
            None if velocity is None else np.ascontiguousarray(velocity, np.float64),
            quantity,
        )
        exact = quantity[check.output]
    inside = stencil_inside(topology, P, check.mode, check.space)
    if not len(X):  # no finite point in the chunk: nothing to compare (the tally counts the chunk's points)
        return np.array([[0.0, 0.0]])
    err = np.abs(X.astype(np.float64) - exact).reshape(len(X), -1).max(axis=1, initial=0.0)
    return np.array([[np.max(err[inside], initial=0.0), inside.sum()]])


EDGE_CHECK_PER_CHUNK = 16_384  # points of each chunk whose stencil is checked for the summary's edge share


def point_tally(
    points: np.ndarray, topology: Any, mode: str, space: str, inside: np.ndarray | None = None
) -> np.ndarray:
    """(1, 3) int64 for the job summary: the chunk's non-finite points, its finite points checked for the
    edge of the data, and those of them whose ``mode`` stencil reads the background.  ``inside``: the
    chunk's stencil-inside flags where the job writes them (all points checked); otherwise at most
    ``EDGE_CHECK_PER_CHUNK`` evenly spaced points are (a share, not a flag per point)."""
    from vdbflow.ops.coverage import stencil_inside

    finite = np.isfinite(points).all(axis=1)
    if inside is None:
        if len(points) > EDGE_CHECK_PER_CHUNK:
            pick = np.linspace(0, len(points) - 1, EDGE_CHECK_PER_CHUNK).astype(np.int64)
            sub, checked = points[pick], finite[pick]
        else:
            sub, checked = points, finite
        inside = stencil_inside(topology, np.ascontiguousarray(sub[checked]), mode, space)
        outside = int(np.count_nonzero(~inside))
    else:
        checked = finite
        outside = int(np.count_nonzero(checked & ~np.asarray(inside, bool)))
    return np.array([[len(points) - int(np.count_nonzero(finite)), int(np.count_nonzero(checked)), outside]], np.int64)


@dataclass(frozen=True)
class ChunkSpec:
    """What each chunk task does: the ``request`` of every grid (each grid's outputs in its order, then
    its stencil-inside flag where ``inside``), the points ``generator`` ``(fn, args)`` of
    :mod:`vdbflow.jobs.points` (None: the task is given its block of points), and the ``check``."""

    request: SampleRequest
    generator: tuple[Any, tuple] | None
    inside: bool
    check: AnalyticCheck | None


def sample_chunk(block: int, start: int, stop: int, spec: ChunkSpec, given: Any, *sources: Any) -> tuple:
    """One chunk of a job: ``(points (n, 3) float64, each grid's outputs..., check (1, 2) or None,
    tally (1, 3), seconds (3,))``; ``given`` is the chunk's block of points where the spec has no
    generator.  The tally is :func:`point_tally` of the first grid."""
    seconds = np.zeros(len(CHUNK_PHASES))
    t0 = time.perf_counter()
    if spec.generator is not None:
        fn, args = spec.generator
        points = fn(block, start, stop, *args)
    else:
        points = np.ascontiguousarray(given, np.float64)
    t1 = time.perf_counter()
    seconds[0] = t1 - t0
    from vdbflow.ops.coverage import stencil_inside
    from vdbflow.ops.sampling import sample_host_arrays

    out: list[Any] = [points]
    first: dict[str, Any] = {}
    topology, flags = None, None
    for source in sources:
        vol = opened(source)
        arrays = sample_host_arrays(vol, spec.request, points)  # a GPU worker: through its pinned pipeline
        out += [arrays[name] for name in spec.request.outputs]
        if spec.inside:
            out.append(stencil_inside(vol, points, spec.request.mode, spec.request.space))
        if topology is None:
            first, topology, flags = arrays, vol.topology, (out[-1] if spec.inside else None)
    t2 = time.perf_counter()
    seconds[1] = t2 - t1
    errors = None
    if spec.check is not None:
        errors = analytic_error(spec.check, first[spec.check.output], points, topology)
    tally = point_tally(points, topology, spec.request.mode, spec.request.space, flags)
    seconds[2] = time.perf_counter() - t2
    return (*out, errors, tally, seconds)


# -- the request and variables of a job's grid (both paths) ------------------------------------------------

TENSORS = output_table.names("tensor")  # 3 x 3 per point: computed from the Jacobian (analysis.flow)


def grid_request(cfg: Any) -> SampleRequest:
    """The sampling request of a job's grids: the fields it writes (the Jacobian also where a tensor
    output needs it) and the derived quantities the kernels compute in the same pass, so that a job
    asking for Q alone has 4 bytes a point written."""
    from vdbflow.jobs.config.model import SECOND

    sp = cfg.sampling
    asked = set(sp.outputs)
    derived = tuple(o for o in sp.outputs if o in DERIVED)
    if asked & set(SECOND):
        fields: tuple[str, ...] = OUTPUTS
    else:
        need_jacobian = "jacobian" in asked or bool(asked & set(TENSORS))
        fields = tuple(o for o, want in (("value", "value" in asked), ("jacobian", need_jacobian)) if want)
        if not derived and fields in ((), ("jacobian",)):  # the fields without derived quantities start at the value
            fields = ("value",) + fields
    return SampleRequest(sp.mode, fields + derived, cfg.points.space, sp.jacobian_space, device=sp.device)


def analytic_check(cfg: Any, field: Any, output: str, index_to_world: np.ndarray) -> AnalyticCheck:
    """The analytic check of a job's ``output`` (``jacobian`` or a derived quantity) of its first grid."""
    space = cfg.points.space
    return AnalyticCheck(field, output, cfg.sampling.mode, space, cfg.sampling.jacobian_space or space, index_to_world)


def grid_variables(
    template: Any, request: SampleRequest, pts: Any, arrays: dict[str, Any], cfg: Any, prefix: str, inside: Any
) -> tuple[Any, str | None]:
    """The variables of one grid named for the job's outputs, from its sampled ``arrays`` (and the lazy
    stencil-inside flags, or None), and the name of the variable the analytic check compares (the
    Jacobian, else the first derived quantity; None: neither)."""
    import xarray as xr

    from vdbflow.analysis import flow
    from vdbflow.ops.coverage import counts_tiles
    from vdbflow.ops.results import result_dataset

    sp = cfg.sampling
    ds = result_dataset(template, request, pts, arrays)
    name = template.name
    variables = {
        "value": schema.value_name(name),
        "jacobian": schema.jacobian_name(name),
        "hessian": schema.hessian_name(name),
    }
    out = ds[[v for o, v in variables.items() if o in sp.outputs]]
    if "laplacian" in sp.outputs:
        out[f"{prefix}laplacian"] = flow.laplacian(ds[variables["hessian"]])
    for quantity in sp.outputs:
        if quantity in TENSORS:
            out[f"{prefix}{quantity}"] = getattr(flow, quantity)(ds[variables["jacobian"]])
        elif quantity in DERIVED:
            out[f"{prefix}{quantity}"] = ds[quantity if quantity != schema.value_name(name) else f"{name}_{quantity}"]
    if inside is not None:
        out[f"{prefix}{schema.STENCIL_INSIDE}"] = xr.DataArray(
            inside, dims="point", attrs=schema.stencil_inside_attrs(sp.mode, name, counts_tiles(template))
        )
    if "jacobian" in sp.outputs:
        return out, variables["jacobian"]
    return out, next((f"{prefix}{q}" for q in request.derived), None)


# -- the graph of the one-pass path ---------------------------------------------------------------------------


def replicable(volume_bytes: int, worker_memory: int) -> bool:
    """Whether a volume of ``volume_bytes`` is read whole by every worker of ``worker_memory`` bytes
    (0: no limit known)."""
    return worker_memory <= 0 or volume_bytes <= REPLICATE_FRACTION * worker_memory


def chunked_dataset(
    cfg: Any, templates: dict[str, Any], sources: dict[str, Any], point_set: Any, field: Any
) -> tuple[Any, Any, Any, str | None]:
    """The lazy result of a one-pass job: ``templates`` the grids by name (opened here, memory-mapped, for
    names and units), ``sources`` what the workers sample (``(path, grid)`` or a Volume / its future),
    ``point_set`` the job's points, ``field`` the synthetic field or None.  Returns the Dataset, the lazy
    (chunks, 2) analytic errors (or None), the lazy seconds by ``CHUNK_PHASES``, the checked output and
    the lazy (3,) sum of the chunks' :func:`point_tally`."""
    import dask
    import xarray as xr
    from dask.base import tokenize

    request = grid_request(cfg)
    inside = "inside" in cfg.sampling.outputs
    first = next(iter(templates.values()))
    output = "jacobian" if "jacobian" in cfg.sampling.outputs else next(iter(request.derived), None)
    check = None if field is None or output is None else analytic_check(cfg, field, output, first.index_to_world)
    spec = ChunkSpec(request, point_set.generator, inside, check)
    columns: list[tuple[str, str, tuple[int, ...], Any]] = [("", "points", (3,), np.float64)]
    for name, template in templates.items():
        request.for_value_type(template.value_type)
        shapes, dtypes = request.shapes((), template.components), request.dtypes(template.value_type)
        columns += [(name, o, shapes[o], dtypes[o]) for o in request.outputs]
        if inside:
            columns.append((name, "inside", (), np.bool_))
    points = point_set.points
    sizes = points.chunks[0]
    starts = [int(s) for s in np.cumsum((0,) + tuple(sizes))]
    given = PerChunk([None] * len(sizes)) if spec.generator is not None else points
    token = tokenize(spec, tuple(map(str, sources.values())), points.name)
    shared_spec = dask.delayed(spec, name=f"vdbflow-chunk-spec-{token}")  # sent once to each worker
    chunk = (PerChunk(range(len(sizes))), PerChunk(starts[:-1]), PerChunk(starts[1:]), shared_spec, given)
    tasks = map_chunks(sample_chunk, *chunk, *sources.values(), name=CHUNK_KEY, token=token)
    outputs = [(shape, dtype) for _, _, shape, dtype in columns]
    lazy = stack_chunks(tasks, (sizes,), outputs, [f"vdbflow-rows-{k}-{token}" for k in range(len(columns))])
    # the figures of each chunk named for it, so that a resumed job finds them (jobs.publish.units)
    errors, tallies, seconds = (
        [
            dask.delayed(getitem, pure=True)(task, len(columns) + i, dask_key_name=f"{key}-{token}-{b}")
            for b, task in enumerate(tasks)
        ]
        for i, key in enumerate((ANALYTIC_KEY, TALLY_KEY, SECONDS_KEY))
    )
    pts = lazy[0]
    datasets = []
    k = 1
    for name, template in templates.items():
        arrays = {o: lazy[k + i] for i, o in enumerate(request.outputs)}
        k += len(request.outputs)
        flags = None
        if inside:
            flags, k = lazy[k], k + 1
        prefix = "" if len(templates) == 1 else f"{name}_"
        datasets.append(grid_variables(template, request, pts, arrays, cfg, prefix, flags)[0])
    ds = xr.merge(datasets, compat="override", join="override", combine_attrs="override")
    error_rows = reduce_chunks(errors, None, np.concatenate) if check is not None else None
    total = reduce_chunks(seconds, None, functools.partial(np.sum, axis=0))
    return ds, error_rows, total, None if check is None else check.output, reduce_chunks(tallies, None, sum_rows)


def sum_rows(rows: list) -> np.ndarray:
    """The chunks' rows (1, k) summed: (k,)."""
    return np.sum(np.concatenate(rows), axis=0)
