"""Where partition tasks run: a scheduler plugin that keeps every task reading a partition on the
worker that holds the partition, so that points move to partitions and partitions never move.

A graph's own placement hints cannot carry this.  Dask's array optimisation flattens a collection's
layers into one dict and drops their annotations (``dask.annotate(workers=...)``), and left to its
data-size objective the scheduler runs a sampling task wherever its larger input lives: with pieces
of points as large as a partition, partitions get copied between workers (and work stealing moves
loosely restricted tasks anyway).  So the restriction is set on the scheduler when a graph arrives,
from where the partition is at that moment: a task that depends on exactly one partition key
(:data:`PARTITION_PREFIX`) may run only on the worker(s) holding it.

Likewise the tasks that read a whole wave (:data:`WAVE_PREFIXES`) run where it was computed, as soon
as it is: the selections of each partition's points and the assembly run where the wave was routed,
and the first readers of the assembled output chunks (selections, reductions, store writes) where it
was assembled.  So only a piece's points and its results travel, never a whole wave.  Dask would
otherwise queue such readers as root tasks (many small tasks that depend on fewer than five tasks in
all, e.g. the selections of four routings) on whichever worker is free.

When a worker leaves, its partitions and routings are rebuilt elsewhere from their lineage, and the
tasks restricted to it are freed to run anywhere.
"""

from __future__ import annotations

import warnings
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from vdbflow.distribution import keys

PARTITION_PREFIX = f"{keys.PARTITION}-"
# tasks whose output is a whole wave: routed points (forward and reverse), assembled results, point adjoints
WAVE_PREFIXES = (f"{keys.ROUTE}-", f"{keys.REORDER}-", f"{keys.VJP_POINTS}-")


def _partition_of(ts: Any) -> Any:
    """The one partition task ``ts`` depends on, or None (none, or several)."""
    found = None
    for dts in ts.dependencies:
        if isinstance(dts.key, str) and dts.key.startswith(PARTITION_PREFIX):
            if found is not None:
                return None
            found = dts
    return found


class PartitionPlacement(SchedulerPlugin):
    """Restricts each task that reads one partition to the workers holding that partition, and
    each task that reads a whole wave to the worker that computed it."""

    name = "vdbflow-partition-placement"
    idempotent = True  # one instance per scheduler, however many volumes are distributed

    def __init__(self) -> None:
        self.restricted: set = set()  # keys of the tasks this plugin restricted, until forgotten
        self.scheduler: Any = None

    def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def update_graph(self, scheduler: Any, *, tasks: Any = (), **kwargs: Any) -> None:
        for key in tasks:
            ts = scheduler.tasks.get(key)
            if ts is None or ts.state not in ("released", "waiting"):
                continue
            partition = _partition_of(ts)
            if partition is None or not partition.who_has:
                continue  # not a partition task, or its partition is being rebuilt: the scheduler decides
            self._restrict(ts, partition)

    def _restrict(self, ts: Any, source: Any) -> None:
        ts.worker_restrictions = {ws.address for ws in source.who_has}
        ts.loose_restrictions = False
        self.restricted.add(ts.key)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "forgotten":
            self.restricted.discard(key)
        elif finish == "memory" and isinstance(key, str) and key.startswith(WAVE_PREFIXES):
            # called before the scheduler places the dependents that just became ready
            ts = self.scheduler.tasks.get(key)
            if ts is not None and ts.who_has:
                for dts in ts.dependents:
                    if (
                        dts.state in ("waiting", "released")
                        and not dts.worker_restrictions
                        and _partition_of(dts) is None
                    ):
                        self._restrict(dts, ts)

    def remove_worker(self, scheduler: Any, worker: str, *, stimulus_id: str, **kwargs: Any) -> None:
        runnable = {}
        for key in list(self.restricted):
            ts = scheduler.tasks.get(key)
            if ts is None:
                self.restricted.discard(key)
                continue
            if ts.worker_restrictions and worker in ts.worker_restrictions:
                ts.worker_restrictions = (ts.worker_restrictions - {worker}) or None
                if ts.worker_restrictions is None:
                    self.restricted.discard(key)
                if ts in scheduler.unrunnable and scheduler.valid_workers(ts) is None:
                    runnable[key] = "processing"
        if runnable:
            scheduler.transitions(runnable, stimulus_id)


def register(client: Any) -> bool:
    """Install :class:`PartitionPlacement` on ``client``'s scheduler (once).  False, with a warning,
    where the scheduler cannot load it (vdbflow not installed beside the scheduler)."""
    try:
        client.register_plugin(PartitionPlacement())
    except Exception as exc:  # the scheduler could not unpickle or start it
        warnings.warn(
            f"could not install vdbflow's partition placement on the scheduler ({exc!r}): sampling tasks "
            "are placed by Dask alone, and partitions may be copied between workers",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True
