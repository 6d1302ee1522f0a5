"""Reverse mode of a distributed volume (:meth:`DistributedVolume.sample_grad_vjp`): streamed through
the forward graph's waves; per wave and partition one task differentiates the piece and one folds its
data adjoints into the partition's running total, in wave order; per wave one task puts the point
adjoints back in order.  The halo copies' adjoints travel back to the owning partitions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core.volume import Topology, Volume
from vdbflow.devices import array_module, run
from vdbflow.distribution import keys
from vdbflow.distribution.forward import DEFAULT_CHUNK, default_wave, route_wave
from vdbflow.distribution.partitions import import_dask
from vdbflow.ops.request import SPACES, check_choice
from vdbflow.ops.sampling import MODES
from vdbflow.ops.vjp import sample_grad_vjp


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
    mode, space, jacobian_space, device = options
    adj_values, adj_jacobians = inputs[:n_chunks], inputs[n_chunks:]
    a_val = np.concatenate([np.asarray(a) for a in adj_values])[index]
    a_jac = None if adj_jacobians[0] is None else np.concatenate([np.asarray(a) for a in adj_jacobians])[index]
    if device == "cuda" and len(pts):  # on this worker's GPU (float64 atomics: sums in any order)
        xp = array_module("cuda")
        on_gpu = [None if a is None else xp.asarray(a) for a in (pts, a_val, a_jac)]
        r = sample_grad_vjp(volume, *on_gpu, mode, space, jacobian_space, device="cuda").get()
    else:
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
    ``routed`` is the wave's :func:`route_wave` (the pieces' indices)."""
    block = np.empty((int(sum(sizes)), 3), dtype)
    for index, adj in zip(routed[: len(pieces)], pieces, strict=True):
        run("scatter_rows", block, index, adj)
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

    dvol: Any  # the DistributedVolume
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


def _halo_returns(dvol: Any) -> tuple[list, list, list]:
    """Where the halo's adjoints go: per partition p the local rows of its own leaves, the local rows of
    the halo leaves it returns to each owner q (``sends[p][q]``), and per owner q the rows of its own-leaf
    block those returns land in (``targets[q][p]``)."""
    plan, P = dvol.plan, dvol.plan.partitions
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
    return own_locals, sends, targets


def vjp_graph(
    dvol: Any,
    points: Any,
    adj_value: Any,
    adj_jacobian: Any,
    mode: str,
    space: str,
    jacobian_space: str | None,
    device: str = "cpu",
) -> tuple[list, Any, Any, list]:
    """The reverse mode's tasks, not submitted: per partition the adjoint rows of its own leaves, the
    tile and background adjoints, and per wave ``(chunk sizes, point adjoints)`` - a task returning
    one (n, 3) array per chunk of the wave.  The forward mode's streaming graph, wave by wave (module
    docstring); each partition's data adjoints are folded over the waves in wave order."""
    dask, da, _ = import_dask()
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
    own_locals, sends, targets = _halo_returns(dvol)
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
    options = (mode, space, jacobian_space, device)
    totals: list[Any] = [None] * P
    waves: list[tuple[tuple, Any]] = []  # each wave's chunk sizes and the task of its point adjoints
    for w, first in enumerate(range(0, len(chunks), W)):
        members = slice(first, first + W)
        n_members = len(chunks[members])
        route = delayed(route_wave, pure=True, nout=2 * P + 1)(
            plan.router,
            dvol.template.transform,
            space,
            None,
            "cpu",
            *chunks[members],
            dask_key_name=f"{keys.ROUTE_VJP}-{token}-{w}",
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
                dask_key_name=f"{keys.VJP}-{token}-{w}-{p}",
            )
            totals[p] = delayed(_fold, pure=True)(totals[p], adjoints[1], dask_key_name=f"{keys.FOLD}-{token}-{w}-{p}")
            pieces.append(adjoints[0])
        sizes = points.chunks[0][members]
        waves.append(
            (
                sizes,
                delayed(_wave_point_adjoints, pure=True)(
                    sizes, R, route, *pieces, dask_key_name=f"{keys.VJP_POINTS}-{token}-{w}"
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
