"""Distributed sampling: a volume's leaves partitioned across Dask workers, with halos.

Each partition is a :class:`Volume` holding its own leaves plus the halo leaves its stencils reach,
living on a worker: its own leaves come from the client (a Volume) or from the worker's own read of an
.nvdb file, and its halo from the neighbouring partitions, as tasks that move leaves worker to worker.
Points are routed to the partition that owns their base cell (empty leaf slots
included), sampled there with the same kernels, and returned in input order - equal bit for bit to
:meth:`Volume.sample_grad` on the whole volume.

Graph per call: one routing task per point chunk, one sampling task per partition, one assembling
task per chunk - chunks + partitions + chunks tasks, not their product.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import tree
from .errors import SamplingError, VolumeError
from .partition import PartitionPlan, Router, plan_partitions
from .sampling import MODES, SPACES, _check_choice, _dataset, sample_grad_arrays
from .volume import Topology, Volume

DEFAULT_CHUNK = 1 << 20  # points per chunk when the points are a NumPy array


def _import_dask() -> tuple[Any, Any, Any]:
    try:
        import dask
        import dask.array as da
        import distributed
    except ImportError as err:  # pragma: no cover - dask is a dependency of this module
        raise ImportError("vdbflow.distribute needs dask and distributed: pip install 'dask[array]' distributed") \
            from err
    return dask, da, distributed


# -- tasks (small pure functions) -------------------------------------------------------------------
def _read_leaves(path: str, grid: Any, leaves: np.ndarray) -> Volume:
    """The given leaves of an .nvdb grid, read by the worker itself (memory-mapped, then copied)."""
    from .nanovdb import open_grid

    return open_grid(path, grid, leaves=leaves).contiguous()


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
    order = tree.tree_order(origins >> 3)
    C = owned.components
    if owned.index_layout:
        counts = np.bitwise_count(masks).sum(axis=1).astype(np.int64)
        data = np.concatenate([v._data for v in parts])
        starts = np.cumsum(counts) - counts
        rows = np.repeat(starts[order] - (np.cumsum(counts[order]) - counts[order]), counts[order]) + \
            np.arange(int(counts.sum()))
        data = data[rows]
    else:
        data = np.concatenate([v.leaf_values for v in parts])[order].reshape(-1, C)
    t = owned.topology
    topo = Topology(origins[order], masks[order], t.transform, t.tile_origins, t.tile_sizes)
    return Volume(topo, data, owned._background, owned._tile_values, owned.value_type, owned.index_layout,
                  owned.name, owned.component_names)


def _route(points: np.ndarray, router: Router, transform: Any, space: str, tables: tuple,
           stencil: tuple[int, int]) -> list[tuple]:
    """Split a chunk of points by partition: [(indices, points)] per partition, then the indices of
    points that read only background (answered without any partition)."""
    points = np.asarray(points)
    owner = router.route(points, transform, space, tables, stencil)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(-1, router.partitions + 1))
    split = [(order[bounds[p + 1]:bounds[p + 2]], points[order[bounds[p + 1]:bounds[p + 2]]])
             for p in range(router.partitions)]
    return [*split, order[bounds[0]:bounds[1]]]


def _sample_partition(volume: Volume, p: int, options: tuple, *routed_chunks: list) -> list[tuple]:
    """Sample this partition's share of every chunk: [(indices, values, jacobian)] per chunk."""
    mode, space, jacobian_space, want_jacobian, device = options
    out = []
    for routed in routed_chunks:
        index, pts = routed[p]
        if device == "cuda" and len(pts):  # the partition's arrays stay cached in this worker's GPU
            import cupy

            values, jac = sample_grad_arrays(volume, cupy.asarray(pts), mode, space=space,
                                             jacobian_space=jacobian_space, jacobian=want_jacobian, device="cuda")
            values, jac = values.get(), (None if jac is None else jac.get())
        else:
            values, jac = sample_grad_arrays(volume, pts, mode, space=space, jacobian_space=jacobian_space,
                                             jacobian=want_jacobian)
        out.append((index, values, jac))
    return out


def _assemble(c: int, n: int, vshape: tuple, jshape: tuple | None, dtype: Any, jdtype: Any, background: Any,
              routed: list, *sampled: list) -> tuple[np.ndarray, np.ndarray | None]:
    """A chunk's results back in input order from every partition's share; background-only points
    get the background and a zero Jacobian."""
    values = np.empty((n,) + vshape, dtype)
    jac = None if jshape is None else np.empty((n,) + jshape, jdtype)
    quiet = routed[-1]
    values[quiet] = background
    if jac is not None:
        jac[quiet] = 0
    for per_chunk in sampled:
        index, v, j = per_chunk[c]
        values[index] = v
        if jac is not None:
            jac[index] = j
    return values, jac


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
    tables: Any  # the whole volume's hash tables (a future), for answering background-only points
    owns_cluster: bool = False

    def _sample(self, points: Any, mode: str, space: str, jacobian_space: str | None, want_jacobian: bool,
                device: str = "cpu"):
        dask, da, _ = _import_dask()
        _check_choice(mode, MODES, "mode")
        _check_choice(space, SPACES, "space")
        jacobian_space = space if jacobian_space is None else _check_choice(jacobian_space, SPACES, "jacobian_space")
        vt = self.template.value_type
        if mode == "linear" and not vt.is_float:
            raise SamplingError(f"expected mode='closest' for {vt.name} data, got mode='linear'")
        if not isinstance(points, da.Array):
            arr = np.asarray(points)
            if arr.ndim != 2 or arr.shape[1] != 3:
                from .errors import PointsError

                raise PointsError(f"expected points of shape (N, 3), got {arr.shape}")
            points = da.from_array(arr, chunks=(DEFAULT_CHUNK, 3))
        if points.ndim != 2 or points.shape[1] != 3:
            from .errors import PointsError

            raise PointsError(f"expected points of shape (N, 3), got {points.shape}")
        points = points.rechunk({1: 3})
        C = self.template.components
        vshape = () if C == 1 else (C,)
        jshape = ((3,) if C == 1 else (C, 3)) if want_jacobian else None
        if device not in ("cpu", "cuda"):
            raise SamplingError(f"expected device 'cpu' or 'cuda' (one GPU per worker), got {device!r}")
        options = (mode, space, jacobian_space, want_jacobian, device)
        chunks = points.to_delayed().ravel()
        delayed = dask.delayed
        routed = [delayed(_route, pure=True)(chunk, self.plan.router, self.template.transform, space, self.tables,
                                             self.plan.stencil) for chunk in chunks]
        sampled = [delayed(_sample_partition, pure=True)(part, p, options, *routed)
                   for p, part in enumerate(self.partitions)]
        sizes = points.chunks[0]
        vparts, jparts = [], []
        for c, n in enumerate(sizes):
            done = delayed(_assemble, pure=True, nout=2)(c, n, vshape, jshape, vt.dtype, vt.jacobian_dtype,
                                                         self.template.background, routed[c], *sampled)
            vparts.append(da.from_delayed(done[0], shape=(n,) + vshape, dtype=vt.dtype))
            if want_jacobian:
                jparts.append(da.from_delayed(done[1], shape=(n,) + jshape, dtype=vt.jacobian_dtype))
        values = da.concatenate(vparts, axis=0)
        jac = da.concatenate(jparts, axis=0) if want_jacobian else None
        return points, values, jac, jacobian_space

    def sample(self, points: Any, mode: str = "linear", space: str = "world", *, device: str = "cpu"):
        """Values at ``points`` (N, 3), NumPy or Dask (chunked along N); a Dask-backed Dataset.
        ``device="cuda"`` samples on each worker's GPU (e.g. a ``dask_cuda.LocalCUDACluster``)."""
        pts, values, _, _ = self._sample(points, mode, space, None, False, device)
        return _dataset(self.template, pts, values, None, mode, space, None)

    def sample_grad(self, points: Any, mode: str = "linear", space: str = "world", jacobian_space: str | None = None,
                    *, device: str = "cpu"):
        """Values and Jacobians at ``points``; the same Dataset layout as :meth:`Volume.sample_grad`,
        Dask-backed and chunked like the points."""
        pts, values, jac, jspace = self._sample(points, mode, space, jacobian_space, True, device)
        return _dataset(self.template, pts, values, jac, mode, space, jspace)

    def stats(self) -> list[dict[str, Any]]:
        """Per partition: owned leaves, halo leaves, halo bytes and the worker holding it."""
        where = self.client.who_has(self.partitions)
        return [{"partition": p, "owned_leaves": len(self.plan.owned[p]), "halo_leaves": len(self.plan.halo[p]),
                 "halo_bytes": len(self.plan.halo[p]) * self.leaf_bytes,
                 "worker": (where.get(f.key) or ["?"])[0]} for p, f in enumerate(self.partitions)]

    def close(self) -> None:
        """Release the partitions (and the embedded cluster, if this volume started it)."""
        for f in self.partitions:
            f.release()
        if self.owns_cluster:
            cluster = self.client.cluster
            self.client.close()
            if cluster is not None:
                cluster.close()


def distribute(source: Volume | str | os.PathLike, client: Any = None, partitions: int | None = None,
               halo: int = 1, *, grid: int | str | None = None) -> DistributedVolume:
    """Partition ``source`` (a Volume, or an .nvdb path whose leaves each worker reads itself)
    across a Dask cluster.

    ``client`` is a ``distributed.Client`` (default: an embedded ``LocalCluster`` of processes sized
    to the machine); ``partitions`` defaults to the number of workers; ``halo`` is the stencil
    radius in voxels (1 for ``linear``).
    """
    _, _, distributed = _import_dask()
    owns = client is None
    if owns:
        cluster = distributed.LocalCluster(n_workers=os.cpu_count() or 1, threads_per_worker=1, processes=True,
                                           dashboard_address=":0")
        client = distributed.Client(cluster)
    if isinstance(source, Volume):
        whole, loader_source = source, None
    else:
        from .nanovdb import open_grid

        whole = open_grid(source, grid)  # values stay in the mapped file: only the topology is read
        if not isinstance(whole, Volume):
            raise VolumeError("expected a value grid to distribute; attach values to index grids with with_data")
        loader_source = (os.fspath(source), grid)
    P = partitions or max(1, len(client.scheduler_info()["workers"]))
    plan = plan_partitions(whole.topology, P, halo)
    # 1. each partition's own leaves: sent from the client, or read by a worker from the file
    if loader_source is None:
        owned = client.scatter([whole.select_leaves(plan.owned[p]) for p in range(P)])
        n_workers = len(client.scheduler_info()["workers"])
        if n_workers > 1:
            client.replicate(owned, n=2)  # a lost worker loses no partition
    else:
        owned = [client.submit(_read_leaves, *loader_source, plan.owned[p], pure=False) for p in range(P)]
    # 2. halo exchange: each owner extracts the leaves a neighbour needs; they travel worker to worker
    owner = np.empty(whole.leaf_count, np.int64)
    local = np.empty(whole.leaf_count, np.int64)
    for p, leaves in enumerate(plan.owned):
        owner[leaves] = p
        local[leaves] = np.arange(len(leaves))
    parts = []
    for p in range(P):
        pieces = []
        for q in np.unique(owner[plan.halo[p]]):
            from_q = plan.halo[p][owner[plan.halo[p]] == q]
            pieces.append(client.submit(_extract, owned[int(q)], local[from_q], pure=False))
        parts.append(client.submit(_merge, owned[p], *pieces, pure=False))
    distributed.wait(parts)
    template = whole.select_leaves(np.zeros(0, np.int64))
    leaf_bytes = 512 * whole.components * whole.dtype.itemsize + 64
    tables = client.scatter(whole.topology.tables, broadcast=True)
    return DistributedVolume(client, plan, parts, template, leaf_bytes, tables, owns)
