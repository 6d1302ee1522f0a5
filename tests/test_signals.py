"""A job stopped by SIGINT, SIGTERM or SIGHUP cleans up before it exits: no partial store (not even
one re-created by tasks still in flight), no input snapshot, the earlier result as it was, exit code
128 + the signal (issue 23, row 11)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_run import base_config, write_config

import vdbflow
from vdbflow import synthetic

# a worker preload: every chunk written into a partial store waits 0.3 s first, so that writes are in
# flight when the job is stopped; the first one done creates the marker file
SLOW_WRITES = """
import os
import time

import zarr.storage._local as local

_put = getattr(local, "unslowed_put", local._put)  # a preload may run twice in one process
local.unslowed_put = _put


def slow_put(path, *args, **kwargs):
    chunk = ".partial-" in str(path) and not os.path.basename(str(path)).startswith(".")
    if chunk:
        time.sleep(0.3)  # before the write: a task stopped now still writes when it wakes
    out = _put(path, *args, **kwargs)
    if chunk:
        open({marker!r}, "a").close()
    return out


local._put = slow_put
"""


def _job(tmp_path: Path) -> Path:
    vol = synthetic.flow_volume(synthetic.make_field("taylor_green"), 32, 2 * np.pi, np.dtype("float32"), 0.2, 0.5)
    vdbflow.save(tmp_path / "input.nvdb", {"velocity": vol})
    cfg = base_config(tmp_path)
    cfg["volume"] = {"path": str(tmp_path / "input.nvdb"), "snapshot": True}
    cfg["points"] = {"kind": "random", "count": 400_000, "chunk": 5_000, "seed": 1}
    cfg["sampling"] = {"mode": "linear", "outputs": ["value", "jacobian"]}
    return write_config(tmp_path / "job.yaml", cfg)


def _stop_mid_write(tmp_path: Path, sig: int) -> tuple[int, str]:
    marker = tmp_path / "mid-write"
    preload = tmp_path / "slow_writes.py"
    preload.write_text(SLOW_WRITES.format(marker=str(marker)))
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", str(_job(tmp_path))],
        cwd=tmp_path,
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
            assert time.monotonic() < deadline, "no chunk of the result was written within 120 s"
            time.sleep(0.05)
        assert list(tmp_path.glob(".result.zarr.partial-*")), "a chunk was written, but there is no partial store"
        os.kill(proc.pid, sig)  # the job's own process only, as `timeout` and `kill` do
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, " ".join(err.split())


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_job_leaves_nothing_and_nothing_comes_back(tmp_path, sig):
    code, err = _stop_mid_write(tmp_path, sig)
    name = signal.Signals(sig).name
    assert code == 128 + sig, err
    assert f"by {name}: no result was published" in err
    time.sleep(2.0)  # tasks that were still writing would have re-created the partial store by now
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["input.nvdb", "job.yaml", "mid-write", "slow_writes.py"], left


def test_signals_raise_stopped_once_and_are_restored(capfd):
    from vdbflow.jobs.cli.main import Stopped, _stop_on_signals

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stopped) as caught, _stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler raises here
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # a second one while cleaning up is only reported
            time.sleep(0.1)
    assert caught.value.signum == signal.SIGTERM and isinstance(caught.value, KeyboardInterrupt)
    assert "SIGTERM again: still cleaning up" in capfd.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_while_the_result_is_published_is_deferred():
    """Found by the fault campaign: SIGHUP just after publishing made the job say "no result was
    published" (exit 129) about the result it had just published."""
    from vdbflow.jobs.cli.main import _stop_on_signals

    with _stop_on_signals() as guard:
        guard.publishing.set()  # what run_job does right before it moves the result into place
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.2)  # the handler runs here, and records the signal instead of raising
    assert guard.deferred == signal.SIGHUP


def test_run_job_sets_publishing_right_before_publishing(tmp_path, monkeypatch):
    import threading

    from vdbflow.jobs import runner
    from vdbflow.jobs.config.load import load_config

    seen = []
    real_publish = runner.publish
    monkeypatch.setattr(runner, "publish", lambda *a: (seen.append(event.is_set()), real_publish(*a)))
    event = threading.Event()
    cfg = load_config(data=base_config(tmp_path))
    runner.run_job(cfg, progress=False, publishing=event)
    assert seen == [True] and (tmp_path / "result.zarr").is_dir()


# -- issue 40, row 10: a signal while the workers start ----------------------------------------------------

SLOW_START = """
import time

open({marker!r}, "a").close()
time.sleep(4)  # the worker is still starting when the job is stopped
"""


@pytest.mark.slow
def test_a_signal_while_the_workers_start_is_one_line_and_its_exit_code(tmp_path):
    marker = tmp_path / "starting"
    preload = tmp_path / "slow_start.py"
    preload.write_text(SLOW_START.format(marker=str(marker)))
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)])}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vdbflow.jobs.cli.main",
            "run",
            str(write_config(tmp_path / "job.yaml", base_config(tmp_path))),
        ],
        cwd=tmp_path,
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
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "by SIGTERM: no result was published" in " ".join(err.split()), err
    assert "Traceback" not in err and "AssertionError" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml", "slow_start.py", "starting"]
