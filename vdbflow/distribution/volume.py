"""Distributed sampling: a volume's leaves partitioned across Dask workers, with halos.

Each partition is a :class:`Volume` holding its own leaves plus the halo leaves its stencils reach,
living on a worker.  From a file, the worker reads both itself, in one pass over those leaves' bytes
(nothing else of the file stays resident); from an in-memory Volume, its own leaves come from the
client and its halo from the neighbouring partitions, as tasks that move leaves worker to worker.  A
plan whose partitions cannot fit the workers' memory limits is refused before anything runs
(:mod:`vdbflow.distribution.fit`).
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

import dataclasses
import operator
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdbflow.core.volume import Topology, Volume
from vdbflow.distribution.forward import default_wave, forward_arrays, routed
from vdbflow.distribution.partitions import (
    DistributedFile,
    build_partitions,
    close_client,
    import_dask,
    remove_files,
    resolve_client,
)
from vdbflow.distribution.plan import PartitionPlan
from vdbflow.distribution.reverse import DistributedVJP, vjp_graph
from vdbflow.errors import DeviceError
from vdbflow.io.grid_ref import GridRef
from vdbflow.io.identity import FileIdentity
from vdbflow.io.location import as_location
from vdbflow.ops.request import OUTPUTS, SampleRequest
from vdbflow.ops.sampling import sample_dataset, split_inside

__all__ = ["DistributedFile", "default_wave", "resolve_client", "close_client", "vjp_graph"]  # importable here too


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
        self._cleanup = weakref.finalize(self, remove_files, self.spilled) if self.spilled else None

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

    def sample_arrays(self, request: SampleRequest, points: Any, wave: int | None = None) -> dict[str, Any]:
        """Each output of ``request`` at points (N, 3), NumPy or Dask (chunked along N), as lazy Dask
        arrays chunked like the points: the array-level door (:func:`~vdbflow.distribution.forward.forward_arrays`)."""
        return forward_arrays(self, request, points, wave)[1]

    def sample(
        self,
        points: Any,
        mode: str = "linear",
        space: str = "world",
        *,
        device: str = "cpu",
        dims: Any = None,
        wave: int | None = None,
    ):
        """Values at ``points`` (N, 3) or (..., 3), NumPy or Dask (chunked along N); a Dask-backed Dataset
        shaped like the points (``dims`` names their dims, as for :meth:`Volume.sample`).
        ``device="cuda"`` samples on each worker's GPU (e.g. a ``dask_cuda.LocalCUDACluster``);
        ``wave`` is the number of point chunks routed together (default: see the module docstring)."""
        return self._dataset(SampleRequest(mode, ("value",), space, device=device), points, wave, dims=dims)

    def sample_grad(
        self,
        points: Any,
        mode: str = "linear",
        space: str = "world",
        jacobian_space: str | None = None,
        *,
        device: str = "cpu",
        dims: Any = None,
        wave: int | None = None,
        outputs: Sequence[str] = ("value", "jacobian"),
    ):
        """Values and Jacobians at ``points`` (or the ``outputs`` asked: derived quantities too, as
        :meth:`Volume.sample_grad`); the same Dataset layout, Dask-backed and chunked like the points
        (1,048,576 points per chunk for NumPy points)."""
        kernel_outputs, inside = split_inside(outputs)
        request = SampleRequest(mode, kernel_outputs, space, jacobian_space, device=device)
        return self._dataset(request, points, wave, inside, dims)

    def sample_hessian(
        self,
        points: Any,
        mode: str = "lag4",
        space: str = "world",
        jacobian_space: str | None = None,
        hessian_space: str | None = None,
        *,
        device: str = "cpu",
        dims: Any = None,
        wave: int | None = None,
    ):
        """Values, Jacobians and Hessians at ``points``; the Dataset of :meth:`Volume.sample_hessian`,
        Dask-backed, equal to it bit for bit."""
        request = SampleRequest(mode, OUTPUTS, space, jacobian_space, hessian_space, device=device)
        return self._dataset(request, points, wave, dims=dims)

    def _dataset(self, request: SampleRequest, points: Any, wave: int | None, inside: bool = False, dims: Any = None):
        """The Dataset of ``request`` at points (N, 3) or (..., 3): routed to the partitions as (N, 3)
        (:func:`vdbflow.distribution.forward.routed`) and shaped back."""
        return sample_dataset(self, request, points, dims, inside, executor=routed(self, wave))

    def sample_grad_vjp(
        self,
        points: Any,
        adj_value: Any,
        adj_jacobian: Any = None,
        mode: str = "linear",
        space: str = "index",
        jacobian_space: str | None = None,
        device: str = "cpu",
    ) -> DistributedVJP:
        """Reverse mode across the cluster, streamed wave by wave like the forward mode: each partition
        differentiates its points against its own and halo leaves and folds the data adjoints over
        the waves in order; the halo copies' adjoints travel back to the owning partitions and are
        added there in partition order.  Equal to :func:`vdbflow.sample_grad_vjp` up to the order of
        the float additions (the data adjoint is a sum over points); the graph runs when called.
        ``device="cuda"``: each piece is differentiated on its worker's GPU."""
        dask, da, _ = import_dask()
        if device not in ("cpu", "cuda"):
            raise DeviceError(f"expected device 'cpu' or 'cuda', got {device!r}")
        args = (points, adj_value, adj_jacobian, mode, space, jacobian_space, device)
        owned, tiles, background, waves = vjp_graph(self, *args)
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


def distribute(
    source: Volume | str | os.PathLike | GridRef,
    client: Any = None,
    partitions: int | None = None,
    halo: int = 1,
    *,
    grid: int | str | None = None,
    spill: str | os.PathLike | bool | None = None,
    plan: PartitionPlan | None = None,
    cache: int = 4,
    identity: FileIdentity | None = None,
    periodic: Any = None,
    storage_options: dict[str, Any] | None = None,
    balance: Any = None,
) -> Any:
    """Partition a volume across a Dask cluster, for sampling in parallel.

    Each partition holds its own leaves plus a halo of neighbouring leaves, so that a stencil near
    a partition's edge reads the same voxels as on the whole volume.  Partitions survive the loss
    of a worker: the scheduler rebuilds them elsewhere.  A file's leaves are read again; an
    in-memory Volume's pieces are spilled to files in ``spill``, removed on ``close()``, or carried
    inside the tasks (below).

    Parameters
    ----------
    source : Volume, str, os.PathLike or GridRef
        A Volume, or an .nvdb path whose leaves each worker reads itself (a value grid), or a
        :class:`~vdbflow.io.grid_ref.GridRef` of one (its grid, periods and identity: the arguments below unused).
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
    periodic : bool, str or sequence, optional
        Periodic axes, over those the source records (:meth:`vdbflow.Volume.with_periodic`; False: none).
        The halos of a periodic volume wrap across its faces and points route to their wrapped cell.
    storage_options : dict, optional
        For a URL ``source`` (``s3://...``): fsspec's options, carried to the workers that read their
        leaves by byte ranges (docs/storage.md).  Refused for a local path.
    balance : array_like, optional
        Points (N, 3, world space) like those to be sampled, e.g. a sample of them: the partitions are
        then balanced by leaves and by where these points fall (half each), so that a dense cloud of
        points does not make one worker do most of the sampling.  Default: by leaves.  Either way, when
        the workers' memory limits differ, each partition's part follows its worker's limit.

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
        cannot read, a ``plan`` made for another topology, partition count or halo, or ``balance``
        points that are not (N, 3).
    DistributionError
        Partitions that cannot fit the workers' memory limits (refused before anything runs, with the
        bytes needed and available), or partition tasks that no worker can run any more.
    NanoVDBError
        An .nvdb ``source`` that cannot be read, or lacks ``grid``.
    ImportError
        Dask or distributed is not installed.
    """
    if not isinstance(source, (Volume, str, os.PathLike)) and hasattr(source, "distribute"):
        return source.distribute(client, partitions, halo, spill=spill, cache=cache)  # a VolumeSeries
    if isinstance(source, Volume) and periodic is not None:
        source = source.with_periodic(periodic)
    if isinstance(source, (str, os.PathLike)):  # a Url carries its storage_options to the workers
        source = GridRef(os.fspath(as_location(source, storage_options)), grid, periodic, identity)
    if isinstance(source, GridRef) and source.identity is None:  # what the file is now, checked by the workers
        now = DistributedFile.of(source.path, storage_options=source.storage_options)
        source = dataclasses.replace(source, identity=now)
    client, owns = resolve_client(client)
    try:
        return DistributedVolume(**build_partitions(source, client, owns, partitions, halo, spill, plan, balance))
    except BaseException:
        if owns:
            close_client(client)
        raise
