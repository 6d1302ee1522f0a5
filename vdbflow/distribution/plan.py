"""Cutting a volume's leaves into partitions along a Morton curve, with halos and point routing.

Pure functions of arrays, shared by the client (planning, routing) and the workers.
Shapes: leaf keys (L, 3) int = origin >> LEAF_SHIFT (3); points (N, 3); partitions P.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core import kernel
from vdbflow.core.kernel import LEAF_SHIFT
from vdbflow.core.transform import Transform
from vdbflow.core.volume import Topology
from vdbflow.devices import run
from vdbflow.errors import VolumeError

MORTON_BITS = kernel.MORTON_BITS  # per axis (kernels/vdbflow/route.h)
BLOCK_SHIFT = kernel.ROUTE_BLOCK_SHIFT  # background-shortcut blocks: leaf keys >> BLOCK_SHIFT
MIXED_BLOCK = kernel.ROUTE_MIXED_BLOCK  # a near block whose leaf slots belong to several partitions


def morton(keys: np.ndarray, origin: np.ndarray, shift: int) -> np.ndarray:
    """Morton codes (uint64) of leaf keys (n, 3), taken relative to ``origin`` and coarsened by
    ``shift`` bits so that the key range fits 21 bits per axis (keys outside clamp to the ends).
    Computed by the kernels' own ``morton_code``, the function routing uses."""
    return kernel.morton_codes(keys, origin, shift)


@dataclass(frozen=True)
class Router:
    """Where points go: the Morton frame and the first code of partitions 1 .. P-1 (small enough to
    ship with every routing task)."""

    origin: np.ndarray
    shift: int
    boundaries: np.ndarray  # (P - 1,) uint64
    period: np.ndarray | None = None  # (6,) int64 periods (core.periodic): points go where their wrapped base cell is

    @property
    def partitions(self) -> int:
        return len(self.boundaries) + 1

    def partition_of_keys(self, keys: np.ndarray) -> np.ndarray:
        """Partition (int64) that answers points whose base cell is in leaf ``keys`` (n, 3)."""
        return np.searchsorted(self.boundaries, morton(keys, self.origin, self.shift), side="right").astype(np.int64)

    def route(
        self, points: Any, transform: Transform, space: str, near: np.ndarray | None = None, device: str = "cpu"
    ) -> tuple[Any, Any, Any]:
        """Points grouped by partition, in one pass of the kernels (``route_points``, route.h).

        Each point goes to the owner of its base cell's leaf slot, empty or not; the base cell comes
        from the kernels' own index mapping (wrapped into the periods of a periodic volume), so routing
        and sampling agree to the last bit.  Non-finite
        points and points outside the int32 index range go to partition 0 (any partition answers them
        alike: NaN or background).  With a ``near`` table (:func:`near_blocks`), points based in a
        block far from all data are grouped apart: they read only background.

        Returns ``order`` (N,) int64, the input index of each grouped point (stable within a group);
        ``bounds`` (P + 2,) int64, group g is ``order[bounds[g]:bounds[g + 1]]`` with group 0 the
        background-only points and group p + 1 partition p; and the points in that order (N, 3).
        Arrays of ``device`` (``"cuda"``: CuPy, routed on the GPU).
        """
        return run(
            "route",
            points,
            self.origin,
            self.shift,
            self.boundaries,
            transform.kernel_parameters(),
            space == "world",
            near,
            self.period,
            device=device,
        )


def near_blocks(
    topology: Topology, stencil: tuple[int, int], router: Router | None = None, max_blocks: int = 1 << 22
) -> np.ndarray | None:
    """Hash table of the blocks (leaf keys >> ROUTE_BLOCK_SHIFT: 128^3 voxels) in which a stencil
    (``stencil`` = leaf offsets lo, hi of a stencil from its base leaf) can touch a leaf or a tile.
    Points based anywhere else read only background.  None (no shortcut) when tiles would cover
    more than ``max_blocks`` blocks.

    Each block's value is the partition of ``router`` that owns all of its leaf slots, so that
    routing a point there is one lookup, or ``MIXED_BLOCK`` where partitions meet inside the block
    (and for every block without a router): those points are routed by their own Morton code.  Morton
    codes grow with each coordinate, so the block's lowest and highest leaf keys bound all of its codes.
    """
    lo, hi = stencil
    B = BLOCK_SHIFT
    keys = [topology.leaf_origins.astype(np.int64) >> LEAF_SHIFT]
    sizes = [np.ones(len(keys[0]), np.int64)]
    if len(topology.tile_sizes):
        keys.append(topology.tile_origins.astype(np.int64) >> LEAF_SHIFT)
        sizes.append(topology.tile_sizes.astype(np.int64) >> LEAF_SHIFT)
    keys, sizes = np.concatenate(keys), np.concatenate(sizes)
    # base leaf keys whose stencil reaches [a, a + s - 1] are [a - hi, a + s - 1 - lo], per axis
    first = (keys - hi) >> B
    last = (keys + sizes[:, None] - 1 - lo) >> B
    span = last - first + 1
    if int(np.prod(span, axis=1).sum()) > max_blocks:
        return None
    blocks = []
    for extent in np.unique(span, axis=0):  # items of one block extent at a time (leaves: 1 or 2 per axis)
        rows = np.all(span == extent, axis=1)
        grid = np.stack(np.meshgrid(*[np.arange(e) for e in extent], indexing="ij"), -1).reshape(-1, 3)
        blocks.append((first[rows][:, None, :] + grid[None]).reshape(-1, 3))
    blocks = np.unique(np.concatenate(blocks), axis=0) if blocks else np.zeros((0, 3), np.int64)
    if len(blocks) == 0:
        return np.zeros((0, 4), np.int32)  # nothing anywhere: an empty table still routes every point
    owner = np.full(len(blocks), MIXED_BLOCK, np.int64)
    if router is not None:
        first_part = router.partition_of_keys(blocks << B)
        last_part = router.partition_of_keys(((blocks + 1) << B) - 1)
        owner = np.where(first_part == last_part, first_part, MIXED_BLOCK)
    table, _ = kernel.build_table(blocks, owner)
    return table


@dataclass(frozen=True)
class PartitionPlan:
    """Leaves cut into P ranges of a Morton curve.

    Attributes
    ----------
    router : where points go
    owned : list of P int64 arrays of leaf indices (tree order) each partition owns
    halo : list of P int64 arrays of leaf indices each partition also needs
    stencil : (lo, hi) leaf offsets of a point's stencil relative to its base leaf
    """

    router: Router
    owned: list[np.ndarray]
    halo: list[np.ndarray]
    stencil: tuple[int, int]

    @property
    def partitions(self) -> int:
        return len(self.owned)


def leaf_stencil(stencil_radius: int) -> tuple[int, int]:
    """(lo, hi) leaf offsets, relative to a point's base leaf, that a stencil of ``stencil_radius``
    voxels (``plan_partitions``) can touch."""
    return -((max(stencil_radius, 1) - 1 + 7) // 8), (stencil_radius + 7) // 8


def plan_partitions(
    topology: Topology,
    partitions: int,
    stencil_radius: int = 1,
    weights: np.ndarray | None = None,
    shares: np.ndarray | None = None,
) -> PartitionPlan:
    """Balanced Morton-curve partitions of the leaves and the halo each needs.

    ``stencil_radius`` is the reach of a scheme's stencil in voxels on the positive side of the base
    cell (1 for ``linear``; higher-order schemes also reach ``stencil_radius - 1`` to the negative
    side); the halo of a partition is every leaf a stencil of one of its base cells can touch.
    ``weights`` (L,): each leaf's cost (default 1: partitions of equal leaf counts), e.g.
    :func:`leaf_weights` of some points; ``shares`` (P,): each partition's part of the total weight
    (default equal), e.g. its worker's memory.  The curve is cut where the cumulative weight reaches each
    partition's share.
    """
    if partitions < 1:
        raise VolumeError(f"expected at least one partition, got {partitions}")
    if stencil_radius < 0:
        raise VolumeError(f"expected a stencil radius >= 0, got {stencil_radius}")
    keys = topology.leaf_origins.astype(np.int64) >> LEAF_SHIFT
    L = len(keys)
    origin = keys.min(axis=0) - 1 if L else np.zeros(3, np.int64)
    span = int((keys.max(axis=0) - origin).max()) + 2 if L else 1
    shift = max(0, span.bit_length() - MORTON_BITS)
    codes = morton(keys, origin, shift)
    order = np.argsort(codes, kind="stable")
    cuts = _cuts(L, partitions, None if weights is None else np.asarray(weights, np.float64)[order], shares)
    owned = [np.sort(order[cuts[p] : cuts[p + 1]]) for p in range(partitions)]
    boundaries = np.array(
        [codes[order[cuts[p]]] if cuts[p] < L else np.iinfo(np.uint64).max for p in range(1, partitions)],
        dtype=np.uint64,
    )
    lo, hi = leaf_stencil(stencil_radius)
    period = topology.periodic
    router = Router(origin, shift, boundaries, None if period is None else period.kernel_parameters())
    owner = np.empty(L, np.int64)
    for p, leaves in enumerate(owned):
        owner[leaves] = p
    halo: list[list[np.ndarray]] = [[] for _ in range(partitions)]
    for leaves, first, last in leaf_images(topology, (lo, hi)):
        # the leaf's image covers leaf keys first .. last (last - first is 0 or 1 per axis): it is needed by
        # every partition that owns a base leaf in [first - hi, last - lo], i.e. first - o for o in
        # [lo - (last - first), hi] (one key more than needed where last == first)
        widest = (last - first).max(axis=0)
        ranges = [np.arange(lo - int(widest[a]), hi + 1) for a in range(3)]
        for o in np.stack(np.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, 3):
            needed_by = router.partition_of_keys(first - o)
            foreign = np.nonzero(needed_by != owner[leaves])[0]
            for p in np.unique(needed_by[foreign]):
                halo[int(p)].append(leaves[foreign[needed_by[foreign] == p]])
    halos = [np.unique(np.concatenate(h)) if h else np.zeros(0, np.int64) for h in halo]
    return PartitionPlan(router, owned, halos, (lo, hi))


def _cuts(L: int, partitions: int, weights: np.ndarray | None, shares: np.ndarray | None) -> list[int]:
    """Where the curve of ``L`` leaves (``weights`` in curve order) is cut for ``partitions`` partitions of
    the given ``shares``: P + 1 non-decreasing positions from 0 to L."""
    if weights is None and shares is None:
        return [int(round(L * p / partitions)) for p in range(partitions + 1)]
    w = np.ones(L) if weights is None else weights
    if len(w) != L or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise VolumeError(f"expected {L} finite leaf weights >= 0, got {len(w)}")
    share = np.ones(partitions) if shares is None else np.asarray(shares, np.float64)
    if share.shape != (partitions,) or not np.all(np.isfinite(share)) or np.any(share <= 0):
        raise VolumeError(f"expected {partitions} positive partition shares, got {share.tolist()}")
    cumulative = np.cumsum(w)
    targets = cumulative[-1] * np.cumsum(share)[:-1] / share.sum() if L else np.zeros(partitions - 1)
    inner = np.searchsorted(cumulative, targets, side="left") + 1 if L else np.zeros(partitions - 1, np.int64)
    return [0, *np.minimum(np.maximum.accumulate(inner), L).astype(int).tolist(), L]


def leaf_weights(topology: Topology, points: np.ndarray, points_weight: float = 0.5) -> np.ndarray:
    """(L,) leaf costs for :func:`plan_partitions` balanced by leaves and by where points fall: a leaf's
    share of the leaves (its memory) and its share of the ``points`` (index space, (N, 3): sampling work
    lands on the leaf of each point's base cell), mixed ``1 - points_weight`` to ``points_weight``."""
    keys = topology.leaf_origins.astype(np.int64) >> LEAF_SHIFT
    L = len(keys)
    if L == 0:
        return np.zeros(0)
    pts = np.asarray(points, np.float64).reshape(-1, 3)
    pts = pts[np.all(np.isfinite(pts), axis=1)]
    base = np.floor(pts).astype(np.int64) >> LEAF_SHIFT
    lo = keys.min(axis=0)
    span = keys.max(axis=0) - lo + 1

    def code(k: np.ndarray) -> np.ndarray:
        return ((k[:, 0] - lo[0]) * span[1] + (k[:, 1] - lo[1])) * span[2] + (k[:, 2] - lo[2])

    inside = np.all((base >= lo) & (base < lo + span), axis=1)
    leaf_codes = code(keys)
    order = np.argsort(leaf_codes)
    found = np.searchsorted(leaf_codes[order], code(base[inside]))
    found = np.minimum(found, L - 1)
    hit = leaf_codes[order][found] == code(base[inside])
    counts = np.bincount(order[found[hit]], minlength=L).astype(np.float64)
    by_points = counts / counts.sum() if counts.sum() else np.full(L, 1.0 / L)
    return (1 - points_weight) / L + points_weight * by_points


def leaf_images(topology: Topology, stencil: tuple[int, int]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The leaves as stencils see them: ``(leaves (n,), first keys (n, 3), last keys (n, 3))`` for each image
    of the leaves - themselves, and on a periodic volume their copies one period away along each combination of
    periodic axes, kept where a stencil based inside the periods reaches them (``stencil``: leaf offsets lo, hi).
    An image of leaf voxels ``[o + s, o + s + 7]`` covers leaf keys ``(o + s) >> 3 .. (o + s + 7) >> 3``."""
    origins = topology.leaf_origins.astype(np.int64)
    every = np.arange(len(origins), dtype=np.int64)
    images = [(every, origins >> LEAF_SHIFT, origins >> LEAF_SHIFT)]
    period = topology.periodic
    if period is None:
        return images
    lo_v, size = np.array(period.lo, np.int64), np.array(period.size, np.int64)
    # base leaf keys inside the periods (a wrapped base cell lies in [lo, lo + size))
    base_first, base_last = lo_v >> LEAF_SHIFT, (lo_v + np.maximum(size, 1) - 1) >> LEAF_SHIFT
    choices = [(-1, 0, 1) if size[a] else (0,) for a in range(3)]
    for s in np.stack(np.meshgrid(*choices, indexing="ij"), -1).reshape(-1, 3):
        if not s.any():
            continue
        shifted = origins + s * size
        first, last = shifted >> LEAF_SHIFT, (shifted + 7) >> LEAF_SHIFT
        # reached by some base key in [base_first, base_last]: first - hi <= base_last and last - lo >= base_first
        periodic = size > 0
        reach = np.all(~periodic | ((first - stencil[1] <= base_last) & (last - stencil[0] >= base_first)), axis=1)
        if reach.any():
            images.append((every[reach], first[reach], last[reach]))
    return images
