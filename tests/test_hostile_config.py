"""Hostile and faulty job configs and API arguments (issue 23, rows 12, 13, 14, 15, 16): every one
refused up front with vdbflow's own error naming what was expected (the CLI: exit 2 naming the key)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from test_run import base_config, invoke, write_config

import vdbflow
from vdbflow.errors import SamplingError, TimeError, VolumeError
from vdbflow.jobs.config.load import load_config
from vdbflow.synthetic import steady, unsteady
from vdbflow.temporal import particles, steps

ADVECT = {"t1": 1.0, "dt": 0.1}
MILLION = {"kind": "random", "count": 1_000_000, "chunk": 250_000, "seed": 0}


@pytest.mark.parametrize(
    "sections, setting, key, found",
    [
        ({}, "points.seed=-1", "points.seed", "greater than or equal to 0"),
        ({}, "points.seed=4294967296", "points.seed", "less than or equal to 4294967295"),
        ({}, "volume.synthetic.extent=1e300", "volume.synthetic.extent", "less than or equal to 1000000000000"),
        ({}, "volume.synthetic.extent=.nan", "volume.synthetic.extent", "finite number"),
        ({}, "volume.synthetic.extent=1e-300", "volume.synthetic.extent", "greater than or equal to 0.000000001"),
        ({}, "volume.synthetic.shell=[0.1, .inf]", "volume.synthetic.shell", "finite, got [0.1, inf]"),
        (
            {},
            "volume.synthetic.params={matrix: [[.nan, 0, 0], [0, 0, 0], [0, 0, 0]]}",
            "volume.synthetic.params",
            "expected matrix finite, of magnitude at most 1e+12, got nan",
        ),
        (
            {},
            "volume.synthetic={field: taylor_green, params: {amplitude: .nan}}",
            "volume.synthetic.params",
            "expected amplitude finite",
        ),
        ({}, "volume.synthetic.params={matrix: 1.0e+300}", "volume.synthetic.params", "got 1e+300"),
        ({"points": MILLION}, "output.chunk=1", "output.chunk", "1,000,000 chunks (1,000,000 points in chunks of 1)"),
        ({}, "points.count=1000000000", "points.chunk", "200,000 chunks (1,000,000,000 points in chunks of 5,000)"),
        ({}, "cluster.memory_limit=-1", "cluster.memory_limit", "at least 256 MiB per worker"),
        ({}, "cluster.memory_limit=abc", "cluster.memory_limit", "got 'abc'"),
        ({}, "cluster.memory_limit=5", "cluster.memory_limit", "got '5'"),
        ({}, "cluster.memory_limit=1e400", "cluster.memory_limit", "got '1e400'"),
        ({"advect": ADVECT}, "advect.dt=5e-324", "advect.dt", "more than a float can count"),
        ({"advect": ADVECT}, "advect.t1=1e308", "advect.dt", "more than a float can count"),
        ({"advect": ADVECT}, "advect.dt=1e-8", "advect.dt", "at most 10,000,000 steps"),
    ],
)
def test_bad_values_are_refused_by_a_dry_run_naming_the_key(tmp_path, sections, setting, key, found):
    cfg = write_config(tmp_path / "job.yaml", base_config(tmp_path, **sections))
    for extra in (("--dry-run",), ()):
        result = invoke("run", str(cfg), "--set", setting, *extra)
        assert result.exit_code == 2, result.output
        assert f"{key} (from --set)" in result.output or f"{key} ({cfg}" in result.output, result.output
        assert found in result.output, result.output
    assert not (tmp_path / "result.zarr").exists()


def test_many_chunks_are_a_limit_and_the_plan_counts_their_cost(tmp_path):
    """output.chunk=1 planned "under 1 s" and ran for minutes: the plan counts each chunk's cost, and
    more than limits.max_chunks is refused unless forced (or the limit raised)."""
    cfg = write_config(tmp_path / "job.yaml", base_config(tmp_path, points=MILLION))
    result = invoke("run", str(cfg), "--set", "output.chunk=1", "--dry-run")
    assert result.exit_code == 2 and "more than limits.max_chunks (100,000)" in result.output, result.output
    assert "chunks of at least 10 points make fewer" in result.output
    result = invoke("run", str(cfg), "--set", "output.chunk=1", "--dry-run", "--force")
    assert result.exit_code == 0 and "allowed by --force" in result.output, result.output
    assert "under 1 s" not in result.output and "h of sampling" in result.output  # 1e6 chunks x 0.05 s: 13.9 h
    result = invoke("run", str(cfg), "--set", "output.chunk=100", "--set", "limits.max_chunks=10000", "--dry-run")
    assert result.exit_code == 0 and "min of sampling" in result.output, result.output  # 10,000 chunks: 8 min


@pytest.mark.parametrize("value", ["4GiB", "auto", "0.5", "4000000000", "512 MB"])
def test_memory_limits_dask_takes_are_accepted(tmp_path, value):
    spec = base_config(tmp_path)
    spec["cluster"]["memory_limit"] = value
    assert load_config(data=spec).cluster.memory_limit == value


def test_a_lattice_too_large_to_count_in_int64_is_refused(tmp_path):
    """2**21 cubed points wrapped to a negative count in NumPy (and passed the limits); counted exactly."""
    cfg = base_config(tmp_path, points={"kind": "grid", "shape": [2**21] * 3, "chunk": 2**27})
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)), "--dry-run")
    assert result.exit_code == 2, result.output
    assert "points.chunk" in result.output and "(9,223,372,036,854,775,808 points in chunks" in result.output
    path = write_config(tmp_path / "job.yaml", cfg)
    result = invoke("run", str(path), "--dry-run", "--set", "points.chunk=2000000000")
    assert result.exit_code == 2 and "points.chunk (from --set): Input should be less than or equal to" in result.output


def test_a_particle_job_whose_trajectories_exceed_memory_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(steps, "MAX_TRAJECTORY_BYTES", 1 << 30)
    cfg = base_config(
        tmp_path,
        points={"kind": "random", "count": 2000, "chunk": 1000, "seed": 1},
        advect={"t1": 1.0, "dt": 1e-6, "outputs": ["velocity"]},
    )
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)), "--dry-run")
    assert result.exit_code == 2, result.output
    assert (
        "advect.save_every" in result.output and "1,000 particles x 1,000,001 saved steps x 48 bytes" in result.output
    )
    assert "fit in 1.0 GiB" in result.output and "a smaller points.chunk" in result.output
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)), "--dry-run", "--set", "advect.save_every=100")
    assert result.exit_code == 0, result.output


FIELD = steady.taylor_green()
SEED = np.array([[1.0, 1.0, 1.0]])


@pytest.mark.parametrize(
    "kwargs, error, found",
    [
        ({"dt": 5e-324}, TimeError, "more than a float can count"),
        ({"dt": 1e-300}, TimeError, "at most 10,000,000 steps"),
        ({"dt": float("nan")}, TimeError, "finite time step dt > 0, got nan"),
        ({"dt": "a"}, TimeError, "real number for dt, got 'a'"),
        ({"t0": -1e308, "t1": 1e308, "dt": 1.0}, TimeError, "more than a float can count"),
        ({"t0": ["a"]}, TimeError, "real number for t0, got ['a']"),
        ({"save_every": float("nan")}, SamplingError, "save_every to be an integer >= 1, got nan"),
        ({"save_every": float("inf")}, SamplingError, "got inf"),
        ({"save_every": "a"}, SamplingError, "got 'a'"),
        ({"save_every": 2.5}, SamplingError, "got 2.5"),
        ({"save_every": True}, SamplingError, "got True"),
        ({"save_every": 0}, SamplingError, "got 0"),
    ],
)
def test_bad_advect_arguments_are_vdbflow_errors(kwargs, error, found):
    args = {"t0": 0.0, "t1": 1.0, "dt": 0.1, **kwargs}
    with pytest.raises(error) as err:
        vdbflow.advect(FIELD, SEED, args.pop("t0"), args.pop("t1"), args.pop("dt"), **args)
    assert found in str(err.value)


def test_ftle_with_a_denormal_step_is_a_time_error():
    with pytest.raises(TimeError, match="more than a float can count"):
        vdbflow.ftle(FIELD, SEED, 0.0, 1.0, dt=5e-324)


def test_saved_trajectories_beyond_memory_are_refused_before_allocating(monkeypatch):
    """200 seeds x 9,999,999 steps asked for 44.7 GiB; now the estimate is checked against the limit."""
    seeds = np.ones((200, 3))
    with pytest.raises(TimeError) as err:  # 240 GB with Jacobians: beyond half of any test machine
        vdbflow.advect(FIELD, seeds, 0.0, 9_999_999 * 0.1, 0.1, with_velocity=True, with_jacobian=True)
    message = str(err.value)
    assert "200 particles x 10,000,000 saved steps x 120 bytes = 223.5 GiB" in message
    assert "save_every" in message and "fewer seeds" in message
    monkeypatch.setattr(steps, "MAX_TRAJECTORY_BYTES", 10_000)
    with pytest.raises(TimeError, match="fit in 0.0 GiB .* 200 particles x 11 saved steps x 24 bytes"):
        vdbflow.advect(FIELD, seeds, 0.0, 1.0, 0.1)
    ds = vdbflow.advect(FIELD, seeds, 0.0, 1.0, 0.1, save_every=10)  # 2 saved steps: 9,600 bytes
    assert ds.position.shape == (200, 2, 3)
    assert 0 < particles.trajectory_bytes_limit() == 10_000


def test_gradient_field_refuses_a_distributed_volume_of_another_volume():
    distributed = pytest.importorskip("distributed")
    from vdbflow import synthetic

    vol = synthetic.flow_volume(synthetic.abc_flow(), resolution=16, dtype=np.float32)
    same_voxels = synthetic.flow_volume(synthetic.taylor_green(), resolution=16, dtype=np.float32)
    other_voxels = synthetic.flow_volume(synthetic.abc_flow(), 16, 2 * np.pi, np.float32, 0.2, 0.5)
    doubles = synthetic.flow_volume(synthetic.abc_flow(), resolution=16, dtype=np.float64)
    with (
        distributed.LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cl,
        distributed.Client(cl) as client,
    ):
        halo = vdbflow.ops.sampling.STENCIL_RADIUS["fd4"]
        with pytest.raises(VolumeError, match="got other values at .* entries, e.g. voxel"):
            vdbflow.gradient_field(vol, "fd4", distributed=vdbflow.distribute(same_voxels, client, 2, halo=halo))
        with pytest.raises(VolumeError, match="other active voxels"):
            vdbflow.gradient_field(vol, "fd4", distributed=vdbflow.distribute(other_voxels, client, 2, halo=halo))
        with pytest.raises(VolumeError, match="'vec3f'.*got a DistributedVolume of \\('velocity', 'vec3d'"):
            vdbflow.hessian_field(vol, "fd4", distributed=vdbflow.distribute(doubles, client, 2, halo=halo))
        with pytest.raises(VolumeError, match="got other values"):
            vdbflow.hessian_field(vol, "fd4", distributed=vdbflow.distribute(same_voxels, client, 2, halo=halo))
        mine = vdbflow.distribute(vol, client, 2, halo=halo)
        np.testing.assert_array_equal(
            vdbflow.gradient_field(vol, "fd4", distributed=mine).active_values(),
            vdbflow.gradient_field(vol, "fd4").active_values(),
        )


def test_a_failed_task_is_one_line_on_stderr_and_its_traceback_only_with_vv(tmp_path):
    """A series step in other units, found on a worker: stderr holds vdbflow's one error line, not
    Dask's multi-line "Compute Failed" report; -vv still shows it."""
    paths = unsteady.write_series(unsteady.double_gyre(), tmp_path / "s", [0.0, 0.5, 1.0], voxel_size=1 / 8, pad=2)
    bad = unsteady.field_volume(unsteady.double_gyre(), 0.5, 1 / 8, pad=2)
    bad.units = "km/h"
    bad.to_nvdb(paths[1])
    cfg = base_config(
        tmp_path,
        volume={"series": {"paths": str(tmp_path / "s" / "*.nvdb"), "times": [0.0, 0.5, 1.0]}},
        points={"kind": "line", "start": [0.5, 0.5, 0.0], "end": [1.5, 0.5, 0.0], "count": 20, "chunk": 10},
        advect={"t1": 1.0, "dt": 0.1},
        cluster={"kind": "local", "workers": 1, "dashboard": False},
    )
    path = write_config(tmp_path / "job.yaml", cfg)
    run = [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", str(path)]
    quiet = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 1, quiet.stderr
    assert quiet.stderr.strip().splitlines() == [
        f"error: expected step 1 (t=0.5, {paths[1]}) on the grid of step 0 (t=0, {paths[0]}): units 'm/s', "
        "got 'km/h' (steps are interpolated together)"
    ]
    loud = subprocess.run([*run, "-vv"], capture_output=True, text=True, timeout=300)
    assert loud.returncode == 1 and "Compute Failed" in loud.stderr


@pytest.mark.parametrize(
    "key", ["output.path", "volume.path", "points.path", "volume.synthetic.write", "volume.series.paths"]
)
def test_a_path_with_a_nul_byte_is_a_config_error_naming_the_key(tmp_path, key):
    """os functions raise a raw ValueError ("embedded null byte") on such a path, in the plan."""
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.config.model import ConfigError

    with pytest.raises(ConfigError, match=rf"{key.split('.')[-1]}.*expected a path without NUL bytes"):
        load_config(data=_nul_config(tmp_path, key))


def _nul_config(tmp_path, key: str) -> dict:
    nul = str(tmp_path / "a\0b.nvdb")
    cfg = {
        "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
        "points": {"kind": "random", "count": 100},
        "output": {"path": str(tmp_path / "r.zarr")},
    }
    if key == "output.path":
        cfg["output"]["path"] = nul
    elif key == "volume.path":
        cfg["volume"] = {"path": nul}
    elif key == "points.path":
        cfg["points"] = {"kind": "file", "path": nul}
    elif key == "volume.synthetic.write":
        cfg["volume"]["synthetic"]["write"] = nul
    else:
        cfg["volume"] = {"series": {"paths": nul}}
        cfg["advect"] = {"t1": 1.0, "dt": 0.1}
    return cfg


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_an_output_where_no_file_can_be_made_exits_2_before_anything_runs(tmp_path):
    """Found by the fault campaign: os.access() says /proc is writable to root (and read-only mounts
    to anyone with the mode bits), so the plan passed and the run failed when it wrote its partial."""
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.config.model import ConfigError
    from vdbflow.jobs.plan import plan_job

    cfg = load_config(
        data={
            "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
            "points": {"kind": "random", "count": 100},
            "output": {"path": "/proc/x.zarr"},
        }
    )
    with pytest.raises(ConfigError, match=r"output.path.*the directory /proc does not take new files"):
        plan_job(cfg, dry_run=True)


@pytest.mark.parametrize("fraction", ["0.001", "1e-300"])
def test_a_memory_fraction_too_small_for_a_worker_exits_2(tmp_path, fraction):
    """A fraction of the machine's memory below the per-worker minimum starts workers that die."""
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.config.model import ConfigError

    cfg = {
        "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
        "points": {"kind": "random", "count": 100},
        "cluster": {"kind": "local", "workers": 1, "memory_limit": fraction},
        "output": {"path": str(tmp_path / "r.zarr")},
    }
    with pytest.raises(ConfigError, match=r"cluster.memory_limit.*MiB per worker"):
        load_config(data=cfg)


def test_the_workers_filter_drops_task_tracebacks_and_closing_heartbeats_only():
    """What the job's own workers do not print (they share its stderr; -vv registers no filter):
    a failed task's traceback, and the heartbeat traceback of a worker whose scheduler closed first
    (the fault campaign found it on stderr of a job that failed to publish)."""
    import logging

    from vdbflow.jobs.clusters import _NoTaskTracebacks

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg, None, None)

    keep = _NoTaskTracebacks().filter
    assert not keep(record("Compute Failed\nKey: x\nException: ..."))
    assert not keep(record("Failed to communicate with scheduler during heartbeat."))
    assert keep(record("Worker exceeded 95% memory budget. Restarting..."))


def test_after_the_plugins_teardown_a_late_closing_heartbeat_is_still_dropped_and_task_errors_shown():
    """A heartbeat already on its way when the worker closes can fail after the plugin's teardown (a fresh-clone
    CI run's fault campaign found its traceback on the stderr of a job that failed to publish)."""
    import logging

    from vdbflow.jobs.clusters import QuietTaskErrors

    logger = logging.getLogger("distributed.worker")
    before = list(logger.filters)
    seen = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(str(record.msg))

    handler = Catch()
    logger.addHandler(handler)
    try:
        plugin = QuietTaskErrors()
        plugin.setup(None)
        plugin.teardown(None)
        plugin.setup(None)
        plugin.teardown(None)  # twice: one heartbeat filter, not two
        logger.error("Failed to communicate with scheduler during heartbeat.")
        logger.error("Compute Failed\nKey: x")
        assert seen == ["Compute Failed\nKey: x"]
        assert len(logger.filters) == len(before) + 1
    finally:
        logger.removeHandler(handler)
        logger.filters[:] = before


# -- issue 40, row 7 and "--set points.count=True": numbers YAML cannot hold, and booleans for numbers ----


@pytest.mark.parametrize("value", ["1e9999999", "-1e9999999", "1.5e99999999", "True", "false"])
@pytest.mark.parametrize("where", ["file", "set"])
def test_numbers_beyond_any_float_and_booleans_are_config_errors_naming_the_key(tmp_path, value, where):
    cfg = base_config(tmp_path)
    if where == "file":
        text = write_config(tmp_path / "job.yaml", cfg).read_text().replace("count: 20000", f"count: {value}")
        assert f"count: {value}" in text
        (tmp_path / "job.yaml").write_text(text)
        args = ["run", str(tmp_path / "job.yaml"), "--dry-run"]
    else:
        args = ["run", str(write_config(tmp_path / "job.yaml", cfg)), "--dry-run", "--set", f"points.count={value}"]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "config error" in said and "points.count (" in said and "Traceback" not in said, said
    assert ("boolean" in said) == (value in ("True", "false")), said
    assert not (tmp_path / "result.zarr").exists()
