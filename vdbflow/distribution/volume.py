"""Distributed sampling: a volume's leaves partitioned across Dask workers, with halos.

Each partition is a :class:`Volume` holding its own leaves plus the halo leaves its stencils reach,
living on a worker: its own leaves come from the client (a Volume) or from the worker's own read of an
.nvdb file, and its halo from the neighbouring partitions, as tasks that move leaves worker to worker.
Points are routed to the partition that owns their base cell (empty leaf slots included), sampled
there with the same kernels, and returned in input order - equal bit for bit to
:meth:`Volume.sample_grad` on the whole volume.

The forward graph streams.  Point chunks are grouped in *waves* of ``W`` consecutive chunks; for each
wave ``w``:

- ``route[w]``: one task routes the wave's points (kernels: ``route_points``) into P pieces plus the
  background-only points; each piece's points are their own key (``piece[w, p]``, a tuple selection);
- ``sample[w, p]``: partition p samples its piece of the wave, on the worker that holds the partition;
  a piece's points move to that worker once, its results move once to the assembler;
- ``reorder[w]``: the wave's results assembled in input order, one key per output chunk and array.  It
  reads the piece indices from ``route[w]`` itself, so it runs on the routing worker and indices
  never travel.

Placement is the scheduler's, set by a plugin (:mod:`vdbflow.distribution.placement`) rather than by
graph annotations, which Dask's array optimisation drops: a sampling task runs on the worker holding
its partition, and a wave's selections and assembly on the worker that routed it.

No task depends on another wave, so a wave's chunks are assembled (and written, in a job) as soon as
its own pieces are sampled, and Dask's scheduling keeps only a few waves in flight: worker memory
depends on the chunk size and the waves in flight, not on the number of points.

Task count of one call, for ``n`` chunks in ``m = ceil(n / W)`` waves over ``P`` partitions::

    m * (2 * P + 2)  +  n * (1 + A)

(route, point-piece selections, samples, reorder per wave; the point chunk and ``A`` output-chunk
selections per chunk, ``A`` = 1 for values, 2 with Jacobians).  The default wave holds ``ceil(P / 8)``
chunks (at least one wave per worker kept), so a call costs about 20 tasks per chunk at any P, where
the product chunks x partitions would grow with P.

Reverse mode (:meth:`DistributedVolume.sample_grad_vjp`, :func:`vjp_graph`) streams through the same
waves: per wave and partition one task differentiates the piece and one folds its data adjoints into
the partition's running total, in wave order; per wave one task puts the point adjoints back in order.
"""

from __future__ import annotations

import operator
import os
import pickle
import tempfile
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dask.sizeof import sizeof

from vdbflow import _core
from vdbflow.core import tree
from vdbflow.core.volume import Topology, Volume
from vdbflow.distribution.plan import PartitionPlan, Router, leaf_stencil, near_blocks, plan_partitions
from vdbflow.errors import SamplingError, VolumeError
from vdbflow.io.atomic import create_exclusive
from vdbflow.io.identity import FileIdentity
from vdbflow.ops.sampling import MODES, SPACES, STENCIL_RADIUS, build_dataset, check_choice, sample_grad_arrays


@sizeof.register(Volume)
def _sizeof_volume(volume: Volume) -> int:
    """The scheduler's size of a partition: what it weighs when it places or steals tasks that read it."""
    return volume.nbytes


DEFAULT_CHUNK = 1 << 20  # points per chunk when the points are a NumPy array


def _import_dask() -> tuple[Any, Any, Any]:
    try:
        import dask
        import dask.array as da
        import distributed
    except ImportError as err:  # pragma: no cover - dask is a dependency of this module
        raise ImportError(
            "vdbflow.distribute needs dask and distributed: pip install 'dask[array]' distributed"
        ) from err
    return dask, da, distributed


# -- tasks (small pure functions) -------------------------------------------------------------------
class DistributedFile(FileIdentity):
    """What a distributed .nvdb file was when it was distributed: a partition read again later (its
    worker died) is read from that same file, or refused."""

    label = "the distributed file"
    seen = "it was distributed"


def _read_leaves(path: str, grid: Any, identity: FileIdentity | None, leaves: np.ndarray) -> Volume:
    """The given leaves of an .nvdb grid, read by the worker itself (memory-mapped, then copied),
    from the file ``identity`` says it is (checked before and after)."""
    from vdbflow.io.nanovdb import open_grid

    def read() -> Volume:
        return open_grid(path, grid, leaves=leaves).contiguous()

    return read() if identity is None else identity.opened(read, "when a partition was read")


def _load_spilled(path: str) -> Volume:
    """A partition's own leaves, spilled to a file by the client (an in-memory volume made recoverable:
    a worker that dies with it is replaced by rerunning this task elsewhere)."""
    with open(path, "rb") as f:
        volume = pickle.load(f)
    if not isinstance(volume, Volume):
        raise VolumeError(f"expected a spilled partition (a Volume) in {path}, got {type(volume).__name__}")
    return volume


def _hold(volume: Volume) -> Volume:
    """A partition's own leaves carried in the task itself: the scheduler keeps them, and can rerun
    the task if its worker dies (the fallback when no directory is shared with every worker)."""
    return volume


def _spill(pieces: list[Volume], client: Any, spill: str | os.PathLike | bool | None) -> list[str] | None:
    """Write the pieces to files that every worker can read, or return None (no such directory)."""
    if spill is False:
        return None
    folder = tempfile.gettempdir() if spill is None or spill is True else os.fspath(spill)
    paths = [os.path.join(folder, f"vdbflow-partition-{uuid.uuid4().hex}.pkl") for _ in pieces]
    try:
        for piece, path in zip(pieces, paths, strict=True):
            with create_exclusive(path, 0o600) as f:  # new, not through a link, the owner's alone
                pickle.dump(piece, f, protocol=pickle.HIGHEST_PROTOCOL)
        seen = client.run(os.path.isfile, paths[0]) if paths else {}
    except OSError as err:
        _remove_files(paths)
        if spill is None:
            return None
        raise VolumeError(f"expected a writable spill directory {folder!r} for the partitions, got: {err}") from None
    if all(seen.values()):
        return paths
    _remove_files(paths)
    if spill is None:  # the workers run elsewhere: carry the pieces in the tasks instead
        return None
    lost = sorted(w for w, ok in seen.items() if not ok)
    raise VolumeError(
        f"expected a spill directory {folder!r} that every worker can read, but {len(lost)} worker(s) "
        f"cannot see it: {lost[:3]}"
    )


def _remove_files(paths: list[str] | tuple[str, ...]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


def _extract(volume: Volume, leaves: np.ndarray) -> Volume:
    """Some leaves of a partition, to be sent to a neighbour as its halo."""
    return volume.select_leaves(leaves)


def _merge(owned: Volume, *halo_pieces: Volume) -> Volume:
    """A partition's own leaves and the halo leaves received from its neighbours, in tree order."""
    if not halo_pieces:
        return owned
    parts = (owned, *halo_pieces)
    origins = np.concatenate([v.topology.leaf_origins for v in parts])
    masks = np.concatenate([v.topology.masks for v in parts])
    order = tree.tree_order(origins >> tree.LEAF_SHIFT)
    C = owned.components
    if owned.index_layout:
        counts = np.bitwise_count(masks).sum(axis=1).astype(np.int64)
        data = np.concatenate([v.value_rows() for v in parts])
        starts = np.cumsum(counts) - counts
        rows = np.repeat(starts[order] - (np.cumsum(counts[order]) - counts[order]), counts[order]) + np.arange(
            int(counts.sum())
        )
        data = data[rows]
    else:
        data = np.concatenate([v.leaf_values for v in parts])[order].reshape(-1, C)
    t = owned.topology
    topo = Topology(origins[order], masks[order], t.transform, t.tile_origins, t.tile_sizes)
    return Volume(
        topo,
        data,
        owned.background_values,
        owned.tile_values,
        owned.value_type,
        owned.index_layout,
        owned.name,
        owned.component_names,
    )


def _route_wave(
    router: Router, transform: Any, space: str, near: np.ndarray | None, device: str, *chunks: np.ndarray
) -> tuple:
    """Route a wave of point chunks (concatenated, in order) in one kernel pass.  Returns the P
    partitions' indices in the wave, then their points, then the indices of the points that read only
    background: separate outputs, so that only a piece's points travel to its partition and its
    indices stay for the assembly.  ``device="cuda"`` routes on this worker's GPU; the pieces travel
    as host arrays."""
    pts = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    if device == "cuda":
        from vdbflow.devices import cuda

        order, bounds, grouped = (
            a.get()
            for a in cuda.route(
                pts,
                router.origin,
                router.shift,
                router.boundaries,
                transform.kernel_parameters(),
                space == "world",
                near,
            )
        )
    else:
        order, bounds, grouped = router.route(pts, transform, space, near)
    groups = range(1, len(bounds) - 1)
    return (
        *(order[bounds[g] : bounds[g + 1]] for g in groups),
        *(grouped[bounds[g] : bounds[g + 1]] for g in groups),
        order[bounds[0] : bounds[1]],
    )


def _sample_piece(volume: Volume, pts: np.ndarray, options: tuple) -> tuple:
    """Sample one partition's points (n, 3) of a wave: ``(values[, jacobian[, hessian]])``."""
    mode, space, jacobian_space, want_jacobian, device, hessian_space = options
    on_gpu = device == "cuda" and len(pts)  # the partition's arrays stay cached in this worker's GPU
    if on_gpu:
        import cupy

        pts = cupy.asarray(pts)
    if hessian_space is not None:
        from vdbflow.ops.hessian import sample_hessian_arrays

        arrays = sample_hessian_arrays(
            volume,
            pts,
            mode,
            space=space,
            jacobian_space=jacobian_space,
            hessian_space=hessian_space,
            device="cuda" if on_gpu else "cpu",
        )
    else:
        arrays = sample_grad_arrays(
            volume,
            pts,
            mode,
            space=space,
            jacobian_space=jacobian_space,
            jacobian=want_jacobian,
            device="cuda" if on_gpu else "cpu",
        )
        arrays = arrays if want_jacobian else arrays[:1]
    return tuple(a.get() if on_gpu else a for a in arrays)


def _assemble_wave(sizes: tuple, outputs: tuple, background: Any, routed: tuple, *sampled: tuple) -> tuple:
    """A wave's results in input order from its partitions' shares.  ``routed`` is the wave's
    :func:`_route_wave` (the indices are read on the worker that routed: the scheduler runs the
    assembly there, where most of its input already is, and only the sampled arrays travel).
    ``outputs`` gives each array's (trailing shape, dtype): values first, then derivatives;
    background-only points get the background and zero derivatives.  Returns one tuple of arrays
    per chunk of the wave, in order, flattened: ``(values_0, jacobian_0, ..., values_1, jacobian_1,
    ...)`` (views of one block each)."""
    n = int(sum(sizes))
    blocks = [np.empty((n,) + tuple(shape), dtype) for shape, dtype in outputs]
    quiet = routed[-1]
    blocks[0][quiet] = background
    for block in blocks[1:]:
        block[quiet] = 0
    for index, arrays in zip(routed[: len(sampled)], sampled, strict=True):
        for block, arr in zip(blocks, arrays, strict=True):
            _core.scatter_rows(block, index, np.ascontiguousarray(arr, block.dtype))
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


@dataclass
class DistributedVolume:
    """A volume partitioned across a Dask cluster.  Sample it like a :class:`Volume`; results are
    lazy Dask-backed Datasets that compute on the current client (``compute(scheduler=dvol.client)``
    names this volume's client when several are open)."""

    client: Any
    plan: PartitionPlan
    partitions: list  # futures of partition volumes
    template: Volume  # an empty volume with the value type, names, transform and background
    leaf_bytes: int
    near: np.ndarray | None  # table of the blocks near data (partition.near_blocks): the background shortcut
    template_leaf_count: int = 0  # leaves of the whole volume
    leaf_value_counts: np.ndarray | None = None  # index layout: values per leaf of the whole volume
    halo: int = 1  # stencil radius (voxels) the halos were cut for
    owns_cluster: bool = False
    # the own-leaf and halo futures the partitions were built from: kept so that the scheduler can
    # rebuild a partition lost with its worker
    lineage: list = field(default_factory=list)
    topology: Topology | None = None  # the whole volume's topology (on the client; values stay on the workers)
    workers: int = 1  # workers when the volume was distributed (sets the default wave)
    spilled: tuple[str, ...] = ()  # files of an in-memory volume's partitions (removed on close)

    def __post_init__(self) -> None:
        # the spill files go with the volume, even if it is never closed
        self._cleanup = weakref.finalize(self, _remove_files, self.spilled) if self.spilled else None

    def __repr__(self) -> str:
        t = self.template
        state = "closed" if self.closed else f"client {self.client.scheduler.address}"
        return (
            f"<DistributedVolume {t.name!r} {t.value_type.name}, {self.template_leaf_count:,} leaves in "
            f"{self.plan.partitions} partitions (halo {self.halo}) on {self.workers} worker(s), {state}>"
        )

    @property
    def closed(self) -> bool:
        return getattr(self, "_closed", False)

    def __enter__(self) -> DistributedVolume:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _sample(
        self,
        points: Any,
        mode: str,
        space: str,
        jacobian_space: str | None,
        want_jacobian: bool,
        device: str = "cpu",
        wave: int | None = None,
        hessian_space: str | None = None,
    ):
        dask, da, _ = _import_dask()
        from dask.highlevelgraph import HighLevelGraph

        check_choice(mode, MODES, "mode")
        check_choice(space, SPACES, "space")
        jacobian_space = space if jacobian_space is None else check_choice(jacobian_space, SPACES, "jacobian_space")
        vt = self.template.value_type
        if mode != "closest" and not vt.is_float:
            raise SamplingError(f"expected mode='closest' for {vt.name} data, got mode={mode!r}")
        if STENCIL_RADIUS[mode] > self.halo:
            raise SamplingError(
                f"mode {mode!r} reaches {STENCIL_RADIUS[mode]} voxels, but this volume was distributed "
                f"with halo={self.halo}: distribute(..., halo={STENCIL_RADIUS[mode]})"
            )
        if not isinstance(points, da.Array):
            arr = np.asarray(points)
            if arr.ndim != 2 or arr.shape[1] != 3:
                from vdbflow.errors import PointsError

                raise PointsError(f"expected points of shape (N, 3), got {arr.shape}")
            points = arr
        if points.ndim != 2 or points.shape[1] != 3:
            from vdbflow.errors import PointsError

            raise PointsError(f"expected points of shape (N, 3), got {points.shape}")
        if isinstance(points, da.Array):
            points = points.rechunk({1: 3})
        C = self.template.components
        vshape = () if C == 1 else (C,)
        outputs = [(vshape, vt.dtype)]
        if want_jacobian:
            outputs.append((vshape + (3,), vt.jacobian_dtype))
        if hessian_space is not None:
            outputs.append((vshape + (3, 3), vt.jacobian_dtype))
        if device not in ("cpu", "cuda"):
            raise SamplingError(f"expected device 'cpu' or 'cuda' (one GPU per worker), got {device!r}")
        options = (mode, space, jacobian_space, want_jacobian, device, hessian_space)
        if isinstance(points, da.Array):
            chunks, sizes = list(points.to_delayed().ravel()), points.chunks[0]
        else:  # NumPy points: each wave's chunks travel inside its routing task (recomputable if a worker dies)
            step = DEFAULT_CHUNK
            chunks = [points[s : s + step] for s in range(0, len(points), step)] or [points[:0]]
            sizes = tuple(len(c) for c in chunks)
        W = wave or default_wave(len(chunks), self.plan.partitions, self.workers)
        if W < 1:
            raise SamplingError(f"expected wave >= 1 (chunks per wave), got {wave}")
        delayed = dask.delayed
        P = self.plan.partitions
        token = dask.base.tokenize(
            self.partitions[0].key if self.partitions else None,
            options,
            points.name if isinstance(points, da.Array) else uuid.uuid4().hex,
            W,
        )
        names = [f"vdbflow-{kind}-{token}" for kind in ("values", "jacobian", "hessian")[: len(outputs)]]
        layers: list[dict] = [{} for _ in outputs]
        done_waves = []
        for w, first in enumerate(range(0, len(chunks), W)):
            members = chunks[first : first + W]
            route = delayed(_route_wave, pure=False, nout=2 * P + 1)(
                self.plan.router,
                self.template.transform,
                space,
                self.near,
                device,
                *members,
                dask_key_name=f"vdbflow-route-{token}-{w}",
            )
            sampled = []
            for p, part in enumerate(self.partitions):
                # runs where the partition lives (placement.py): a piece moves, never a partition
                sampled.append(
                    delayed(_sample_piece, pure=False)(
                        part, route[P + p], options, dask_key_name=f"vdbflow-sample-{token}-{w}-{p}"
                    )
                )
            done = delayed(_assemble_wave, pure=False)(
                sizes[first : first + W],
                tuple(outputs),
                self.template.background,
                route,
                *sampled,
                dask_key_name=f"vdbflow-reorder-{token}-{w}",
            )
            done_waves.append(done)
            for i in range(len(members)):
                for k, (shape, _) in enumerate(outputs):
                    layers[k][(names[k], first + i) + (0,) * len(shape)] = (
                        operator.getitem,
                        done.key,
                        len(outputs) * i + k,
                    )
        arrays = []
        for name, layer, (shape, dtype) in zip(names, layers, outputs, strict=True):
            graph = HighLevelGraph.from_collections(name, layer, dependencies=done_waves)
            arrays.append(da.Array(graph, name, chunks=(tuple(sizes),) + tuple((d,) for d in shape), dtype=dtype))
        return points, arrays, jacobian_space

    def sample(
        self, points: Any, mode: str = "linear", space: str = "world", *, device: str = "cpu", wave: int | None = None
    ):
        """Values at ``points`` (N, 3), NumPy or Dask (chunked along N); a Dask-backed Dataset.
        ``device="cuda"`` samples on each worker's GPU (e.g. a ``dask_cuda.LocalCUDACluster``);
        ``wave`` is the number of point chunks routed together (default: see the module docstring)."""
        pts, (values,), _ = self._sample(points, mode, space, None, False, device, wave)
        return build_dataset(self.template, pts, values, None, mode, space, None)

    def sample_grad(
        self,
        points: Any,
        mode: str = "linear",
        space: str = "world",
        jacobian_space: str | None = None,
        *,
        device: str = "cpu",
        wave: int | None = None,
    ):
        """Values and Jacobians at ``points``; the same Dataset layout as :meth:`Volume.sample_grad`,
        Dask-backed and chunked like the points (1,048,576 points per chunk for NumPy points)."""
        pts, (values, jac), jspace = self._sample(points, mode, space, jacobian_space, True, device, wave)
        return build_dataset(self.template, pts, values, jac, mode, space, jspace)

    def sample_hessian(
        self,
        points: Any,
        mode: str = "lag4",
        space: str = "world",
        jacobian_space: str | None = None,
        hessian_space: str | None = None,
        *,
        device: str = "cpu",
        wave: int | None = None,
    ):
        """Values, Jacobians and Hessians at ``points``; the Dataset of :meth:`Volume.sample_hessian`,
        Dask-backed, equal to it bit for bit."""
        from vdbflow.ops.hessian import add_hessian, check_request

        jspace, hspace = check_request(self.template.value_type, mode, space, jacobian_space, hessian_space)
        pts, (values, jac, hess), jspace = self._sample(points, mode, space, jspace, True, device, wave, hspace)
        ds = build_dataset(self.template, pts, values, jac, mode, space, jspace)
        return add_hessian(ds, self.template, hess, hspace)

    def sample_grad_vjp(
        self,
        points: Any,
        adj_value: Any,
        adj_jacobian: Any = None,
        mode: str = "linear",
        space: str = "index",
        jacobian_space: str | None = None,
    ) -> DistributedVJP:
        """Reverse mode across the cluster, streamed wave by wave like the forward mode: each partition
        differentiates its points against its own and halo leaves and folds the data adjoints over
        the waves in order; the halo copies' adjoints travel back to the owning partitions and are
        added there in partition order.  Equal to :func:`vdbflow.sample_grad_vjp` up to the order of
        the float additions (the data adjoint is a sum over points); the graph runs when called."""
        dask, da, _ = _import_dask()
        owned, tiles, background, waves = vjp_graph(self, points, adj_value, adj_jacobian, mode, space, jacobian_space)
        # one submission of the whole graph: every task runs once, and the point adjoints stay on the
        # workers (as futures) until they are gathered
        P = self.plan.partitions
        futures = self.client.compute([*owned, tiles, background, *(wave for _, wave in waves)])
        owned_f, (tiles_f, bg_f), wave_f = futures[:P], futures[P : P + 2], futures[P + 2 :]
        R = self.template.value_type.jacobian_dtype
        parts = [
            da.from_delayed(dask.delayed(operator.getitem, pure=True)(f, i), shape=(n, 3), dtype=R)
            for (sizes, _), f in zip(waves, wave_f, strict=True)
            for i, n in enumerate(sizes)
        ]
        return DistributedVJP(self, owned_f, tiles_f, bg_f, da.concatenate(parts, axis=0))

    def stats(self) -> list[dict[str, Any]]:
        """Per partition: owned leaves, halo leaves, halo bytes and the worker holding it."""
        where = self.client.who_has(self.partitions)
        return [
            {
                "partition": p,
                "owned_leaves": len(self.plan.owned[p]),
                "halo_leaves": len(self.plan.halo[p]),
                "halo_bytes": len(self.plan.halo[p]) * self.leaf_bytes,
                "worker": (where.get(f.key) or ["?"])[0],
            }
            for p, f in enumerate(self.partitions)
        ]

    def close(self) -> None:
        """Release the partitions (and the embedded cluster, if this volume started it).  Idempotent."""
        if self.closed:
            return
        self._closed = True
        for f in (*self.partitions, *self.lineage):
            f.release()
        if self._cleanup is not None:
            self._cleanup()
        if self.owns_cluster:
            close_client(self.client)


def resolve_client(client: Any = None) -> tuple[Any, bool]:
    """``client``; else the current client (``distributed.get_client``); else the client of a new
    embedded ``LocalCluster`` of processes sized to the machine.  Returns it and whether it is new
    (then its owner closes it, and its cluster, with :func:`close_client`)."""
    if client is not None:
        return client, False
    _, _, distributed = _import_dask()
    try:
        return distributed.get_client(), False
    except ValueError:  # no client in this process
        cluster = distributed.LocalCluster(
            n_workers=os.cpu_count() or 1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        )
        return distributed.Client(cluster), True


def close_client(client: Any) -> None:
    """Close a client that :func:`resolve_client` started, and its cluster."""
    cluster = client.cluster
    client.close()
    if cluster is not None:
        cluster.close()


def distribute(
    source: Volume | str | os.PathLike,
    client: Any = None,
    partitions: int | None = None,
    halo: int = 1,
    *,
    grid: int | str | None = None,
    spill: str | os.PathLike | bool | None = None,
    plan: PartitionPlan | None = None,
    cache: int = 4,
    identity: FileIdentity | None = None,
) -> Any:
    """Partition a volume across a Dask cluster, for sampling in parallel.

    Each partition holds its own leaves plus a halo of neighbouring leaves, so that a stencil near
    a partition's edge reads the same voxels as on the whole volume.  Partitions survive the loss
    of a worker: the scheduler rebuilds them elsewhere.  A file's leaves are read again; an
    in-memory Volume's pieces are spilled to files in ``spill``, removed on ``close()``, or carried
    inside the tasks (below).

    Parameters
    ----------
    source : Volume, str or os.PathLike
        A Volume, or an .nvdb path whose leaves each worker reads itself (a value grid).
    client : distributed.Client, optional
        The cluster to use; by default the current client (``distributed.get_client``) when there
        is one, else an embedded ``LocalCluster`` of processes sized to the machine, closed with
        the volume (``close()``, or use the volume as a context manager).
    partitions : int, optional
        The number of partitions; default the number of workers.
    halo : int, default 1
        The stencil radius in voxels (1 for ``linear``; see ``vdbflow.ops.sampling.STENCIL_RADIUS``
        for the other modes).
    grid : int or str, optional
        The grid of an .nvdb ``source`` (index or name; default the first).
    spill : str, os.PathLike or bool, optional
        For an in-memory Volume: a directory every worker reads, for the partitions' pieces.
        Default: the temporary directory, used when every worker sees it.  With ``spill=False``, or
        when no worker sees the default, the pieces are carried inside the tasks, where the
        scheduler keeps them (simple, but the whole volume passes through the scheduler).
    plan : PartitionPlan, optional
        Partitions made already (``dvol.plan`` of a volume with the same topology and ``halo``):
        volumes that share a plan route every point to the same partition, placed on the same
        worker.  A :class:`~vdbflow.VolumeSeries` shares one plan among the steps that share a
        topology.
    cache : int, default 4
        For a VolumeSeries ``source``: the steps kept distributed at once (``pchip`` reads 4).
    identity : FileIdentity, optional
        For an .nvdb ``source``: what the file must be (a series step's identity, say); default what
        it is now.  Workers check it whenever they read their leaves, also when a partition is rebuilt
        after its worker died, so a file replaced meanwhile is refused rather than mixed in.

    Returns
    -------
    DistributedVolume or DistributedSeries
        The partitioned volume: its ``sample``, ``sample_grad`` and ``sample_hessian`` take (N, 3)
        points and return Dask-backed Datasets in the layout of a :class:`~vdbflow.Volume`'s.  For a
        VolumeSeries ``source``, its :meth:`~vdbflow.VolumeSeries.distribute`: a series whose steps
        are distributed as they are needed.

    Raises
    ------
    VolumeError
        An .nvdb ``source`` whose grid is an index grid, fewer than one partition, a negative
        halo, a ``spill`` directory given explicitly that cannot be written or that a worker
        cannot read, or a ``plan`` made for another topology, partition count or halo.
    NanoVDBError
        An .nvdb ``source`` that cannot be read, or lacks ``grid``.
    ImportError
        Dask or distributed is not installed.
    """
    if not isinstance(source, (Volume, str, os.PathLike)) and hasattr(source, "distribute"):
        return source.distribute(client, partitions, halo, spill=spill, cache=cache)  # a VolumeSeries
    _, _, distributed = _import_dask()
    from vdbflow.distribution.placement import PARTITION_PREFIX, register

    client, owns = resolve_client(client)
    register(client)
    if isinstance(source, Volume):
        whole, loader_source = source, None
    else:
        from vdbflow.io.nanovdb import open_grid

        if identity is None:
            identity = DistributedFile.of(source)
        # values stay in the mapped file: only the topology is read
        whole = identity.opened(lambda: open_grid(source, grid), "when it was distributed")
        if not isinstance(whole, Volume):
            raise VolumeError("expected a value grid to distribute; attach values to index grids with with_data")
        loader_source = (os.fspath(source), grid, identity)
    if plan is None:
        P = partitions or max(1, len(client.scheduler_info()["workers"]))
        plan = plan_partitions(whole.topology, P, halo)
    else:
        P = plan.partitions
        leaves = sum(len(o) for o in plan.owned)
        if (
            leaves != whole.leaf_count
            or (partitions is not None and partitions != P)
            or plan.stencil != leaf_stencil(halo)
        ):
            raise VolumeError(
                f"expected a plan of this volume's {whole.leaf_count:,} leaves"
                + (f" in {partitions} partitions" if partitions is not None else "")
                + f" for halo {halo} (leaf stencil {leaf_stencil(halo)}), got one of {leaves:,} leaves in {P} "
                f"partitions with leaf stencil {plan.stencil}"
            )
    # 1. each partition's own leaves: sent from the client, or read by a worker from the file
    # spread the partitions over the workers round-robin (loosely: they are rebuilt elsewhere on loss)
    addresses = sorted(client.scheduler_info(n_workers=-1)["workers"])

    def place(p: int) -> dict[str, Any]:
        return {"workers": [addresses[p % len(addresses)]], "allow_other_workers": True} if addresses else {}

    spilled: list[str] | None = None
    if loader_source is None:
        pieces = [whole.select_leaves(plan.owned[p]) for p in range(P)]
        spilled = _spill(pieces, client, spill)
        if spilled is not None:
            owned = [client.submit(_load_spilled, spilled[p], pure=False, **place(p)) for p in range(P)]
        else:
            owned = [client.submit(_hold, pieces[p], pure=False, **place(p)) for p in range(P)]
        del pieces
    else:
        owned = [client.submit(_read_leaves, *loader_source, plan.owned[p], pure=False, **place(p)) for p in range(P)]
    # 2. halo exchange: each owner extracts the leaves a neighbour needs; they travel worker to worker
    owner = np.empty(whole.leaf_count, np.int64)
    local = np.empty(whole.leaf_count, np.int64)
    for p, leaves in enumerate(plan.owned):
        owner[leaves] = p
        local[leaves] = np.arange(len(leaves))
    parts, lineage = [], list(owned)
    token = uuid.uuid4().hex
    for p in range(P):
        pieces = []
        for q in np.unique(owner[plan.halo[p]]):
            from_q = plan.halo[p][owner[plan.halo[p]] == q]
            pieces.append(client.submit(_extract, owned[int(q)], local[from_q], pure=False, **place(int(q))))
        # stays with its own leaves; tasks that read it run there (placement.py)
        parts.append(client.submit(_merge, owned[p], *pieces, key=f"{PARTITION_PREFIX}{token}-{p}", **place(p)))
        lineage.extend(pieces)
    distributed.wait(parts)
    for f in parts:
        if f.status == "error":
            f.result()  # raises the partition's own error (e.g. an unreadable file) here, not at sampling
    template = whole.select_leaves(np.zeros(0, np.int64))
    leaf_bytes = 512 * whole.components * whole.dtype.itemsize + 64
    # blocks near data, for the background shortcut (cut for the halo's stencil: any allowed mode fits)
    near = near_blocks(whole.topology, plan.stencil, plan.router)
    counts = np.bitwise_count(whole.topology.masks).sum(axis=1).astype(np.int64)
    workers = max(1, len(client.scheduler_info(n_workers=-1)["workers"]))
    return DistributedVolume(
        client,
        plan,
        parts,
        template,
        leaf_bytes,
        near,
        whole.leaf_count,
        counts,
        halo,
        owns,
        lineage,
        whole.topology,
        workers,
        tuple(spilled or ()),
    )


# -- reverse mode ---------------------------------------------------------------------------------------
def _vjp_piece(
    volume: Volume,
    index: np.ndarray,
    pts: np.ndarray,
    options: tuple,
    own_local: np.ndarray,
    send: dict,
    n_chunks: int,
    *inputs: Any,
) -> tuple:
    """Reverse mode of one partition's piece of a wave (its indices in the wave and its points).
    ``inputs``: the wave's value adjoints per chunk, then its Jacobian adjoints per chunk (or Nones).
    Returns two outputs, so that assembling the point adjoints never moves the data adjoints: the
    point adjoints (n, 3), and ``(None, own rows, halo rows per owner, tile adjoints, background
    adjoints)`` for :func:`_fold` (the data adjoints of the partition's leaves: as large as its data)."""
    from vdbflow.ops.vjp import sample_grad_vjp

    mode, space, jacobian_space = options
    adj_values, adj_jacobians = inputs[:n_chunks], inputs[n_chunks:]
    a_val = np.concatenate([np.asarray(a) for a in adj_values])[index]
    a_jac = None if adj_jacobians[0] is None else np.concatenate([np.asarray(a) for a in adj_jacobians])[index]
    r = sample_grad_vjp(volume, pts, a_val, a_jac, mode, space, jacobian_space)
    data = np.asarray(r.voxel_data).reshape(len(r.voxel_data), -1)
    rows_of = volume.topology.leaf_rows
    own = data[rows_of(own_local, volume.index_layout)]
    outgoing = {q: data[rows_of(local, volume.index_layout)] for q, local in send.items()}
    C = data.shape[1]
    return r.points, (
        None,
        own,
        outgoing,
        np.asarray(r.tile_values).reshape(-1, C),
        np.asarray(r.background).reshape(C),
    )


def _fold(total: tuple | None, wave: tuple) -> tuple:
    """A partition's data adjoints summed over its waves, in wave order (deterministic): the running
    ``total`` plus one wave's data adjoints (the second output of :func:`_vjp_piece`)."""
    if total is None:
        return (None, *wave[1:])
    own, outgoing, tiles, background = total[1:]
    return (
        None,
        own + wave[1],
        {q: rows + wave[2][q] for q, rows in outgoing.items()},
        tiles + wave[3],
        background + wave[4],
    )


def _wave_point_adjoints(sizes: tuple, dtype: Any, routed: tuple, *pieces: np.ndarray) -> tuple:
    """A wave's point adjoints in input order, one (n, 3) array per chunk (views of one block);
    ``routed`` is the wave's :func:`_route_wave` (the pieces' indices)."""
    block = np.empty((int(sum(sizes)), 3), dtype)
    for index, adj in zip(routed[: len(pieces)], pieces, strict=True):
        _core.scatter_rows(block, index, np.ascontiguousarray(adj, dtype))
    starts = np.cumsum((0,) + tuple(sizes))
    return tuple(block[starts[c] : starts[c + 1]] for c in range(len(sizes)))


def _owner_rows(q: int, mine: tuple, targets: dict, *neighbours: tuple) -> np.ndarray:
    """Adjoint rows of partition q's own leaves: its own shares, then what the halo copies held by
    its neighbours received, added in partition order (deterministic)."""
    rows = mine[1].copy()
    for p_result, dst in zip(neighbours, targets.values(), strict=True):
        rows[dst] += p_result[2][q]
    return rows


def _sum_small(which: int, *results: tuple) -> np.ndarray:
    """Tile (3) or background (4) adjoints added over partitions in partition order."""
    total = results[0][which].copy()
    for r in results[1:]:
        total += r[which]
    return total


@dataclass
class DistributedVJP:
    """Adjoints of a distributed reverse-mode call, distributed like the volume.

    ``owned[p]`` is a future of the adjoint rows of partition p's own leaves; ``points`` a Dask
    array chunked like the points; ``tile_values`` and ``background`` futures of small arrays."""

    dvol: DistributedVolume
    owned: list
    tile_values: Any
    background: Any
    points: Any

    def voxel_data(self, topology: Topology) -> np.ndarray:
        """Gather the voxel-data adjoint into the whole volume's layout (rows of ``topology``)."""
        C = self.dvol.template.components
        index_layout = self.dvol.template.index_layout
        rows_total = topology.value_count if index_layout else topology.leaf_count * 512
        out = np.zeros((rows_total, C), self.dvol.template.dtype)
        for p, fut in enumerate(self.owned):
            out[topology.leaf_rows(self.dvol.plan.owned[p], index_layout)] = fut.result()
        return out[:, 0] if C == 1 else out


def vjp_graph(
    dvol: DistributedVolume,
    points: Any,
    adj_value: Any,
    adj_jacobian: Any,
    mode: str,
    space: str,
    jacobian_space: str | None,
) -> tuple[list, Any, Any, list]:
    """The reverse mode's tasks, not submitted: per partition the adjoint rows of its own leaves, the
    tile and background adjoints, and per wave ``(chunk sizes, point adjoints)`` - a task returning
    one (n, 3) array per chunk of the wave.  The forward mode's streaming graph, wave by wave (module
    docstring); each partition's data adjoints are folded over the waves in wave order."""
    dask, da, _ = _import_dask()
    check_choice(mode, MODES, "mode")
    check_choice(space, SPACES, "space")
    jacobian_space = space if jacobian_space is None else check_choice(jacobian_space, SPACES, "jacobian_space")
    if not isinstance(points, da.Array):
        points = da.from_array(np.asarray(points), chunks=(DEFAULT_CHUNK, 3))
    points = points.rechunk({1: 3})
    rows = points.chunks[0]
    to_dask = lambda a: a if a is None or isinstance(a, da.Array) else da.from_array(np.asarray(a))  # noqa: E731
    adj_value, adj_jacobian = to_dask(adj_value), to_dask(adj_jacobian)
    adj_value = adj_value.rechunk((rows,) + adj_value.shape[1:])
    if adj_jacobian is not None:
        adj_jacobian = adj_jacobian.rechunk((rows,) + adj_jacobian.shape[1:])
    delayed = dask.delayed
    plan, P = dvol.plan, dvol.plan.partitions
    chunks = list(points.to_delayed().ravel())
    vals = list(adj_value.to_delayed().ravel())
    jacs = [None] * len(chunks) if adj_jacobian is None else list(adj_jacobian.to_delayed().ravel())
    # which local leaves each partition owns, and which halo leaves it returns to which owner
    owner = np.empty(dvol.template_leaf_count, np.int64)
    for p, leaves in enumerate(plan.owned):
        owner[leaves] = p
    counts = dvol.leaf_value_counts
    own_locals, sends, targets = [], [], [{} for _ in range(P)]
    for p in range(P):
        local_globals = np.union1d(plan.owned[p], plan.halo[p])
        own_locals.append(np.searchsorted(local_globals, plan.owned[p]))
        send = {}
        for q in np.unique(owner[plan.halo[p]]):
            leaves = plan.halo[p][owner[plan.halo[p]] == q]
            send[int(q)] = np.searchsorted(local_globals, leaves)
            # rows of those leaves inside q's own-leaf block
            owned_q = plan.owned[int(q)]
            block_counts = counts[owned_q] if dvol.template.index_layout else np.full(len(owned_q), 512)
            starts = np.cumsum(block_counts) - block_counts
            pos = np.searchsorted(owned_q, leaves)
            targets[int(q)][p] = np.concatenate([np.arange(starts[k], starts[k] + block_counts[k]) for k in pos])
        sends.append(send)
    # the streaming graph of the forward mode, wave by wave; each partition's data adjoints are folded
    # over the waves in order, so that a wave's pieces are released once folded and its point adjoints
    # assembled: memory depends on the waves in flight, not on the number of points
    W = default_wave(len(chunks), P, dvol.workers)
    token = dask.base.tokenize(
        dvol.partitions[0].key if dvol.partitions else None,
        mode,
        space,
        jacobian_space,
        points.name,
        adj_value.name,
        None if adj_jacobian is None else adj_jacobian.name,
    )
    R = dvol.template.value_type.jacobian_dtype
    options = (mode, space, jacobian_space)
    totals: list[Any] = [None] * P
    waves: list[tuple[tuple, Any]] = []  # each wave's chunk sizes and the task of its point adjoints
    for w, first in enumerate(range(0, len(chunks), W)):
        members = slice(first, first + W)
        n_members = len(chunks[members])
        route = delayed(_route_wave, pure=True, nout=2 * P + 1)(
            plan.router,
            dvol.template.transform,
            space,
            None,
            "cpu",
            *chunks[members],
            dask_key_name=f"vdbflow-route-vjp-{token}-{w}",
        )
        pieces = []
        for p in range(P):
            adjoints = delayed(_vjp_piece, pure=True, nout=2)(  # runs where partition p lives (placement.py)
                dvol.partitions[p],
                route[p],
                route[P + p],
                options,
                own_locals[p],
                sends[p],
                n_members,
                *vals[members],
                *jacs[members],
                dask_key_name=f"vdbflow-vjp-{token}-{w}-{p}",
            )
            totals[p] = delayed(_fold, pure=True)(totals[p], adjoints[1], dask_key_name=f"vdbflow-fold-{token}-{w}-{p}")
            pieces.append(adjoints[0])
        sizes = points.chunks[0][members]
        waves.append(
            (
                sizes,
                delayed(_wave_point_adjoints, pure=True)(
                    sizes, R, route, *pieces, dask_key_name=f"vdbflow-vjp-points-{token}-{w}"
                ),
            )
        )
    owned = [
        delayed(_owner_rows, pure=True)(
            q, totals[q], dict(sorted(targets[q].items())), *[totals[p] for p in sorted(targets[q])]
        )
        for q in range(P)
    ]
    tiles = delayed(_sum_small, pure=True)(3, *totals)
    background = delayed(_sum_small, pure=True)(4, *totals)
    return owned, tiles, background, waves
