"""SIGTERM while the cluster's workers start prints the one "stopped" line and exits 143 (issue 49 row 20):
nothing after it - not asyncio's "Task exception was never retrieved" of the worker starts the stop cut
short ("Nanny failed to start", about half of the stops at the worker's first moment before the fix),
nor the resource tracker's warning of their semaphores."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest
from test_run import base_config, write_config

from vdbflow.jobs.cli import main as cli

SLOW_START = """
import time

open({marker!r}, "a").close()
time.sleep(4)  # the worker is still starting when the job is stopped
"""


def test_asyncio_s_unretrieved_start_failures_are_dropped_after_a_stop(caplog):
    """The record asyncio logs when a failed task is collected unawaited, through the filter a stop adds."""

    async def start() -> None:
        raise RuntimeError("Nanny failed to start.")

    def collect_one_unretrieved() -> None:
        loop = asyncio.new_event_loop()
        try:
            task = loop.create_task(start())
            loop.run_until_complete(asyncio.sleep(0))
            assert task.done()
        finally:
            loop.close()
        del task
        gc.collect()

    asyncio_log = logging.getLogger("asyncio")
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        collect_one_unretrieved()
        assert any("exception was never retrieved" in r.getMessage() for r in caplog.records)  # the oracle
        caplog.clear()
        asyncio_log.addFilter(cli._unretrieved)
        try:
            collect_one_unretrieved()
            logging.getLogger("asyncio").error("another asyncio error")
        finally:
            asyncio_log.removeFilter(cli._unretrieved)
    assert [r.getMessage() for r in caplog.records] == ["another asyncio error"]


def _stop_at_start(tmp_path, n: int) -> tuple[int, str]:
    folder = tmp_path / f"run{n}"
    folder.mkdir()
    marker = folder / "starting"
    preload = folder / "slow_start.py"
    preload.write_text(SLOW_START.format(marker=str(marker)))
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)])}
    config = write_config(folder / "job.yaml", base_config(folder))
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", str(config)],
        cwd=folder,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, "the run ended before it was stopped: " + proc.stderr.read()
            assert time.monotonic() < deadline, "no worker started within 120 s"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGTERM)  # at the worker's first moment
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert sorted(p.name for p in folder.iterdir()) == ["job.yaml", "slow_start.py", "starting"]
    return proc.returncode, err


@pytest.mark.slow
def test_sigterm_at_the_workers_first_moment_is_one_line_every_time(tmp_path):
    for n in range(4):
        code, err = _stop_at_start(tmp_path, n)
        assert code == 128 + signal.SIGTERM, err
        assert err.strip().splitlines() == ["stopped: by SIGTERM: no result was published"], err
