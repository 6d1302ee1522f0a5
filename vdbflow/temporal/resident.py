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

import operator
from collections import defaultdict
from typing import Any

import numpy as np

from vdbflow.errors import SamplingError
from vdbflow.ops.sampling import STENCIL_RADIUS
from vdbflow.temporal import particle_tasks as steps
from vdbflow.temporal.integration import saved_bytes_per_step

CHUNK_BYTES = 1 << 27  # the saved results of one output chunk of particles (128 MiB)


def output_chunk(particles: int, slots: int, velocity: bool, jacobian: bool) -> int:
    """Particles per output chunk: their saved results fill about ``CHUNK_BYTES``."""
    per_particle = slots * saved_bytes_per_step(velocity, jacobian)
    return int(max(1, min(particles, CHUNK_BYTES // per_particle)))


def advect_resident(run: Any, x: np.ndarray) -> None:
    """Integrate the seeds ``x`` (N, 3) of ``run`` (a :class:`~vdbflow.temporal.integration.Run`
    through a DistributedSource) with resident particles; sets the run's results as lazy Dask arrays
    (``position``, ``velocity``, ``jacobian``, ``status``, ``end_time``, ``F``) and its statistics
    (``evaluations``, ``rounds``, ``migrations``, ``stage_by_stage_steps``)."""
    dvol, src = run.src.dvol, run.src
    client, P = dvol.client, dvol.plan.partitions
    N = len(x)
    plan = steps.ParticlePlan(
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
    )
    if plan.reach < 0:
        raise SamplingError(
            f"expected a halo of at least {STENCIL_RADIUS[src.mode]} voxels to advect with mode {src.mode!r} (its "
            f"stencil's reach), got a volume distributed with halo={dvol.halo}: distribute(..., halo=8) keeps most "
            "steps inside their partition"
        )
    seeds = {
        "id": np.arange(N, dtype=np.int64),
        "step": np.zeros(N, np.int64),
        "x": x,
        "sampled": np.zeros(N, np.int64),
    }
    if run.variational:
        seeds["F"] = np.broadcast_to(np.eye(3), (N, 3, 3)).copy()
    inbox: list[list[Any]] = [[] for _ in range(P)]
    for q, batch in enumerate(split_by_owner(plan, seeds)):
        if batch is not None:
            inbox[q].append(batch)  # the seeds travel inside the first round's tasks (their lineage)
    pieces: dict[int, list[Any]] = defaultdict(list)
    rounds = migrations = stepped = evaluations = local = 0
    while any(inbox):
        rounds += 1
        calls = {
            p: client.submit(steps.advance, dvol.partitions[p], plan, p, *inbox[p], pure=False)
            for p in range(P)
            if inbox[p]
        }
        inbox = [[] for _ in range(P)]
        summaries = gather_summaries(client, calls)
        fallback = []
        for p, summary in summaries.items():
            for q in np.flatnonzero(summary["to"]):
                inbox[q].append(client.submit(steps.outbox_of, calls[p], int(q)))
                migrations += int(summary["to"][q])
            if summary["fallback"]:
                fallback.append(client.submit(steps.fallback_of, calls[p]))
            for chunk in summary["chunks"]:
                pieces[chunk].append(client.submit(steps.piece_of, calls[p], chunk))
            evaluations = max(evaluations, summary["max_sampled"])
            local += summary["local_steps"]
        if fallback:
            batch = steps.concat(client.gather(fallback), plan.variational)
            stepped += len(batch["id"])
            # stage by stage through the whole distributed volume, as one process steps them
            going, rows, retired, _ = steps.step_stage_by_stage(run, batch)
            if len(retired["id"]):
                evaluations = max(evaluations, int(retired["sampled"].max()))
            for q, part in enumerate(split_by_owner(plan, going)):
                if part is not None:
                    inbox[q].append(client.submit(steps.held, part, pure=False))
            for chunk, piece in steps.chunk_pieces(rows, retired, plan.chunk).items():
                pieces[chunk].append(client.submit(steps.held, piece, pure=False))
        del calls
    run.rounds, run.migrations = rounds, migrations
    run.stage_by_stage_steps, run.client_steps = local + stepped, stepped
    run.evaluations = int(evaluations)
    lazy_results(run, plan, N, pieces)


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
    import dask
    import dask.array as da

    S = plan.slots
    shapes = {"position": ((S, 3), np.float64), "status": ((), np.int8), "end_time": ((), np.float64)}
    if plan.velocity:
        shapes["velocity"] = ((S, 3), np.float64)
    if plan.jacobian:
        shapes["jacobian"] = ((S, 3, 3), np.float64)
    if plan.variational:
        shapes["F"] = ((3, 3), np.float64)
    columns: dict[str, list] = {key: [] for key in shapes}
    for chunk, lo in enumerate(range(0, N, plan.chunk)):
        hi = min(N, lo + plan.chunk)
        part = dask.delayed(steps.assemble, pure=True)(lo, hi, plan, *pieces.get(chunk, []))
        for key, (shape, dtype) in shapes.items():
            item = dask.delayed(operator.getitem, pure=True)(part, key)
            columns[key].append(da.from_delayed(item, shape=(hi - lo, *shape), dtype=dtype))
    arrays = {key: da.concatenate(parts, axis=0) for key, parts in columns.items()}
    run.position, run.status, run.end_time = arrays["position"], arrays["status"], arrays["end_time"]
    run.velocity = arrays.get("velocity")
    run.jacobian = arrays.get("jacobian")
    run.F = arrays.get("F")
