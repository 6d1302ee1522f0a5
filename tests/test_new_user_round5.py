"""Frictions of issue 50's second new-user pass (the dry run, the job config's synthetic volume and points):
each against what the run itself makes or what the docs promise."""

from __future__ import annotations

import pytest
from test_run import base_config, write_config

from vdbflow import synthetic
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.config.model import ConfigError
from vdbflow.jobs.estimates import PARTICLE_TASK_START_S
from vdbflow.jobs.plan import plan_job


@pytest.mark.parametrize(
    ("resolution", "shell"),
    [(64, (0.0, 0.9)), (24, (0.0, 0.9)), (17, (0.35, 0.5)), (20, (0.5, 0.51)), (33, (0.2, 2.0)), (9, (0.0, 0.01))],
)
def test_the_plan_counts_the_synthetic_volumes_voxels_as_the_run_makes_them(tmp_path, resolution, shell):
    """Row 2: a 64^3 ABC with shell [0, 0.9] was planned at 800,490 active voxels (a sphere's volume, not
    clipped to the box); the volume the run makes has 262,144 = 64^3.  The plan counts them exactly now."""
    cfg = base_config(tmp_path)
    cfg["volume"] = {"synthetic": {"field": "abc", "resolution": resolution, "shell": list(shell)}}
    cfg["points"] = {"kind": "voxels"}
    plan = plan_job(load_config(write_config(tmp_path / "job.yaml", cfg)), dry_run=True)
    made = synthetic.flow_volume(synthetic.abc_flow(), resolution, inner=shell[0], outer=shell[1])
    assert (plan.grids[0].active_voxels, plan.grids[0].leaves) == (made.active_voxel_count, made.leaf_count)
    assert plan.point_count == made.active_voxel_count <= resolution**3  # kind: voxels samples each one


def test_a_key_of_another_points_kind_names_the_kinds_that_take_it(tmp_path):
    """Row 3: `--set points.kind=random` on a plane config said "points.origin: unknown key; did you mean
    'origin'?"; it names the kind that takes the key now, and what this kind takes."""
    cfg = base_config(tmp_path)
    cfg["points"] = {"kind": "plane", "origin": [0, 0, 0], "u": [1, 0, 0], "v": [0, 1, 0], "resolution": [4, 4]}
    path = write_config(tmp_path / "job.yaml", cfg)
    with pytest.raises(ConfigError) as err:
        load_config(path, ["points.kind=random", "points.count=10", "points.sede=3"])
    lines = {line.split(" (")[0].strip(): line for line in str(err.value).splitlines()[1:]}
    assert set(lines) == {"points.origin", "points.u", "points.v", "points.resolution", "points.sede"}
    assert (
        "'origin' is a key of points.kind: plane, not of kind: random (which takes 'bounds'" in lines["points.origin"]
    )
    assert "did you mean 'origin'" not in str(err.value)
    assert lines["points.sede"].endswith("unknown key; did you mean 'seed'?")  # random's own key first
    with pytest.raises(ConfigError, match=r"did you mean 'count' \(a key of points.kind: random \| line\)"):
        load_config(path, ["points.cont=10"])
    with pytest.raises(
        ConfigError,
        match=r"points.origin \(\S+job.yaml, line \d+\): .origin. is a key of points.kind: plane, not of kind: voxels",
    ):
        load_config(path, ["points.kind=voxels"])  # voxels is a kind too: the location has no 'voxels' in it


def _burgers_job(tmp_path, **params) -> dict:
    cfg = base_config(tmp_path)
    cfg["volume"] = {"synthetic": {"field": "burgers", "resolution": 16, "shell": [0.0, 0.9], "params": params}}
    return cfg


def test_a_synthetic_param_the_field_does_not_take_is_refused_with_the_ones_it_takes(tmp_path):
    """Row 4: a wrong `volume.synthetic.params` key showed Python's own TypeError ("burgers_vortex() got an
    unexpected keyword argument 'center'"); the dry run names the key, its line and the params the field takes."""
    path = write_config(tmp_path / "job.yaml", _burgers_job(tmp_path, centre=[1.0, 1.0, 0.0]))
    with pytest.raises(ConfigError) as err:
        plan_job(load_config(path), dry_run=True)
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "params:" in text)
    assert (
        f"volume.synthetic.params ({path}, line {line}): synthetic field 'burgers' takes the params circulation, "
        "strain, core_radius, center; got 'centre'"
    ) in str(err.value)
    with pytest.raises(
        ConfigError, match=r"params \(from --set\): synthetic field 'abc' takes the params a, b, c; got 'k'$"
    ):
        plan_job(load_config(path, ["volume.synthetic.field=abc", "volume.synthetic.params={k: 2}"]), dry_run=True)


def test_the_docs_state_each_synthetic_fields_params_and_the_burgers_axis():
    """Row 4: the params of each field were only in help(); docs/jobs.md's table of `volume.synthetic` has a row
    for every field the config takes, naming each of its params, and says where the Burgers vortex's axis is."""
    import inspect
    from pathlib import Path

    from vdbflow.jobs.config.model import SYNTHETIC_FIELDS
    from vdbflow.synthetic.steady import FIELDS

    text = (Path(__file__).resolve().parents[1] / "docs" / "jobs.md").read_text()
    section = text.split("## Synthetic volumes (`volume.synthetic`)")[1].split("\n## ")[0]
    rows = {
        line.split("|")[1].strip(" `"): line
        for line in section.splitlines()
        if line.startswith("| `") and "`field`" not in line
    }
    assert set(rows) == set(SYNTHETIC_FIELDS)
    for name, row in rows.items():
        params_column = row.split("|")[4]
        assert all(f"`{p}`" in params_column for p in inspect.signature(FIELDS[name]).parameters), (name, row)
    assert "the box's edge x = y = 0" in rows["burgers"]


def test_burgers_center_puts_the_vortex_where_it_is_asked():
    """Row 4: the Burgers vortex's axis was fixed at x = y = 0, an edge of the job's box, so a line through the
    box's centre saw only strain (Q about -0.75).  ``center`` moves it: on the line y = z = pi the vorticity is
    omega_z = Gamma / (pi delta^2) exp(-r^2 / delta^2) at r = |x - pi|, and Q > 0 in the core."""
    import numpy as np

    gamma, delta = 2.0, 0.5
    x = np.linspace(0.5, 5.8, 4001)
    line = np.stack([x, np.full_like(x, np.pi), np.full_like(x, np.pi)], axis=1)
    J = synthetic.make_field("burgers", center=[np.pi, np.pi, np.pi]).jacobian(line)
    omega_z = J[:, 1, 0] - J[:, 0, 1]
    r = np.abs(x - np.pi)
    np.testing.assert_allclose(omega_z, gamma / (np.pi * delta**2) * np.exp(-(r**2) / delta**2), atol=1e-12)
    strain, spin = (J + J.transpose(0, 2, 1)) / 2, (J - J.transpose(0, 2, 1)) / 2
    q = 0.5 * ((spin**2).sum(axis=(1, 2)) - (strain**2).sum(axis=(1, 2)))
    assert q[r < 0.25].min() > 0 > q[r > 2].max()  # rotation in the core, strain far from it
    moved = synthetic.make_field("burgers", center=[np.pi] * 3).velocity(line)
    assert np.array_equal(moved, synthetic.make_field("burgers").velocity(line - np.pi))  # the same field, moved


def test_the_plan_reports_every_problem_at_once(tmp_path):
    """Row 17: with an existing output and `overwrite: never`, the dry run exited with that error alone; the bad
    `volume.synthetic.params` of the same config were reported only once output.path was changed.  All of the
    plan's problems come in one error now: the output, the sampling outputs and the params."""
    cfg = _burgers_job(tmp_path, centre=[1.0, 1.0, 0.0])
    cfg["output"] = {"path": str(tmp_path / "result.nc"), "overwrite": "never"}
    cfg["sampling"] = {"mode": "closest", "outputs": ["value", "vorticity"]}
    (tmp_path / "result.nc").write_bytes(b"an earlier result")
    with pytest.raises(ConfigError) as err:
        plan_job(load_config(write_config(tmp_path / "job.yaml", cfg)), dry_run=True)
    lines = str(err.value).splitlines()
    assert lines[0] == "the job cannot start:"
    assert [line.split(" (")[0].strip() for line in lines[1:]] == [
        "output.path",
        "sampling.outputs",
        "volume.synthetic.params",
    ]
    assert "exists and output.overwrite is 'never'" in lines[1] and "got 'centre'" in lines[3]


def _advect_plan(tmp_path, *sets: str):
    """A particle job through a steady ABC volume: configs/particles.yaml as the plan reads it, with ``sets``."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / "configs" / "particles.yaml"
    out = [f"output.path={tmp_path / 'ftle.zarr'}", f"volume.synthetic.write={tmp_path / 'abc.nvdb'}"]
    return plan_job(load_config(config, [*out, *sets]), dry_run=True)


def test_a_particle_jobs_plan_says_how_long_it_takes(tmp_path):
    """Row 13: the dry run of an `advect:` job gave no time (sampling jobs get one).  It says one now, from the
    kernels' measured cost of a particle step and a worker's start: against runs of the job on 2 workers of the
    otherwise idle 2-core machine (docs/jobs.md) - configs/particles.yaml's 5 M particle steps in 2.5-2.7 s,
    0.8 M with lag4 in 3.1-4.3 s."""
    two = ("cluster.workers=2", "cluster.threads_per_worker=1")
    plan = _advect_plan(tmp_path, *two)
    assert plan.seconds is not None and 2.7 / 2 < plan.seconds < 2.5 * 2
    small = _advect_plan(tmp_path, *two, "sampling.mode=lag4", "points.resolution=[200,200]")
    assert small.seconds is not None and 4.3 / 2 < small.seconds < 3.1 * 2
    lag4 = _advect_plan(tmp_path, *two, "sampling.mode=lag4")
    assert lag4.seconds is not None and lag4.seconds > 4 * plan.seconds  # a wider stencil costs more a step
    four = _advect_plan(tmp_path, "cluster.workers=4", "cluster.threads_per_worker=1")
    start = PARTICLE_TASK_START_S  # each worker's first task, on all of them at once
    assert four.seconds - start == pytest.approx((plan.seconds - start) / 2)  # the seeds' tasks share the workers
    note = next(n for n in plan.notes if n.startswith("advect"))
    assert "5,000,000 particle steps" in note and "of advection + writing" in note and "2 worker thread(s)" in note


# advect: jobs through the double gyre's 41 steps (t 0 to 10, 5.5 MB files: unsteady.write_series at voxel_size
# 1/64), plane seeds x 200 steps with FTLE, rk4, 2 workers of 1 thread, the otherwise idle 2-core machine on
# 2026-12-07: (seeds, points.chunk, mode, time, volume.series.cache) -> advection and writing (s), two runs
SERIES_JOBS = {
    (3444, 1722, "linear", "linear", 4): (1.8, 1.8),
    (3444, 431, "linear", "linear", 4): (3.8, 4.4),
    (3444, 431, "linear", "linear", 41): (2.0, 2.1),
    (20000, 5000, "linear", "linear", 4): (2.8, 3.0),
    (3444, 1722, "lag4", "pchip", 4): (6.4, 8.1),
}


@pytest.mark.parametrize("job", SERIES_JOBS)
def test_a_series_particle_jobs_estimate_counts_the_steps_its_tasks_open(job):
    """Row 13, the new user's job: a series job's time was fitted as 45 us a particle step, which planned 18 s and
    2 min for jobs that ran in 1.8 s and 3 s: the cost is each task opening the steps its window reads (decoded and
    checksummed again unless they stay in the worker's cache) and each worker's start, not the particle steps.
    The estimate is within 2x of every run measured."""
    from vdbflow.jobs.estimates import particle_estimate, series_opened
    from vdbflow.jobs.particles import seed_chunk

    seeds, chunk, mode, time, cache = job
    steps = tuple((0.25 * i, 5_480_000) for i in range(41))
    tasks = -(-seeds // seed_chunk(seeds, chunk, 2))
    opened = series_opened(steps, 0.0, 10.0, time, cache, tasks, 2)
    assert opened == (41 * (2 if cache >= 41 else tasks), 5_480_000 * 41 * (2 if cache >= 41 else tasks))
    seconds, words = particle_estimate(seeds * 200, 2, mode, "rk4", time, opened)
    fast, slow = SERIES_JOBS[job]
    assert slow / 2 < seconds < fast * 2, (seconds, fast, slow)
    assert f"{opened[0]:,} series steps opened by the tasks" in words


def test_a_series_job_opens_the_steps_of_its_window_once_a_task_or_once_a_worker():
    from vdbflow.jobs.estimates import series_opened

    steps = tuple((float(t), 100 + t) for t in range(11))  # t 0..10, file bytes 100 + t
    assert series_opened(steps, 2.0, 5.0, "linear", 3, 3, 2) == (4 * 3, (102 + 103 + 104 + 105) * 3)
    assert series_opened(steps, 2.5, 5.0, "linear", 3, 3, 2)[0] == 4 * 3  # steps 2..5 around [2.5, 5]
    assert series_opened(steps, 2.0, 5.0, "linear", 4, 3, 2)[0] == 4 * 2  # a cache of 4 keeps them: once a worker
    assert series_opened(steps, 5.0, 2.0, "pchip", 8, 3, 2) == (6 * 2, sum(range(101, 107)) * 2)  # 1..6, cached
    assert series_opened(steps, 0.0, 10.0, "pchip", 4, 1, 2) == (11, sum(range(100, 111)))  # clipped to the ends


def test_a_series_particle_jobs_plan_says_how_long_it_takes(tmp_path):
    """The plan of a series job reads the steps' times and file sizes from the headers and counts what its tasks
    open: more tasks open more, a cache that holds the window opens it once a worker."""
    import numpy as np

    from vdbflow.synthetic import unsteady

    unsteady.write_series(unsteady.double_gyre(), tmp_path / "gyre", np.arange(0, 10.01, 2.5), voxel_size=1 / 8)
    cfg = {
        "volume": {"series": {"paths": str(tmp_path / "gyre" / "*.nvdb")}},
        "points": {"kind": "plane", "origin": [0, 0, 0], "u": [2, 0, 0], "v": [0, 1, 0], "resolution": [41, 21]},
        "sampling": {"mode": "lag4"},
        "advect": {"t0": 0.0, "t1": 10.0, "dt": 0.05, "save_every": 100, "outputs": ["ftle"], "time": "pchip"},
        "cluster": {"kind": "local", "workers": 2, "threads_per_worker": 1, "dashboard": False},
        "output": {"path": str(tmp_path / "ftle.zarr")},
    }
    path = write_config(tmp_path / "job.yaml", cfg)
    plan = plan_job(load_config(path), dry_run=True)
    sizes = [f.stat().st_size for f in sorted((tmp_path / "gyre").glob("*.nvdb"))]
    assert [b for _, b in plan.series_steps] == sizes and [t for t, _ in plan.series_steps] == [0, 2.5, 5, 7.5, 10]
    note = next(n for n in plan.notes if n.startswith("advect"))
    assert "172,200 particle steps" in note and "10 series steps opened" in note  # 2 tasks, the 5 steps each
    assert "volume.series.cache" not in note  # a task a worker: nothing to keep between tasks
    from vdbflow.jobs.estimates import human_bytes

    small = plan_job(load_config(path, ["points.chunk=100", "volume.series.cache=4"]), dry_run=True)  # 9 tasks
    note = next(n for n in small.notes if n.startswith("advect"))
    assert "45 series steps opened" in note and small.seconds > plan.seconds
    assert "each task opens the 5 steps of the window again (volume.series.cache: 4): volume.series.cache: 5 " in note
    assert f"keeps them open in each worker, {human_bytes(sum(sizes))} of files mapped" in note
    cached = plan_job(load_config(path, ["points.chunk=100", "volume.series.cache=5"]), dry_run=True)
    note = next(n for n in cached.notes if n.startswith("advect"))
    assert "10 series steps opened" in note and "volume.series.cache" not in note
    # the default, auto: the 5 small files fit a worker (Dask's default: the machine's memory over 2 workers), so
    # each worker opens them once, and the plan says so
    auto = plan_job(load_config(path, ["points.chunk=100"]), dry_run=True)
    note = next(n for n in auto.notes if n.startswith("advect"))
    assert "10 series steps opened" in note and auto.seconds == cached.seconds
    kept = f"volume.series.cache auto keeps the window's 5 steps open in each worker ({human_bytes(sum(sizes))})"
    assert kept in note


def test_the_automatic_series_cache_keeps_the_window_where_a_quarter_of_a_worker_holds_it():
    """volume.series.cache auto: every step of the window where its files take at most a quarter of a worker's
    memory, else the 4 pchip reads; a number is kept as given; the plan says which, and why."""
    from vdbflow.jobs.estimates import series_cache, series_cache_advice

    steps = tuple((float(t), 1000) for t in range(11))  # t 0..10, 1,000 bytes a file
    window = (steps, 2.0, 8.0, "linear")  # steps 2..8: 7 files, 7,000 bytes
    assert series_cache(*window, "auto", 28_000) == 7 and series_cache(*window, "auto", 27_999) == 4
    assert series_cache(*window, "auto", None) == 4 and series_cache(*window, 2, 10**9) == 2
    assert series_cache(steps, 2.0, 3.0, "linear", "auto", 10**9) == 4  # a window of 2: still the 4 pchip reads
    assert series_cache(steps, 2.0, 8.0, "pchip", "auto", 36_000) == 9  # pchip: a step more at each end
    assert "volume.series.cache auto keeps the window's 7 steps open" in series_cache_advice(*window, "auto", 28_000)
    tight = series_cache_advice(*window, "auto", 27_999)
    assert "(volume.series.cache auto: 4, the window's 7.0 kB over a quarter of a worker's 28.0 kB)" in tight
    assert "volume.series.cache: 7 keeps them open in each worker" in tight
    unknown = series_cache_advice(*window, "auto", None)
    assert "(volume.series.cache auto: 4 here, the workers' memory not known before the job starts)" in unknown
    assert series_cache_advice(*window, 7, None) == ""
