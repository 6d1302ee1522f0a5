"""Resident particles: the worker side of a distributed advection (the client's side is
:mod:`vdbflow.temporal.resident`).

A partition integrates the particles it holds in the kernels (kernels/vdbflow/advect.h), each as
far as the partition's own and halo leaves carry it: to the end of the integration, or to the step
whose stencil leaves that data.  A particle stopped so at step j moves on from x_j to the partition
that owns x_j's cell.  Where that is this partition (a later stage of the step left the data), the
partition takes that step again stage by stage (:meth:`Run.step`): a stage point outside its data but
in its own cells, or near enough to the step's start that its stencil stays in the halo
(:class:`PartitionSource`), is outside the volume's data too, and the particle stops there as it
would in one process; only a stage point beyond that reach (``|u| dt`` larger than the halo) leaves
the step to the client.  Each call keeps on its worker the saved positions (rows) and the final state
of the particles that finished there, split by output chunk, and hands the movers out by destination:
only they travel, worker to worker.  Through a series the same happens window by window of its steps
(:func:`advance_window`, the series kernels), the particles reaching a window's end going on to the
next from the partition owning their cell.

Pure functions of arrays.  A *batch* of particles is a dict of arrays over its m particles:
``id`` (m,) int64, the particle's index; ``step`` (m,) int64, the step k whose position ``x`` (m, 3)
float64 is (not yet checked); ``sampled`` (m,) int64, the stage points it sampled so far; and for
an FTLE ``F`` (m, 3, 3), the flow-map gradient at x.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core import schema
from vdbflow.core.transform import Transform
from vdbflow.core.volume import Volume
from vdbflow.devices import particle_kernels
from vdbflow.distribution.plan import Router
from vdbflow.errors import ClusterError
from vdbflow.ops.sampling import MODES, STENCIL_RADIUS
from vdbflow.temporal.integration import TABLEAUS, Run, kernel_tableau, save_slots
from vdbflow.temporal.series_kernels import TIME_KINDS, TopologyGroups
from vdbflow.temporal.sources import VolumeSource

ACTIVE, LEFT_DATA, NON_FINITE = schema.STATUS_VALUES


@dataclass(frozen=True)
class ParticlePlan:
    """What every partition's call needs to know of one advection (small: it travels with each task).

    ``method`` and ``mode`` name the integrator and the sampling scheme; ``h`` the signed step and
    ``n`` the steps from ``t0`` to ``t1``; ``save_steps`` (S,) the steps whose positions are kept;
    ``chunk`` particles per output chunk."""

    router: Router
    transform: Transform
    method: str
    mode: str
    h: float
    t0: float
    t1: float
    n: int
    save_steps: np.ndarray
    chunk: int
    velocity: bool
    jacobian: bool
    variational: bool
    halo: int  # the stencil radius, voxels, that the partitions' halos were cut for
    interpolation: str = "none"  # a series' interpolation in time ("linear", "pchip"); "none": a steady volume
    device: str = "cpu"  # where each partition's kernels run: "cuda" on its worker's GPU

    @property
    def reach(self) -> int:
        """Voxels a stencil's base cell may lie from a partition's own cells with the stencil still in
        its data (negative: not even its own cells' stencils are)."""
        return self.halo - STENCIL_RADIUS[self.mode]

    @property
    def stages(self) -> int:
        return len(TABLEAUS[self.method][2])

    @property
    def slots(self) -> int:
        return len(self.save_steps)

    def time(self, k: np.ndarray) -> np.ndarray:
        """The time of steps k (as :class:`vdbflow.temporal.integration.Run` computes it), NaN for k < 0."""
        k = np.asarray(k)
        with np.errstate(invalid="ignore"):
            t = np.where(k == self.n, self.t1, self.t0 + k * self.h)
        return np.where(k < 0, np.nan, t)

    def owners(self, x: np.ndarray) -> np.ndarray:
        """The partition (M,) int64 owning the cell of each world point x (M, 3)."""
        order, bounds, _ = self.router.route(x, self.transform, "world")
        owner = np.empty(len(x), np.int64)
        for p in range(self.router.partitions):
            owner[order[bounds[p + 1] : bounds[p + 2]]] = p
        return owner

    def run(self, src: Any) -> Run:
        """A :class:`Run` of no particles on this plan's steps, through ``src`` (for :meth:`Run.subset`)."""
        return Run.on_steps(
            src,
            self.method,
            self.t0,
            self.t1,
            self.h,
            self.n,
            self.save_steps,
            self.velocity,
            self.jacobian,
            self.variational,
        )


class PartitionSource(VolumeSource):
    """A partition's Volume as a particle source for steps that start in its own cells.

    Its halo holds every leaf that a stencil of ``halo`` voxels around its cells reaches, so a stage
    point whose own stencil (``STENCIL_RADIUS[mode]`` voxels) stays within that reach of the step's
    start, or whose cell the partition owns, is judged as the whole volume would judge it;
    :meth:`undecided` marks the others.  Two voxels of margin: NumPy's index map may put the start's
    and the stage point's cells each one voxel off the kernels' at a cell face (the start's own cell is
    the partition's by the kernels' map: the router's)."""

    def __init__(self, volume: Volume, plan: ParticlePlan, partition: int):
        super().__init__(volume, plan.mode)
        self.plan, self.partition = plan, partition

    def undecided(self, points: np.ndarray, starts: np.ndarray) -> np.ndarray:
        reach = self.plan.reach - 2
        xf = self.plan.transform
        apart = np.abs(np.floor(xf.apply_inverse(points)) - np.floor(xf.apply_inverse(starts))).max(axis=1)
        unsure = ~(apart <= reach)
        if unsure.any():
            unsure[unsure] = self.plan.owners(points[unsure]) != self.partition
        return unsure


def seed_batch(x: np.ndarray, first: int, variational: bool) -> dict[str, np.ndarray]:
    """Seeds x (m, 3) as a batch at step 0, particles ``first .. first + m - 1``."""
    m = len(x)
    batch = {
        "id": np.arange(first, first + m, dtype=np.int64),
        "step": np.zeros(m, np.int64),
        "x": np.asarray(x, np.float64),
        "sampled": np.zeros(m, np.int64),
    }
    if variational:
        batch["F"] = np.broadcast_to(np.eye(3), (m, 3, 3)).copy()
    return batch


def route_seeds(x: np.ndarray, first: int, plan: ParticlePlan) -> list[Any]:
    """A chunk of seeds x (m, 3), particles ``first ..``, by the partition owning their cells: a list of
    P batches (None where empty), made on a worker."""
    batch = seed_batch(np.asarray(x, np.float64).reshape(-1, 3), first, plan.variational)
    owner = plan.owners(batch["x"])
    return [take(batch, owner == q) if (owner == q).any() else None for q in range(plan.router.partitions)]


def counts_of(batches: list[Any]) -> np.ndarray:
    """The particles of each of a list of batches (None: none), (P,) int64."""
    return np.array([0 if b is None else len(b["id"]) for b in batches], np.int64)


def empty_batch(variational: bool) -> dict[str, np.ndarray]:
    """A batch of no particles."""
    batch = {
        "id": np.zeros(0, np.int64),
        "step": np.zeros(0, np.int64),
        "x": np.zeros((0, 3)),
        "sampled": np.zeros(0, np.int64),
    }
    if variational:
        batch["F"] = np.zeros((0, 3, 3))
    return batch


def take(batch: dict[str, np.ndarray], rows: Any) -> dict[str, np.ndarray]:
    """The particles ``rows`` (a mask or indices) of a batch."""
    return {key: value[rows] for key, value in batch.items()}


def concat(batches: list[dict[str, np.ndarray]], variational: bool) -> dict[str, np.ndarray]:
    """One batch of the particles of ``batches``, in order."""
    batches = [b for b in batches if b is not None and len(b["id"])]
    if not batches:
        return empty_batch(variational)
    if len(batches) == 1:
        return batches[0]
    return {key: np.concatenate([b[key] for b in batches]) for key in batches[0]}


def split_by_chunk(ids: np.ndarray, arrays: dict[str, np.ndarray], chunk: int) -> dict[int, dict[str, np.ndarray]]:
    """Rows of ``arrays`` (each indexed like ``ids``) grouped by the output chunk of their particle."""
    which = ids // chunk
    order = np.argsort(which, kind="stable")
    which = which[order]
    cuts = np.flatnonzero(np.diff(which)) + 1
    out = {}
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(which)], strict=True):
        if hi > lo:
            sel = order[lo:hi]
            out[int(which[lo])] = {key: value[sel] for key, value in arrays.items()}
    return out


def group_outputs(plan: ParticlePlan, slots: np.ndarray, m: int) -> tuple:
    """The outputs of m particles over steps whose global slots are ``slots`` (-1: not kept): the slots
    relative to the first kept one, that first slot, and NaN position (m, S', 3), velocity and Jacobian
    (as asked) from it on (one slot, never written, where none is kept)."""
    kept = slots >= 0
    first = int(slots[kept][0]) if kept.any() else plan.slots - 1
    width = plan.slots - first
    position = np.full((m, width, 3), np.nan)
    velocity = np.full((m, width, 3), np.nan) if plan.velocity else None
    jacobian = np.full((m, width, 3, 3), np.nan) if plan.jacobian else None
    return np.where(kept, slots - first, -1), first, position, velocity, jacobian


def integrate_group(
    volume: Volume, plan: ParticlePlan, k0: int, batch: dict[str, np.ndarray], save_slot: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Particles of one start step ``k0`` through the partition's data, in the kernels, as far as it
    carries them.  Returns their saved rows (``id``, ``slot``, ``position`` and as asked ``velocity``,
    ``jacobian``), and per particle the kernel's status, last valid step (-1: none), stage points
    sampled (int32) and x (M, 3) where it stopped (F in ``batch`` updated in place)."""
    local, first, position, velocity, jacobian = group_outputs(plan, save_slot[k0:], len(batch["id"]))
    x = np.array(batch["x"], np.float64)
    A, B = kernel_tableau(plan.method)
    status, last, evaluations = particle_kernels(plan.device)[0](
        volume.kernel_arrays(), MODES[plan.mode], x, A, B, plan.h, local, position, velocity, jacobian, batch.get("F")
    )
    rows = saved_rows(batch["id"], position, velocity, jacobian, first)
    return rows, status, last, evaluations, x


def saved_rows(
    ids: np.ndarray, position: np.ndarray, velocity: Any, jacobian: Any, first: int = 0
) -> dict[str, np.ndarray]:
    """The saved (finite) positions of (m, S', 3) results as rows: ``id``, ``slot`` (the slot + ``first``),
    ``position`` and, where given, ``velocity`` and ``jacobian``."""
    pi, si = np.nonzero(~np.isnan(position[..., 0]))
    rows = {"id": ids[pi], "slot": (si + first).astype(np.int64), "position": position[pi, si]}
    if velocity is not None:
        rows["velocity"] = velocity[pi, si]
    if jacobian is not None:
        rows["jacobian"] = jacobian[pi, si]
    return rows


def step_stage_by_stage(run: Run, batch: dict[str, np.ndarray]) -> tuple:
    """One step of each particle of ``batch``, at its own step, stage by stage (:meth:`Run.step`)
    through ``run``'s source.  Returns ``(going, rows, retired, undecided)``: the particles that go on
    (a batch at their next step), the saved rows, the finished particles (as :func:`advance` keeps
    them) and those whose step the source could not judge (a batch as given)."""
    m = len(batch["id"])
    sub = run.subset(m, batch.get("F"), judge=True)
    x = np.array(batch["x"], np.float64)
    go = np.zeros(m, bool)
    for k in np.unique(batch["step"]):
        go[sub.step(np.flatnonzero(batch["step"] == k), x, int(k))] = True
    unsure = sub.undecided
    sampled = batch["sampled"] + sub.sampled
    going = {"id": batch["id"][go], "step": batch["step"][go] + 1, "x": x[go], "sampled": sampled[go]}
    if sub.F is not None:
        going["F"] = sub.F[go]
    keep = ~unsure
    rows = saved_rows(
        batch["id"][keep], sub.position[keep], *(None if a is None else a[keep] for a in (sub.velocity, sub.jacobian))
    )
    done = ~go & keep
    retired = {
        "id": batch["id"][done],
        "status": sub.status[done],
        "end_time": sub.end_time[done],
        "sampled": sampled[done],
    }
    if sub.F is not None:
        retired["F"] = np.full((int(done.sum()), 3, 3), np.nan)  # a stopped particle has no FTLE
    return going, rows, retired, take(batch, unsure)


def sort_out(
    plan: ParticlePlan,
    partition: int,
    group: dict[str, np.ndarray],
    k0: int,
    status: np.ndarray,
    last: np.ndarray,
    evaluations: np.ndarray,
    x: np.ndarray,
    continue_at: int | None = None,
) -> tuple[dict[str, np.ndarray], Any, Any]:
    """The particles of a kernel call from step ``k0`` (``group``, and the call's status, last valid
    step, stage points sampled and final x) sorted out: ``retired`` (finished here: at the end, stopped
    for good), ``moved`` (stopped at step j where a stage left the partition's data: a batch at step j
    with ``owner``, the partition owning x_j's cell; its own for a later stage of the step) or None, and
    ``going`` (with ``continue_at``, the step a window ended at unchecked: the active particles, a batch
    at that step) or None."""
    s = plan.stages
    left = status == LEFT_DATA
    j = k0 + evaluations.astype(np.int64) // s  # the step it stopped in; x holds x_j (F: F_j)
    redo = np.zeros(len(x), bool)
    owner = np.full(len(x), partition, np.int64)
    if left.any():
        owner[left] = plan.owners(x[left])
        # at its own cell's check (stage 1) the partition holds the stencil whole: the data ends there
        redo = left & ((owner != partition) | (evaluations % s != 0))
    going_mask = (status == ACTIVE) & (continue_at is not None)
    done = ~redo & ~going_mask
    last_step = np.where(last >= 0, k0 + last, k0 - 1)
    retired = {
        "id": group["id"][done],
        "status": status[done],
        "end_time": plan.time(last_step[done]),
        "sampled": group["sampled"][done] + evaluations[done],
    }
    if plan.variational:
        F = group["F"][done]
        F[status[done] != ACTIVE] = np.nan
        retired["F"] = F
    moved = going = None
    if redo.any():
        moved = {"id": group["id"][redo], "step": j[redo], "x": x[redo]}
        moved["sampled"] = group["sampled"][redo] + (j[redo] - k0) * s
        if plan.variational:
            moved["F"] = group["F"][redo]
        moved["owner"] = owner[redo]
    if going_mask.any():
        going = {"id": group["id"][going_mask], "step": np.full(int(going_mask.sum()), continue_at, np.int64)}
        going["x"] = x[going_mask]
        going["sampled"] = group["sampled"][going_mask] + evaluations[going_mask]
        if plan.variational:
            going["F"] = group["F"][going_mask]
    return retired, moved, going


def advance(volume: Volume, plan: ParticlePlan, partition: int, *batches: dict[str, np.ndarray]) -> tuple:
    """The particles of ``batches`` through partition ``partition`` (its Volume ``volume``), on its worker.

    Each particle runs to the end, stops for good, or stops at step j where a stage leaves the
    partition's data; then it moves on from x_j to the owner of x_j's cell, or, where that is this
    partition, takes step j stage by stage here (module docstring) and goes on; a step this partition
    cannot judge goes to the client.

    Returns ``(summary, outbox, fallback, pieces)``: ``summary`` a dict of counts (``to`` (P,) the
    movers by destination, ``fallback``, ``retired``, ``rows``, ``local_steps`` the steps taken stage
    by stage here, ``chunks`` the output chunks with pieces here, ``max_sampled``); ``outbox`` a list
    of P batches (None where empty); ``fallback`` a batch or None; ``pieces`` {chunk: (rows, retired)}
    with ``retired`` the finished particles' ``id``, ``status``, ``end_time``, ``sampled`` and
    (FTLE) ``F``.
    """
    pending = concat(list(batches), plan.variational)
    save_slot = save_slots(plan.n, plan.save_steps)
    rows_parts, retired_parts, movers, unjudged = [], [], [], []
    local_steps = 0
    template: Run | None = None
    while len(pending["id"]):
        here = []
        for k0 in np.unique(pending["step"]):
            group = take(pending, pending["step"] == k0)
            rows, status, last, evaluations, x = integrate_group(volume, plan, int(k0), group, save_slot)
            rows_parts.append(rows)
            retired, moved, _ = sort_out(plan, partition, group, int(k0), status, last, evaluations, x)
            retired_parts.append(retired)
            if moved is not None:
                movers.append(take(moved, moved["owner"] != partition))
                here.append(take(moved, moved["owner"] == partition))
        pending = concat([{k: v for k, v in b.items() if k != "owner"} for b in here], plan.variational)
        if len(pending["id"]):  # steps that left the data from its own cells: stage by stage, here
            if template is None:
                template = plan.run(PartitionSource(volume, plan, partition))
            local_steps += len(pending["id"])
            going, rows, retired, unsure = step_stage_by_stage(template, pending)
            rows_parts.append(rows)
            retired_parts.append(retired)
            unjudged.append(unsure)
            owner = plan.owners(going["x"]) if len(going["id"]) else np.zeros(0, np.int64)
            going["owner"] = owner
            movers.append(take(going, owner != partition))
            pending = take({k: v for k, v in going.items() if k != "owner"}, owner == partition)
    return finish(plan, rows_parts, retired_parts, movers, unjudged, local_steps)


def by_owner(batches: list[dict[str, np.ndarray]], P: int) -> tuple[list[Any], np.ndarray]:
    """Batches with ``owner`` split by it: a list of P batches (None where empty) and their sizes (P,)."""
    out: list[Any] = [None] * P
    sizes = np.zeros(P, np.int64)
    moved = concat_rows(batches)
    if moved:
        owner = moved.pop("owner")
        for q in np.unique(owner):
            out[int(q)] = take(moved, owner == q)
            sizes[q] = int((owner == q).sum())
    return out, sizes


def finish(
    plan: ParticlePlan,
    rows_parts: list,
    retired_parts: list,
    movers: list,
    unjudged: list,
    local_steps: int,
    going: list | None = None,
) -> tuple:
    """The result of a partition's call (:func:`advance`, :func:`advance_window`) from its parts."""
    P = plan.router.partitions
    rows = concat_rows(rows_parts)
    retired = concat_rows(retired_parts)
    outbox, to = by_owner(movers, P)
    onward, next_to = by_owner(going or [], P)
    fallback = concat(unjudged, plan.variational)
    pieces = chunk_pieces(rows, retired, plan.chunk)
    summary = {
        "to": to,
        "next": next_to,
        "fallback": len(fallback["id"]),
        "retired": 0 if not retired else len(retired["id"]),
        "rows": 0 if not rows else len(rows["id"]),
        "local_steps": local_steps,
        "chunks": sorted(pieces),
        "max_sampled": int(retired["sampled"].max()) if retired else 0,
    }
    return summary, outbox, fallback if len(fallback["id"]) else None, pieces, onward


def advance_window(
    volumes: list[Volume], plan: ParticlePlan, window: Any, partition: int, *batches: dict[str, np.ndarray]
) -> tuple:
    """The particles of ``batches`` through partition ``partition`` of a series window's steps
    (``volumes``: the partition of each series step the window reads; ``window`` a
    :class:`~vdbflow.temporal.series_kernels.Window`), in the kernels, on its worker: as :func:`advance`,
    but a particle that reaches the window's end (unchecked there, unless the window ends the run)
    goes on to the next window, by the owner of its cell, and a step that left the data from the
    partition's own cells goes to the client.  Returns :func:`advance`'s tuple and the particles going
    on by partition."""
    pending = concat(list(batches), plan.variational)
    save_slot = save_slots(plan.n, plan.save_steps)
    ks = [v.kernel_arrays() for v in volumes]
    groups = TopologyGroups().of(window.low, volumes)
    end = window.first + window.steps
    A, B = kernel_tableau(plan.method)
    rows_parts, retired_parts, movers, unjudged, going = [], [], [], [], []
    for k0 in np.unique(pending["step"]):
        group = take(pending, pending["step"] == k0)
        m, off = len(group["id"]), int(k0) - window.first
        local, first, position, velocity, jacobian = group_outputs(plan, save_slot[k0 : end + 1], m)
        x = np.array(group["x"], np.float64)
        status, last, evaluations = np.zeros(m, np.int8), np.full(m, -1, np.int64), np.zeros(m, np.int64)
        particle_kernels(plan.device)[1](
            ks, groups, TIME_KINDS[plan.interpolation], window.stage_grid[off:], window.stage_coef[off:], int(k0),
            MODES[plan.mode], x, A, B, plan.h, local, position, velocity, jacobian,
            group.get("F"), status, last, evaluations, window.validate_end,
        )  # fmt: skip
        rows_parts.append(saved_rows(group["id"], position, velocity, jacobian, first))
        last = np.where(last >= 0, last - k0, -1)  # reported in run steps: relative to k0, as sort_out reads it
        retired, moved, onward = sort_out(
            plan, partition, group, int(k0), status, last, evaluations, x, None if window.validate_end else end
        )
        retired_parts.append(retired)
        if moved is not None:
            movers.append(take(moved, moved["owner"] != partition))
            unjudged.append(take(moved, moved["owner"] == partition))
        if onward is not None:
            onward["owner"] = plan.owners(onward["x"])
            going.append(onward)
    unjudged = [{k: v for k, v in b.items() if k != "owner"} for b in unjudged]
    return finish(plan, rows_parts, retired_parts, movers, unjudged, 0, going)


def next_of(result: tuple, destination: int) -> dict[str, np.ndarray]:
    return result[4][destination]


def chunk_pieces(rows: dict[str, np.ndarray], retired: dict[str, np.ndarray], chunk: int) -> dict[int, tuple]:
    """Saved rows and finished particles split by output chunk: {chunk: (rows or None, retired or None)}."""
    pieces: dict[int, list] = {}
    for which, arrays in enumerate((rows, retired)):
        if arrays and len(arrays["id"]):
            for c, piece in split_by_chunk(arrays["id"], arrays, chunk).items():
                pieces.setdefault(c, [None, None])[which] = piece
    return {c: (v[0], v[1]) for c, v in pieces.items()}


def concat_rows(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The rows of ``parts`` (dicts of arrays with the same keys) in one dict; {} for none."""
    parts = [p for p in parts if p and len(p["id"])]
    if not parts:
        return {}
    return {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}


def summary_of(result: tuple) -> dict[str, Any]:
    return result[0]


def outbox_of(result: tuple, destination: int) -> dict[str, np.ndarray]:
    return result[1][destination]


def fallback_of(result: tuple) -> dict[str, np.ndarray]:
    return result[2]


def piece_of(result: tuple, chunk: int) -> tuple:
    return result[3][chunk]


def held(value: Any) -> Any:
    """``value`` itself: a task that holds data the client made (kept as the task's own argument, so
    that the scheduler can run it again if the worker holding it dies)."""
    return value


def assembled(bounds: tuple[int, int], plan: ParticlePlan, keys: tuple[str, ...], pieces: tuple) -> tuple:
    """:func:`assemble`'s results for particles ``bounds`` (lo, hi), as a tuple in the order of ``keys``."""
    out = assemble(*bounds, plan, *pieces)
    return tuple(out[key] for key in keys)


def assemble(lo: int, hi: int, plan: ParticlePlan, *pieces: tuple) -> dict[str, np.ndarray]:
    """The results of particles ``lo .. hi - 1`` from the pieces holding them: ``position`` (m, S, 3)
    and as asked ``velocity``, ``jacobian``; ``status`` (m,) int8, ``end_time`` (m,), ``sampled``
    (m,) int64 and (FTLE) ``F`` (m, 3, 3).  Every particle retires exactly once."""
    m, S = hi - lo, plan.slots
    out = {"position": np.full((m, S, 3), np.nan)}
    if plan.velocity:
        out["velocity"] = np.full((m, S, 3), np.nan)
    if plan.jacobian:
        out["jacobian"] = np.full((m, S, 3, 3), np.nan)
    out["status"] = np.full(m, -1, np.int8)
    out["end_time"] = np.full(m, np.nan)
    out["sampled"] = np.zeros(m, np.int64)
    if plan.variational:
        out["F"] = np.full((m, 3, 3), np.nan)
    for rows, retired in pieces:
        if rows is not None:
            i, slot = rows["id"] - lo, rows["slot"]
            for key in ("position", "velocity", "jacobian"):
                if key in out:
                    out[key][i, slot] = rows[key]
        if retired is not None:
            i = retired["id"] - lo
            for key in ("status", "end_time", "sampled", "F"):
                if key in out:
                    out[key][i] = retired[key]
    missing = np.flatnonzero(out["status"] < 0)
    if len(missing):
        raise ClusterError(
            f"expected every particle of {lo:,}..{hi - 1:,} to finish in one partition, got {len(missing):,} that "
            f"did not (the first: {(lo + missing[:5]).tolist()}): a piece of the results was lost"
        )
    return out
