"""Resident particles: a distributed advection whose particles live on the workers.

The client routes the seeds once; from then on each partition's particles stay on its worker
(:func:`vdbflow.temporal.particle_tasks.advance`) and run, in the kernels, as far as the
partition's own and halo leaves carry them.  A round is one call per partition holding particles;
between rounds only the particles that crossed into another partition's cells move, worker to
worker, and the client reads per-partition counts.  A steady field asks nothing of a particle's
neighbours, so particles need not keep step: a round ends when every partition's particles have
finished or left, and the rounds number the crossings of the most-travelled particle, not the steps.

A step whose later stage leaves the partition's data from a cell the partition owns (a stage point
beyond its halo: ``|u| dt`` larger than the halo, or the edge of the data itself) is stepped stage by
stage through the whole volume by the client, for those particles only (``stage_by_stage_steps``).

The saved positions, velocities and Jacobians stay where they were computed, split by output chunk;
the results are lazy Dask arrays that assemble each chunk of particles on a worker (written to a store
from there, or brought to the client by ``.values``).  Equal, bit for bit, to one process's
:func:`vdbflow.advect`.

Faults: every piece of a round is a task whose inputs are the previous round's pieces, down to the
seeds (the client's data, kept in the first round's tasks).  A worker lost mid-advection loses its
pieces and its partitions; the scheduler rebuilds the partitions and recomputes the lost pieces from
that lineage: at worst the rounds so far, once more.
"""

from __future__ import annotations

import itertools
import operator
from collections import defaultdict
from typing import Any

import numpy as np

from vdbflow.errors import SamplingError
from vdbflow.ops.chunk_graph import PerChunk, map_chunks, stack_chunks
from vdbflow.ops.sampling import STENCIL_RADIUS
from vdbflow.temporal import particle_tasks as steps
from vdbflow.temporal.series_kernels import SeriesPlan, window_span
from vdbflow.temporal.steps import TABLEAUS, saved_bytes_per_step

CHUNK_BYTES = 1 << 27  # the saved results of one output chunk of particles (128 MiB)
HELD_PARTICLES = 1 << 15  # particles the client sends in one task (<= 4 MiB with F)


def output_chunk(particles: int, slots: int, velocity: bool, jacobian: bool) -> int:
    """Particles per output chunk: their saved results fill about ``CHUNK_BYTES``."""
    per_particle = slots * saved_bytes_per_step(velocity, jacobian)
    return int(max(1, min(particles, CHUNK_BYTES // per_particle)))


def advect_resident(run: Any, x: np.ndarray) -> None:
    """Integrate the seeds ``x`` (N, 3) of ``run`` (a :class:`~vdbflow.temporal.integration.Run`
    through a DistributedVolume, or a DistributedSeries whose steps share one topology) with resident
    particles; sets the run's results as lazy Dask arrays (``position``, ``velocity``, ``jacobian``,
    ``status``, ``end_time``, ``F``) and its statistics (``evaluations``, ``rounds``, ``migrations``,
    ``stage_by_stage_steps``, ``client_steps``)."""
    src = run.src
    if src.kind == "series":
        series = src.series
        cache = series.distributed_cache
        series.distributed_cache = max(cache, window_span(src.time))  # a window's steps stay distributed
        try:
            windows = SeriesPlan(series, src.time, run.t0, run.t1, run.h, run.n, TABLEAUS[run.method][0]).windows()
            first = next(windows)
            dvol = series.step(first.low if not isinstance(first, int) else 0)
            resident = Resident(run, dvol, x, src.time)
            for window in itertools.chain([first], windows):
                resident.through_window(window)
        finally:
            series.distributed_cache = cache
    else:
        resident = Resident(run, src.dvol, x)
        resident.rounds_of(lambda p, batches: (steps.advance, resident.dvol.partitions[p], resident.plan, p, *batches))
    resident.finish()


class Resident:
    """The client's side of a resident advection: the particles' whereabouts (futures of batches per
    partition), the pieces of results by output chunk, and the counts."""

    def __init__(self, run: Any, dvol: Any, x: np.ndarray, interpolation: str = "none"):
        src = run.src
        self.run, self.dvol, self.client = run, dvol, dvol.client
        self.P, N = dvol.plan.partitions, len(x)
        self.plan = steps.ParticlePlan(
            router=dvol.plan.router,
            transform=dvol.template.transform,
            method=run.method,
            mode=src.mode,
            h=run.h,
            t0=run.t0,
            t1=run.t1,
            n=run.n,
            save_steps=np.asarray(run.save_steps, np.int64),
            chunk=output_chunk(N, len(run.save_steps), run.with_velocity, run.with_jacobian),
            velocity=run.with_velocity,
            jacobian=run.with_jacobian,
            variational=run.variational,
            halo=dvol.halo,
            interpolation=interpolation,
            device=src.device,
        )
        if self.plan.reach < 0:
            raise SamplingError(
                f"expected a halo of at least {STENCIL_RADIUS[src.mode]} voxels to advect with mode {src.mode!r} "
                f"(its stencil's reach), got a volume distributed with halo={dvol.halo}: distribute(..., halo=8) "
                "keeps most steps inside their partition"
            )
        self.N = N
        self.inbox: list[list[Any]] = [[] for _ in range(self.P)]
        self.pieces: dict[int, list[Any]] = defaultdict(list)
        if isinstance(x, np.ndarray):
            self.hold(self.inbox, steps.seed_batch(x, 0, run.variational))
        else:  # a Dask array: each chunk made and routed on a worker
            import dask

            offsets = np.cumsum((0, *x.chunks[0]))
            routed = [
                self.client.compute(dask.delayed(steps.route_seeds)(block, int(lo), self.plan))
                for block, lo in zip(x.to_delayed().ravel(), offsets, strict=False)
            ]
            counts = self.client.gather([self.client.submit(steps.counts_of, f) for f in routed])
            for f, sizes in zip(routed, counts, strict=True):
                for q in np.flatnonzero(sizes):
                    self.inbox[q].append(self.client.submit(operator.getitem, f, int(q)))
        self.rounds = self.migrations = self.stepped = self.evaluations = self.local = 0

    def rounds_of(self, call: Any, end: int | None = None) -> list[list[Any]]:
        """Rounds of one call per partition holding particles (``call(p, batches)``: the function and
        its arguments) until none is left; ``end``: the step a series window ends at (its particles
        going on are returned by partition, for the next window)."""
        client, P, plan = self.client, self.P, self.plan
        onward: list[list[Any]] = [[] for _ in range(P)]
        inbox, self.inbox = self.inbox, [[] for _ in range(P)]
        while any(inbox):
            self.rounds += 1
            calls = {p: client.submit(*call(p, inbox[p]), pure=False) for p in range(P) if inbox[p]}
            inbox = [[] for _ in range(P)]
            fallback = []
            for p, summary in gather_summaries(client, calls).items():
                for q in np.flatnonzero(summary["to"]):
                    inbox[q].append(client.submit(steps.outbox_of, calls[p], int(q)))
                    self.migrations += int(summary["to"][q])
                for q in np.flatnonzero(summary["next"]):
                    onward[q].append(client.submit(steps.next_of, calls[p], int(q)))
                    self.migrations += int(summary["next"][q]) if q != p else 0
                if summary["fallback"]:
                    fallback.append(client.submit(steps.fallback_of, calls[p]))
                for chunk in summary["chunks"]:
                    self.pieces[chunk].append(client.submit(steps.piece_of, calls[p], chunk))
                self.evaluations = max(self.evaluations, summary["max_sampled"])
                self.local += summary["local_steps"]
            if fallback:
                batch = steps.concat(client.gather(fallback), plan.variational)
                going = self.client_step(batch)
                later = going["step"] >= end if end is not None else np.zeros(len(going["id"]), bool)
                for target, part in ((inbox, steps.take(going, ~later)), (onward, steps.take(going, later))):
                    self.hold(target, part)
        return onward

    def client_step(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One step of each particle of ``batch`` stage by stage through the whole distributed source,
        as one process steps them; the finished ones' pieces kept; returns the particles going on."""
        self.stepped += len(batch["id"])
        going, rows, retired, _ = steps.step_stage_by_stage(self.run, batch)
        if len(retired["id"]):
            self.evaluations = max(self.evaluations, int(retired["sampled"].max()))
        for chunk, piece in steps.chunk_pieces(rows, retired, self.plan.chunk).items():
            self.pieces[chunk].append(self.client.submit(steps.held, piece, pure=False))
        return going

    def hold(self, target: list[list[Any]], batch: dict[str, np.ndarray]) -> None:
        """Particles of the client (the seeds, those it stepped) to the partitions owning their cells, in
        tasks that hold them (so that they are made again if their worker dies), ``HELD_PARTICLES`` a task
        (a few MiB: Dask warns of larger graphs)."""
        for q, part in enumerate(split_by_owner(self.plan, batch)):
            if part is not None:
                for lo in range(0, len(part["id"]), HELD_PARTICLES):
                    piece = steps.take(part, slice(lo, lo + HELD_PARTICLES))
                    target[q].append(self.client.submit(steps.held, piece, pure=False))

    def through_window(self, window: Any) -> None:
        """The particles through one window of a series' steps (an int k: step k of every particle,
        stage by stage by the client, its stages reading more steps than a window holds)."""
        if isinstance(window, int):
            batches = [b for parts in self.inbox for b in parts]
            self.inbox = [[] for _ in range(self.P)]
            batch = steps.concat(self.client.gather(batches), self.plan.variational)
            if len(batch["id"]):
                self.hold(self.inbox, self.client_step(batch))
            return
        series = self.run.src.series
        dvols = [series.step(j) for j in range(window.low, window.low + window.grids)]
        if any(d.plan is not self.dvol.plan for d in dvols):  # checked before the run: one topology
            raise SamplingError("expected every step of the series to share one partition plan")
        plan = self.plan

        def call(p: int, batches: list[Any]) -> tuple:
            return (steps.advance_window, [d.partitions[p] for d in dvols], plan, window, p, *batches)

        end = None if window.validate_end else window.first + window.steps
        self.inbox = self.rounds_of(call, end)

    def finish(self) -> None:
        run = self.run
        run.rounds, run.migrations = self.rounds, self.migrations
        run.stage_by_stage_steps, run.client_steps = self.local + self.stepped, self.stepped
        run.evaluations = int(self.evaluations)
        lazy_results(run, self.plan, self.N, self.pieces)


def gather_summaries(client: Any, calls: dict[int, Any]) -> dict[int, dict[str, Any]]:
    """The summaries of a round's calls ({partition: future of :func:`advance`}), brought to the client."""
    found = client.gather([client.submit(steps.summary_of, f) for f in calls.values()])
    return dict(zip(calls, found, strict=True))


def split_by_owner(plan: steps.ParticlePlan, batch: dict[str, np.ndarray]) -> list[Any]:
    """A batch's particles by the partition owning their cell: a list of P batches (None where empty)."""
    owner = plan.owners(batch["x"]) if len(batch["id"]) else np.zeros(0, np.int64)
    out: list[Any] = [None] * plan.router.partitions
    for q in np.unique(owner):
        out[int(q)] = steps.take(batch, owner == q)
    return out


def lazy_results(run: Any, plan: steps.ParticlePlan, N: int, pieces: dict[int, list[Any]]) -> None:
    """The run's results as Dask arrays chunked by particle, each chunk assembled on a worker from the
    pieces that hold its particles."""
    S = plan.slots
    shapes = {"position": ((S, 3), np.float64), "status": ((), np.int8), "end_time": ((), np.float64)}
    if plan.velocity:
        shapes["velocity"] = ((S, 3), np.float64)
    if plan.jacobian:
        shapes["jacobian"] = ((S, 3, 3), np.float64)
    if plan.variational:
        shapes["F"] = ((3, 3), np.float64)
    bounds = [(lo, min(N, lo + plan.chunk)) for lo in range(0, N, plan.chunk)]
    held = PerChunk([tuple(pieces.get(chunk, [])) for chunk in range(len(bounds))])
    parts = map_chunks(steps.assembled, PerChunk(bounds), plan, tuple(shapes), held, name="particles-assemble")
    sizes = (tuple(hi - lo for lo, hi in bounds),)
    names = [f"particles-{key}-{parts[0].key}" for key in shapes]
    arrays = dict(zip(shapes, stack_chunks(parts, sizes, list(shapes.values()), names), strict=True))
    run.position, run.status, run.end_time = arrays["position"], arrays["status"], arrays["end_time"]
    run.velocity = arrays.get("velocity")
    run.jacobian = arrays.get("jacobian")
    run.F = arrays.get("F")
