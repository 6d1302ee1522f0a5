"""Whether a partition plan fits the workers' memory, checked on the client before anything runs.

A worker holds its partitions (own leaves and halo leaves, values and topology), the chunks of
points and results in flight, and the interpreter with Dask itself.  Dask pauses a worker when its
process memory passes ``distributed.worker.memory.pause`` of its ``memory_limit`` (0.8 by default)
and restarts it at ``terminate`` (0.95): a worker whose partitions and working set do not fit under
the first would stop, or be killed again and again.  So a plan is refused up front, with the
numbers, when a worker's share plus :data:`RESERVE` does not fit.  (Above ``spill``, 0.7, Dask writes
the least recently used results to disk; the partitions, read by every wave, are the most recent.)

Shapes and units: bytes everywhere; a plan's partitions are placed round-robin over the workers
sorted by address (partition p on worker p mod W), as :func:`~vdbflow.distribution.partitions.build_partitions`
places them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.distribution.plan import PartitionPlan
from vdbflow.errors import DistributionError

INTERPRETER = 128 << 20  # a worker process with vdbflow, NumPy and Dask imported (measured: 62 MiB)
# bytes a point in flight costs a worker (points, routed copy, order, results, assembly, transfers): measured
# 2026-12-06 as peak less partition on the 3.39 GB volume, 16M points in 1M-point chunks: 0.57-0.61 GiB a worker
POINT_WORKING_SET = 256
# per worker, beside its partitions: the interpreter and two waves of 1M-point chunks in flight
RESERVE = INTERPRETER + 2 * (1 << 20) * POINT_WORKING_SET
TOPOLOGY_BYTES_PER_LEAF = 160  # origin, mask, active-count prefix and hash-table share of one leaf (measured: 147)
_FRACTIONS = ("pause", "terminate")


def memory_fraction() -> float:
    """The fraction of a worker's ``memory_limit`` its process may fill before Dask stops it (pauses or
    restarts it): the first of those thresholds that is set."""
    import dask
    import distributed  # noqa: F401 - registers its defaults in dask.config (the thresholds below)

    for name in _FRACTIONS:
        value = dask.config.get(f"distributed.worker.memory.{name}", None)
        if value not in (None, False):
            return float(value)
    return 1.0


def partition_bytes(plan: PartitionPlan, value_bytes_per_leaf: int) -> np.ndarray:
    """(P,) bytes each partition holds: its own and halo leaves' values and topology."""
    per_leaf = value_bytes_per_leaf + TOPOLOGY_BYTES_PER_LEAF
    return np.array([(len(o) + len(h)) * per_leaf for o, h in zip(plan.owned, plan.halo, strict=True)], np.int64)


@dataclass(frozen=True)
class WorkerShare:
    """What one worker is asked to hold, and what it can."""

    address: str
    partitions: tuple[int, ...]
    needed: int  # bytes of its partitions
    limit: int  # its memory_limit (0: none)
    available: int  # limit x memory_fraction - RESERVE (what its partitions may fill)


def shares(plan: PartitionPlan, value_bytes_per_leaf: int, workers: dict[str, Any]) -> list[WorkerShare]:
    """Each worker's share of the plan: ``workers`` is the scheduler's ``scheduler_info()["workers"]``."""
    addresses = sorted(workers)
    sizes = partition_bytes(plan, value_bytes_per_leaf)
    fraction = memory_fraction()
    out = []
    for w, address in enumerate(addresses):
        mine = tuple(range(w, plan.partitions, len(addresses)))
        limit = int(workers[address].get("memory_limit") or 0)
        available = int(limit * fraction) - RESERVE if limit else 0
        out.append(WorkerShare(address, mine, int(sizes[list(mine)].sum()) if mine else 0, limit, available))
    return out


def spill_threshold(workers: dict[str, Any], address: str) -> float:
    """The fraction of ``address``'s memory limit above which Dask spills its data to disk: the lower of
    its ``target`` (managed memory) and ``spill`` (process memory) thresholds, as this client's config
    says (workers started with another config may differ); 1.0 when both are off."""
    import dask
    import distributed  # noqa: F401 - registers its defaults in dask.config

    found = [dask.config.get(f"distributed.worker.memory.{n}", None) for n in ("target", "spill")]
    set_ = [float(v) for v in found if v not in (None, False)]
    return min(set_) if set_ else 1.0


def needs_no_spilling(share: WorkerShare, workers: dict[str, Any]) -> bool:
    """Whether a worker's partitions and working set pass the threshold where Dask would spill them to
    disk (and read them back for every wave that samples them)."""
    return bool(share.limit) and share.needed + RESERVE > spill_threshold(workers, share.address) * share.limit


def keep_in_memory(dask_worker: Any = None) -> bool:
    """Run on a worker (``client.run``): turn off Dask's spilling to disk there, so that a partition read by
    every wave is never written out and read back (on the 3.39 GB volume at 0.9 x the file a worker,
    spilling made sampling 6.6x slower).  Pausing and restarting at ``pause`` / ``terminate`` stay on.
    Returns whether spilling was on."""
    manager = dask_worker.memory_manager
    was_on = bool(manager.memory_spill_fraction or manager.memory_target_fraction)
    manager.memory_spill_fraction = False
    manager.memory_target_fraction = False
    if hasattr(manager.data, "n"):  # the spill buffer's own eviction threshold (bytes of managed memory)
        manager.data.n = float("inf")
    return was_on


def _gib(n: float) -> str:
    """Bytes in GiB, or MiB below one GiB."""
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.1f} MiB"


def check_fit(plan: PartitionPlan, value_bytes_per_leaf: int, workers: dict[str, Any]) -> list[WorkerShare]:
    """The workers' shares of ``plan``; a :class:`DistributionError` naming the numbers when a worker
    with a ``memory_limit`` cannot hold its share (workers without a limit are not checked)."""
    found = shares(plan, value_bytes_per_leaf, workers)
    over = [s for s in found if s.limit and s.needed > s.available]
    if over:
        s = max(over, key=lambda s: s.needed - s.available)
        total = int(partition_bytes(plan, value_bytes_per_leaf).sum())
        per_worker = max(1, s.available)
        fits = max(len(found) + 1, -(-total // per_worker)) if s.available > 0 else None
        raise DistributionError(
            f"expected partitions that fit the workers' memory, found worker {s.address} asked to hold "
            f"{len(s.partitions)} partition(s) of {_gib(s.needed)} (own and halo leaves) where its memory_limit "
            f"of {_gib(s.limit)} leaves {_gib(max(0, s.available))} for data (x {memory_fraction():g}, Dask's "
            f"pause threshold, less {_gib(RESERVE)} for the interpreter and the chunks in flight); "
            f"{len(over)} of {len(found)} worker(s) are over. The volume's partitions need {_gib(total)} in all"
            + (f": about {fits} workers of this size would hold them" if fits else "")
            + ", or give the workers a larger memory_limit"
        )
    return found
