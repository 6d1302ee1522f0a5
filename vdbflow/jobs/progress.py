"""A running job's progress and timing: the step of each task (:func:`step_of`: vdbflow's own key
prefixes, else the graph of the job's collections that holds it, :func:`steps_of_graphs`), worker compute
time by step from Dask's task stream (:func:`worker_time_by_step`), and the rich progress bar drawn from
Dask's scheduler feed (:class:`DaskRichBar`).  Only Dask's public API is read: the collection protocol,
``distributed.get_task_stream`` and ``distributed.diagnostics.progressbar``; no Dask-internal key names.
"""

from __future__ import annotations

from typing import Any

from vdbflow.distribution import keys
from vdbflow.jobs.chunks import CHUNK_KEY, TALLY_KEY
from vdbflow.jobs.executors import REDUCE_KEY
from vdbflow.jobs.particles import ADVECT_KEY
from vdbflow.jobs.points import POINTS_KEY
from vdbflow.jobs.publish.writers.zarr_store import INDEX_KEY

# vdbflow's own task-key prefixes (dask.utils.key_split), constants of the modules that make the keys: a task
# with one of them belongs to its step whichever graph holds it
STEPS = {
    "points": (POINTS_KEY,),
    "routing": (keys.ROUTE,),
    "sampling": (keys.SAMPLE, keys.REORDER, *keys.OUTPUTS.values(), keys.DERIVED),
    "writing": (INDEX_KEY,),
    "checks": (TALLY_KEY,),  # non-finite points, the edge of the data
    "advection": (ADVECT_KEY,),
    "chunk": (CHUNK_KEY,),  # one-pass chunk tasks: the job replaces this by the phases they measured
    "reduction": (REDUCE_KEY,),  # a reduce: job's chunk tasks (sampling and statistics in one pass)
}
# every other task belongs to the step of the first collection whose graph holds it (steps_of_graphs):
# the points, then the samples (unprefixed tasks there: "derived", the arithmetic xarray adds), then the
# writer's tasks and the summary's checks
GRAPH_STEPS = ("points", "samples", "writing", "checks")


def _own_step(key: Any) -> str | None:
    from dask.utils import key_split

    prefix = key_split(key)
    for step, prefixes in STEPS.items():
        if any(prefix == p or prefix.startswith(p + "-") for p in prefixes):
            return step
    return None


def step_of(key: Any, steps: dict[Any, str] | None = None) -> str:
    """The job step a task belongs to: by vdbflow's own key prefixes (:data:`STEPS`), else by the graph
    that holds it (``steps``, from :func:`steps_of_graphs`), else ``derived``."""
    own = _own_step(key)
    if own is not None:
        return own
    return (steps or {}).get(key, "derived")


def steps_of_graphs(collections: dict[str, Any]) -> dict[Any, str]:
    """The step of each task of a job's Dask collections (name of :data:`GRAPH_STEPS` -> a collection or
    a list of them), read from their graphs (Dask's collection protocol, ``__dask_graph__``): a task
    belongs to the first collection listed that holds it; the samples' own tasks are ``derived``."""
    out: dict[Any, str] = {}
    for name in GRAPH_STEPS:
        items = collections.get(name)
        for collection in items if isinstance(items, (list, tuple)) else (items,):
            graph = getattr(collection, "__dask_graph__", lambda: None)()
            step = "derived" if name == "samples" else name
            for key in graph or ():
                out.setdefault(key, step)
    return out


def worker_time_by_step(records: list[dict], steps: dict[Any, str] | None = None) -> dict[str, float]:
    """Seconds of worker compute per step, from Dask's task stream (``startstops`` of each task);
    ``steps``: :func:`steps_of_graphs` of the job's collections."""
    out = dict.fromkeys((*STEPS, "derived"), 0.0)
    for r in records:
        step = step_of(r["key"], steps)
        out[step] += sum(s["stop"] - s["start"] for s in r.get("startstops", ()) if s.get("action") == "compute")
    return out


def recomputed(records: list[dict]) -> tuple[int, float]:
    """Tasks Dask's task stream shows computed more than once (a lost worker's results computed again
    elsewhere), and the worker seconds of every run but each task's last."""
    runs: dict[Any, list[float]] = {}
    for r in records:
        seconds = sum(s["stop"] - s["start"] for s in r.get("startstops", ()) if s.get("action") == "compute")
        runs.setdefault(r["key"], []).append(seconds)
    again = [times for times in runs.values() if len(times) > 1]
    return len(again), float(sum(sum(times[:-1]) for times in again))


class DaskRichBar:
    """Dask's scheduler progress feed for a set of futures, drawn with a rich progress bar."""

    def __init__(self, futures: list, client: Any, console: Any) -> None:
        from distributed.diagnostics.progressbar import TextProgressBar
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(
            TextColumn("sampling + writing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("tasks"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        task = progress.add_task("run", total=None)

        class Bar(TextProgressBar):
            def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:  # noqa: A002 - Dask's name
                progress.update(task, total=all, completed=all - remaining)

            def _draw_stop(self, **kwargs: Any) -> None:
                pass

        with progress:
            Bar(futures, scheduler=client.scheduler.address, interval="200ms", start=True)
