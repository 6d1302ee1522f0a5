"""A running job's progress and timing: the steps of its graph by task key (:data:`STEPS`,
:func:`step_of`), worker compute time by step from Dask's task stream (:func:`worker_time_by_step`),
and the rich progress bar drawn from Dask's scheduler feed (:class:`DaskRichBar`).
"""

from __future__ import annotations

from typing import Any

from vdbflow.distribution import keys
from vdbflow.jobs.chunks import CHUNK_KEY, TALLY_KEY
from vdbflow.jobs.particles import ADVECT_KEY
from vdbflow.jobs.points import POINTS_KEY

# steps of a job's graph, by the prefix of their task keys (dask.utils.key_split): vdbflow's own prefixes
# are constants of the modules that make the keys; the others are Dask's and xarray's
STEPS = {
    "points": (
        POINTS_KEY,
        "from-zarr",
        "open_dataset",
        "original-array",
        "getter",
        "read_csv",
        "read_parquet",
        "rechunk",
    ),
    "routing": (keys.ROUTE,),
    "sampling": (keys.SAMPLE, keys.REORDER, *keys.OUTPUTS.values(), keys.DERIVED, "getitem"),
    "writing": ("store-map", "store", "to_zarr", "to_netcdf", "finalize", "_finalize_store"),
    "checks": ("block_error", TALLY_KEY),  # the analytic check, non-finite points, the edge of the data
    "advection": (ADVECT_KEY,),
    "chunk": (CHUNK_KEY,),  # one-pass chunk tasks: the job replaces this by the phases they measured
}


def step_of(key: Any) -> str:
    """The job step a task belongs to (derived quantities and anything else: ``derived``)."""
    from dask.utils import key_split

    prefix = key_split(key)
    if prefix.endswith("-store-map"):  # store tasks fused with what feeds them (getitem, concatenate, ...)
        return "writing"
    for step, prefixes in STEPS.items():
        if any(prefix == p or prefix.startswith(p + "-") for p in prefixes):
            return step
    return "derived"


def worker_time_by_step(records: list[dict]) -> dict[str, float]:
    """Seconds of worker compute per step, from Dask's task stream (``startstops`` of each task)."""
    out = dict.fromkeys((*STEPS, "derived"), 0.0)
    for r in records:
        step = step_of(r["key"])
        out[step] += sum(s["stop"] - s["start"] for s in r.get("startstops", ()) if s.get("action") == "compute")
    return out


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
