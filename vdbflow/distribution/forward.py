"""The forward graph of a distributed volume: point chunks grouped in waves, each wave routed in one
task, its pieces sampled by the partitions that own them, and assembled in input order (the module
docstring of :mod:`vdbflow.distribution.volume` draws the graph).  Small pure functions, run as tasks;
:func:`forward_arrays` builds the graph of one :class:`~vdbflow.ops.request.SampleRequest`."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from vdbflow.core.volume import Volume
from vdbflow.devices import array_module, is_cupy_array, run
from vdbflow.distribution import keys
from vdbflow.distribution.plan import Router
from vdbflow.errors import PointsError, SamplingError
from vdbflow.ops.chunk_graph import blocks, stack_chunks
from vdbflow.ops.request import SampleRequest

DEFAULT_CHUNK = 1 << 20  # points per chunk when the points are a NumPy array


def route_wave(
    router: Router, transform: Any, space: str, near: np.ndarray | None, device: str, *chunks: np.ndarray
) -> tuple:
    """Route a wave of point chunks (concatenated, in order) in one kernel pass.  Returns the P
    partitions' indices in the wave, then their points, then the indices of the points that read only
    background: separate outputs, so that only a piece's points travel to its partition and its
    indices stay for the assembly.  ``device="cuda"`` routes on this worker's GPU; the pieces travel
    as host arrays."""
    pts = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    order, bounds, grouped = router.route(pts, transform, space, near, device)
    if device == "cuda":
        order, bounds, grouped = order.get(), bounds.get(), grouped.get()
    groups = range(1, len(bounds) - 1)
    return (
        *(order[bounds[g] : bounds[g + 1]] for g in groups),
        *(grouped[bounds[g] : bounds[g + 1]] for g in groups),
        order[bounds[0] : bounds[1]],
    )


def sample_piece(volume: Volume, pts: np.ndarray, request: SampleRequest) -> tuple:
    """Sample one partition's points (n, 3) of a wave: one array per output of ``request``."""
    on_gpu = request.device == "cuda" and len(pts)  # the partition's arrays stay cached in this worker's GPU
    if on_gpu:
        pts = array_module("cuda").asarray(pts)
    arrays = volume.sample_arrays(request.replace(device="cuda" if on_gpu else "cpu"), pts)
    return tuple(arrays[name].get() if on_gpu else arrays[name] for name in request.outputs)


def background_rows(template: Volume, request: SampleRequest) -> tuple:
    """What each output of ``request`` reads at a point whose stencil reads only the background: the
    background value, zero derivatives, and the derived quantities of those (from the kernels, so the
    last bit and the sign of a zero are theirs)."""
    shapes, dtypes = request.shapes((1,), template.components), request.dtypes(template.value_type)
    one = (1,) if template.components == 1 else (1, template.components)  # also where the value is not asked
    value = np.asarray(template.background, dtypes.get("value", template.value_type.dtype)).reshape(one)
    rows = {"value": value}
    rows.update({name: np.zeros(shapes[name], dtypes[name]) for name in ("jacobian", "hessian") if name in shapes})
    if request.derived:
        derived = {name: np.empty(shapes[name], dtypes[name]) for name in request.derived}
        jdtype = template.value_type.jacobian_dtype
        run("derive", np.zeros((1, 3, 3), jdtype), value.astype(jdtype).reshape(1, 3), derived)
        rows.update(derived)
    return tuple(rows[name][0] for name in request.outputs)


def assemble_wave(sizes: tuple, outputs: tuple, fills: tuple, routed: tuple, *sampled: tuple) -> tuple:
    """A wave's results in input order from its partitions' shares.  ``routed`` is the wave's
    :func:`route_wave` (the indices are read on the worker that routed: the scheduler runs the
    assembly there, where most of its input already is, and only the sampled arrays travel).
    ``outputs`` gives each array's (trailing shape, dtype), ``fills`` what background-only points read
    (:func:`background_rows`).  Returns one tuple of arrays per chunk of the wave, in order, flattened:
    ``(values_0, jacobian_0, ..., values_1, jacobian_1, ...)`` (views of one block each)."""
    n = int(sum(sizes))
    blocks = [np.empty((n,) + tuple(shape), dtype) for shape, dtype in outputs]
    quiet = routed[-1]
    for block, fill in zip(blocks, fills, strict=True):
        block[quiet] = fill
    for index, arrays in zip(routed[: len(sampled)], sampled, strict=True):
        for block, arr in zip(blocks, arrays, strict=True):
            run("scatter_rows", block, index, arr)
    out = []
    start = 0
    for size in sizes:
        out += [block[start : start + size] for block in blocks]
        start += size
    return tuple(out)


def default_wave(chunks: int, partitions: int, workers: int) -> int:
    """Chunks per wave: ceil(P / 8) (about 20 tasks per chunk at any P), but no fewer waves than
    workers so that every worker routes.  Larger waves trade memory for speed: at 8M points, P = 8,
    2 workers, waves of 2 chunks ran 2.4x the one-process time where waves of 1 ran 2.9x, but the
    peak worker memory grew from 0.46-0.51 GB to 0.60-0.76 GB and kept growing with the point count
    (16M to 64M points), where waves of 1 stayed flat."""
    return max(1, min(-(-partitions // 8), chunks // max(1, workers)))


def forward_arrays(
    dvol: Any, request: SampleRequest, points: Any, wave: int | None = None
) -> tuple[Any, dict[str, Any]]:
    """The forward graph of ``request`` at ``points`` (N, 3), NumPy or Dask (chunked along N), through
    the DistributedVolume ``dvol``: the points (as Dask or NumPy) and one Dask array per output, chunked
    like the points (``DEFAULT_CHUNK`` points per chunk for NumPy points).  ``wave``: point chunks
    routed together (default :func:`default_wave`)."""
    import dask
    import dask.array as da

    template = dvol.template
    request.for_value_type(template.value_type)
    if request.stencil_radius > dvol.halo:
        raise SamplingError(
            f"mode {request.mode!r} reaches {request.stencil_radius} voxels, but this volume was distributed "
            f"with halo={dvol.halo}: distribute(..., halo={request.stencil_radius})"
        )
    if request.device == "auto":  # the workers' device follows the points' array type (Dask: its chunks')
        request = request.replace(device="cuda" if is_cupy_array(getattr(points, "_meta", points)) else "cpu")
    if not isinstance(points, da.Array):
        points = np.asarray(points)
    if points.ndim != 2 or points.shape[1] != 3:
        raise PointsError(f"expected points of shape (N, 3), got {points.shape}")
    if isinstance(points, da.Array):
        points = points.rechunk({1: 3})
    shapes, dtypes = request.shapes((), template.components), request.dtypes(template.value_type)
    outputs = [(shapes[name], dtypes[name]) for name in request.outputs]
    if isinstance(points, da.Array):
        chunks, sizes = blocks(points), points.chunks[0]
    else:  # NumPy points: each wave's chunks travel inside its routing task (recomputable if a worker dies)
        step = DEFAULT_CHUNK
        chunks = [points[s : s + step] for s in range(0, len(points), step)] or [points[:0]]
        sizes = tuple(len(c) for c in chunks)
    W = wave or default_wave(len(chunks), dvol.plan.partitions, dvol.workers)
    if W < 1:
        raise SamplingError(f"expected wave >= 1 (chunks per wave), got {wave}")
    delayed = dask.delayed
    P = dvol.plan.partitions
    token = dask.base.tokenize(
        dvol.partitions[0].key if dvol.partitions else None,
        request,
        points.name if isinstance(points, da.Array) else uuid.uuid4().hex,
        W,
    )
    names = [
        f"{keys.OUTPUTS[name]}-{token}" if name in keys.OUTPUTS else f"{keys.DERIVED}-{name}-{token}"
        for name in request.outputs
    ]
    fills = background_rows(template, request)
    parts = []  # each chunk's (wave task, its first array in the wave's result)
    for w, first in enumerate(range(0, len(chunks), W)):
        members = chunks[first : first + W]
        route = delayed(route_wave, pure=False, nout=2 * P + 1)(
            dvol.plan.router,
            template.transform,
            request.space,
            dvol.near,
            request.device,
            *members,
            dask_key_name=f"{keys.ROUTE}-{token}-{w}",
        )
        sampled = []
        for p, part in enumerate(dvol.partitions):
            # runs where the partition lives (placement.py): a piece moves, never a partition
            sampled.append(
                delayed(sample_piece, pure=False)(
                    part, route[P + p], request, dask_key_name=f"{keys.SAMPLE}-{token}-{w}-{p}"
                )
            )
        done = delayed(assemble_wave, pure=False)(
            sizes[first : first + W],
            tuple(outputs),
            fills,
            route,
            *sampled,
            dask_key_name=f"{keys.REORDER}-{token}-{w}",
        )
        parts += [(done, len(outputs) * i) for i in range(len(members))]
    arrays = dict(zip(request.outputs, stack_chunks(parts, (tuple(sizes),), outputs, names), strict=True))
    return points, arrays


def routed(dvol: Any, wave: int | None = None) -> Any:
    """The executor of a DistributedVolume (:class:`vdbflow.ops.sampling.Executor`): points (*lead, 3)
    routed as (N, 3) through :func:`forward_arrays` and shaped back; the inside flags from the whole
    topology, which the client holds (one task a chunk of points for Dask points)."""
    from vdbflow.ops.coverage import counts_tiles, stencil_inside_flags
    from vdbflow.ops.sampling import Executor

    def arrays(request: SampleRequest, given: Any, lead: tuple) -> tuple[Any, dict[str, Any]]:
        flat, out = forward_arrays(dvol, request, given.reshape(-1, 3) if len(lead) > 1 else given, wave)
        if len(lead) <= 1:
            return flat, out
        return given, {name: a.reshape(lead + a.shape[1:]) for name, a in out.items()}

    def inside(request: SampleRequest, pts: Any, lead: tuple) -> Any:
        flat = pts.reshape(-1, 3) if len(lead) > 1 else pts
        return stencil_inside_flags(dvol.topology, flat, request.mode, request.space, counts_tiles(dvol)).reshape(lead)

    return Executor(arrays, inside)
