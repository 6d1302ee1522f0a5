"""Jobs that never destroy data and never crash (issue 13): alias bombs, size limits, what
``overwrite: always`` may replace, a kill during the swap, leftovers of killed runs, path checks in the
plan, the dashboard's exposure, and inputs read through a private snapshot."""

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from test_run import base_config, fake_result, invoke, write_config

import vdbflow
from vdbflow import synthetic
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.config.model import ConfigError, LocalClusterSpec
from vdbflow.jobs.publish.output import OutputError, leftovers, partial_path, publish, tidy
from vdbflow.jobs.publish.results import not_a_result

HOST = socket.gethostname()


def said(result) -> str:
    """A command's output with the console's line wrapping undone."""
    return " ".join(result.output.split())


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(proc.stdout)


# -- item 8: YAML alias bombs ----------------------------------------------------------------------------


def _bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_before_expanding(tmp_path):
    """9 levels of 9 aliases (9^9 = 387 million strings from ~500 bytes) fail with exit 2 naming the
    cause; nothing is expanded (the old line map walked every expanded node)."""
    text = _bomb()
    assert len(text) < 600
    path = tmp_path / "bomb.yaml"
    path.write_text(text + "volume: {synthetic: {field: abc}}\n")
    with pytest.raises(ConfigError, match="at most 10,000 keys and values with aliases expanded"):
        load_config(path)
    result = invoke("run", str(path))
    assert result.exit_code == 2, result.output
    assert "alias bomb" in said(result)
    assert _tree(tmp_path) == ["bomb.yaml"]


def test_recursive_alias_and_bomb_in_set_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="recursive alias at line 1"):
        load_config(text="a: &a [*a]\n")
    good = write_config(tmp_path / "job.yaml", base_config(tmp_path))
    result = invoke("run", str(good), "--set", "points.seed=" + _bomb().replace("\n", ", ").join("{}"))
    assert result.exit_code == 2 and "aliases expanded" in said(result), result.output


def test_modest_aliases_still_work_and_huge_files_are_refused(tmp_path):
    cfg = load_config(
        text=textwrap.dedent("""\
        volume: {synthetic: {field: abc, resolution: 16, shell: &shell [0.1, 0.4]}}
        points: {kind: grid, shape: &s [4, 4, 4]}
        output: {path: o.zarr}
        """)
    )
    assert cfg.volume.synthetic.shell == (0.1, 0.4) and cfg.points.shape == (4, 4, 4)
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    with pytest.raises(ConfigError, match="at most 1,048,576 bytes"):
        load_config(big)


# -- item 9: how large a job is, and limits ---------------------------------------------------------------


def test_a_trillion_points_is_refused_unless_forced(tmp_path):
    cfg_path = write_config(tmp_path / "job.yaml", base_config(tmp_path))
    result = invoke("run", str(cfg_path), "--set", "points.count=1000000000000")
    assert result.exit_code == 2, result.output
    assert "1,000,000,000,000 points, more than limits.max_points (1,000,000,000)" in said(result)
    assert "--force" in said(result)
    assert _tree(tmp_path) == ["job.yaml"]
    # forced, the plan says how large and how long (dry run: nothing runs)
    result = invoke("run", str(cfg_path), "--set", "points.count=1000000000000", "--dry-run", "--force")
    assert result.exit_code == 0, result.output
    assert "allowed by --force" in said(result) and "96.0 TB" in said(result) and "days" in said(result)
    # a config may raise its own limits
    result = invoke(
        "run",
        str(cfg_path),
        "--set",
        "points.count=2000000000",
        "--set",
        "points.chunk=262144",
        "--set",
        "limits.max_points=3e9",
        "--dry-run",
    )
    assert result.exit_code == 0, result.output  # 3e9 is the number (YAML 1.1 alone would read a string)
    result = invoke(
        "run",
        str(cfg_path),
        "--set",
        "points.count=2000000000",
        "--set",
        "points.chunk=262144",
        "--set",
        "limits.max_points=3000000000",
        "--dry-run",
    )
    assert result.exit_code == 0, result.output


def test_output_size_limit(tmp_path):
    cfg_path = write_config(tmp_path / "job.yaml", base_config(tmp_path))
    result = invoke("run", str(cfg_path), "--set", "limits.max_output_bytes=1MB")
    assert result.exit_code == 2, result.output
    assert "about 1.9 MB of results (96 bytes a point), more than limits.max_output_bytes (1.0 MB)" in said(result)
    result = invoke("run", str(cfg_path), "--set", "limits.max_output_bytes=lots")
    assert result.exit_code == 2 and "limits.max_output_bytes" in said(result), result.output


@pytest.mark.slow
def test_the_planned_size_is_the_stored_size(tmp_path):
    """The plan's bytes a point are those of the variables written (before compression)."""
    from vdbflow.jobs.plan import plan_job

    cfg = base_config(tmp_path)
    cfg["sampling"]["outputs"] += ["inside", "strain_rate", "q_criterion"]
    cfg["points"]["count"] = 3000
    cfg_path = write_config(tmp_path / "job.yaml", cfg)
    plan = plan_job(load_config(cfg_path))
    assert invoke("run", str(cfg_path)).exit_code == 0
    ds = xr.open_zarr(tmp_path / "result.zarr")
    stored = sum(v.nbytes for v in ds.variables.values() if "point" in v.dims)
    assert plan.output_bytes == stored == 3000 * plan.bytes_per_point


# -- item 10: overwrite: always replaces only an earlier vdbflow result ------------------------------------


def test_overwrite_always_refuses_what_is_not_a_result(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "thesis.tex").write_text("\\chapter{Results}")
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    vdbflow.save(tmp_path / "in.nvdb", {"velocity": vol})
    (tmp_path / "data").mkdir()
    vdbflow.save(tmp_path / "data" / "in2.nvdb", {"velocity": vol})
    polluted = fake_result(tmp_path / "old.zarr", "x")
    (polluted / "notes.txt").write_text("mine")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    cases = [
        ({"path": str(thesis)}, "a directory that is not a Zarr store written by vdbflow (it holds ['thesis.tex'])"),
        ({"path": "."}, "the current directory or one of its parents"),
        ({"path": str(tmp_path.parent)}, "the current directory or one of its parents"),
        ({"path": "in.nvdb"}, "which is or holds volume.path"),
        ({"path": "data"}, "which is or holds volume.path"),
        ({"path": "old.zarr"}, "a vdbflow result that holds other files too: ['notes.txt']"),
    ]
    for output, text in cases:
        cfg = base_config(tmp_path, output={**output, "overwrite": "always"})
        if "nvdb" in output["path"] or output["path"] == "data":
            cfg["volume"] = {"path": "in.nvdb" if "nvdb" in output["path"] else "data/in2.nvdb"}
            cfg["sampling"]["outputs"] = ["value"]
        result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
        assert result.exit_code == 2, (output, result.output)
        assert text in said(result), (output, result.output)
        after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "job.yaml"}
        assert after == {p: b for p, b in before.items() if p.name != "job.yaml"}, output


def test_results_are_recognised_by_their_attrs(tmp_path):
    """A real Zarr and NetCDF result are replaceable; the same formats without vdbflow's attrs are not."""
    import h5netcdf

    assert not_a_result(fake_result(tmp_path / "r.zarr", "x")) is None
    xr.Dataset({"a": ("p", np.zeros(3))}).to_zarr(tmp_path / "other.zarr", zarr_format=2)
    assert "without vdbflow's attributes" in not_a_result(tmp_path / "other.zarr")
    for name, attrs in (("ours.nc", {"title": "vdbflow run result", "vdbflow_config": "{}"}), ("theirs.nc", {})):
        with h5netcdf.File(tmp_path / name, "w") as f:
            f.attrs.update(attrs)
    assert not_a_result(tmp_path / "ours.nc") is None
    assert "NetCDF file without vdbflow's attributes" in not_a_result(tmp_path / "theirs.nc")
    (tmp_path / "paper.nc").write_text("not hdf5")
    assert not_a_result(tmp_path / "paper.nc") == "a file that is not a NetCDF (HDF5) file"


def test_publish_never_replaces_what_appeared_meanwhile(tmp_path):
    """What appears at the output while a job runs is checked again at publishing."""
    final = tmp_path / "r.zarr"
    final.mkdir()
    (final / "thesis.tex").write_text("precious")
    part = fake_result(partial_path(final), "new")
    with pytest.raises(OutputError, match="left as it is, and the complete new result is kept at") as caught:
        publish(part, final, "always")
    (kept,) = tmp_path.glob("r.zarr.unpublished-*")
    assert str(kept) in str(caught.value) and not part.exists()
    assert (final / "thesis.tex").read_text() == "precious" and (kept / "data" / "0").read_text() == "new"


# -- item 11: a kill between the two renames of the swap ------------------------------------------------

KILL_BETWEEN_RENAMES = """
import os, signal, sys
from pathlib import Path
from vdbflow.jobs.publish import output
final, part = Path(sys.argv[1]), output.partial_path(Path(sys.argv[1]))
os.rename(sys.argv[2], part)  # the finished store, named by this process as a job names it
output.renameat2 = lambda *args: False   # the two-rename path of filesystems without renameat2
real = os.replace
def replace_then_die(src, dst):
    real(src, dst)
    os.kill(os.getpid(), signal.SIGKILL)  # killed right after setting the old result aside
output.os.replace = replace_then_die
output.publish(part, final, "always")
"""


def test_a_kill_between_the_renames_is_recovered_and_reported(tmp_path):
    final = fake_result(tmp_path / "r.zarr", "old")
    new = fake_result(tmp_path / "new", "new")
    proc = subprocess.Popen([sys.executable, "-c", KILL_BETWEEN_RENAMES, str(final), str(new)])
    assert proc.wait(timeout=120) == -signal.SIGKILL  # it kills itself between the renames
    assert not final.exists()
    (aside,) = [item for item in leftovers(final) if item.kind == "replaced"]
    assert aside.pid == proc.pid and aside.host == HOST and aside.writer_gone is True
    # the plan reports it; `vdbflow clean` puts the old result back (and removes the finished partial)
    assert any(line.startswith("would restore") for line in tidy(final, dry_run=True))
    result = invoke("clean", str(final))
    assert result.exit_code == 0, result.output
    assert "restored" in said(result) and "killed while replacing it" in said(result)
    assert (final / "data" / "0").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.zarr"]  # the finished partial of the killed run went too


@pytest.mark.slow
def test_the_next_run_restores_a_result_set_aside(tmp_path):
    """A rerun restores the earlier result before it starts (and says so), then replaces it properly."""
    cfg_path = write_config(
        tmp_path / "job.yaml",
        base_config(tmp_path, output={"path": str(tmp_path / "result.zarr"), "overwrite": "always"}),
    )
    assert invoke("run", str(cfg_path), "--set", "points.count=100").exit_code == 0
    aside = tmp_path / f".result.zarr.replaced-0123abcd-{_dead_pid()}@{HOST}"
    os.replace(tmp_path / "result.zarr", aside)
    result = invoke("run", str(cfg_path), "--dry-run")
    assert result.exit_code == 0 and "would restore" in said(result), result.output
    result = invoke("run", str(cfg_path), "--set", "points.count=200")
    assert result.exit_code == 0, result.output
    assert "restored" in said(result) and "killed while replacing it" in said(result)
    assert xr.open_zarr(tmp_path / "result.zarr").sizes["point"] == 200
    assert _tree(tmp_path)[:1] == ["job.yaml"] and not leftovers(tmp_path / "result.zarr")


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2 is Linux's")
def test_publish_exchanges_in_one_step_on_linux(tmp_path, monkeypatch):
    """Where renameat2 works the swap is one system call: no two-rename window at all."""
    from vdbflow.jobs.publish import output

    final = fake_result(tmp_path / "r.zarr", "old")
    part = fake_result(partial_path(final), "new")

    def no_rename(*args):
        raise AssertionError("the two-rename path was taken")

    monkeypatch.setattr(output.os, "replace", no_rename)
    publish(part, final, "always")
    assert (final / "data" / "0").read_text() == "new" and _tree(tmp_path)[0] == "r.zarr"


# -- item 12: leftovers of killed runs ------------------------------------------------------------------


def test_clean_removes_only_what_dead_writers_left(tmp_path):
    final = tmp_path / "r.zarr"
    dead, alive = _dead_pid(), os.getpid()
    files = {
        "dead": fake_result(tmp_path / f".r.zarr.partial-0000aaaa-{dead}@{HOST}", "x"),
        "dead snapshot": tmp_path / f".r.zarr.input-0000bbbb-{dead}@{HOST}",
        "running": fake_result(tmp_path / f".r.zarr.partial-0000cccc-{alive}@{HOST}", "x"),
        "other host": fake_result(tmp_path / f".r.zarr.partial-0000dddd-{dead}@elsewhere.example.org", "x"),
        "unrecorded": fake_result(tmp_path / ".r.zarr.partial-0000eeee", "x"),
        "another output": fake_result(tmp_path / f".s.zarr.partial-0000ffff-{dead}@{HOST}", "x"),
    }
    files["dead snapshot"].write_bytes(b"nvdb")
    result = invoke("clean", str(final), "--dry-run")
    assert result.exit_code == 0 and all(p.exists() for p in files.values()), result.output
    result = invoke("clean", str(final))
    assert result.exit_code == 0, result.output
    assert not files["dead"].exists() and not files["dead snapshot"].exists()
    assert all(files[k].exists() for k in ("running", "other host", "unrecorded", "another output"))
    assert "of a running job" in said(result) and "vdbflow clean --force" in said(result)
    # a directory: every output in it; --force also takes what cannot be checked, never a running job's
    result = invoke("clean", str(tmp_path), "--force")
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == [files["running"].name]


def test_clean_takes_a_config(tmp_path):
    cfg_path = write_config(tmp_path / "job.yaml", base_config(tmp_path))
    stale = fake_result(tmp_path / f".result.zarr.partial-0000aaaa-{_dead_pid()}@{HOST}", "x")
    result = invoke("clean", str(cfg_path))
    assert result.exit_code == 0 and "removed" in said(result) and not stale.exists(), result.output
    assert invoke("clean", str(tmp_path / "job.yaml")).output.startswith("nothing to clean")
    (tmp_path / "bad.yaml").write_text("volume: [\n")
    assert invoke("clean", str(tmp_path / "bad.yaml")).exit_code == 2


# -- item 13: path problems found in the plan --------------------------------------------------------------


def test_path_problems_exit_2_before_anything_runs(tmp_path):
    (tmp_path / "a-file").write_text("x")
    os.symlink(tmp_path / "nowhere.zarr", tmp_path / "dangling.zarr")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling-dir")
    cases = [
        ({"output": {"path": str(tmp_path / "dangling.zarr")}}, "symbolic link (dangling)"),
        ({"output": {"path": str(tmp_path / "dangling-dir" / "r.zarr")}}, "is a dangling symbolic link"),
        ({"output": {"path": str(tmp_path / "a-file" / "deeper" / "r.zarr")}}, "a-file is a file, not a directory"),
        (
            {"volume": {"synthetic": {"field": "abc", "write": str(tmp_path / "a-file" / "v.nvdb")}}},
            "volume.synthetic.write",
        ),
    ]
    before = _tree(tmp_path)
    for patch, text in cases:
        cfg = base_config(tmp_path, **patch)
        result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)), "--dry-run")
        assert result.exit_code == 2 and text in said(result), (patch, result.output)
        result = invoke("run", str(tmp_path / "job.yaml"))
        assert result.exit_code == 2 and text in said(result), (patch, result.output)
        assert _tree(tmp_path) == sorted([*before, "job.yaml"]), patch


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_an_unwritable_parent_exits_2(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    cfg = base_config(tmp_path, output={"path": str(locked / "sub" / "r.zarr")})
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 2 and "is not writable" in said(result), result.output


# -- item 15: the dashboard ------------------------------------------------------------------------------


@pytest.mark.slow
def test_dashboard_on_localhost_by_default_and_off_means_off():
    from vdbflow.jobs.clusters import open_cluster

    with open_cluster(LocalClusterSpec(kind="local", workers=1)) as client:
        server = client.cluster.scheduler.http_server
        assert server.address == "127.0.0.1" and client.dashboard_link.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health", timeout=10) as page:
            assert page.status == 200
        with urllib.request.urlopen(client.dashboard_link, timeout=30) as page:  # the printed link (bokeh)
            body = page.read()
            assert page.status == 200 and b"Dask Diagnostic UI" in body and b"needs bokeh" not in body
    with open_cluster(LocalClusterSpec(kind="local", workers=1, dashboard=False)) as client:
        scheduler = client.cluster.scheduler
        assert "dashboard" not in scheduler.services
        port = scheduler.http_server.port
        assert port != 8787
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_dashboard_addresses_in_the_config():
    assert LocalClusterSpec(kind="local").dashboard_address == "127.0.0.1:0"
    assert LocalClusterSpec(kind="local", dashboard="0.0.0.0:8787").dashboard_address == "0.0.0.0:8787"
    assert LocalClusterSpec(kind="local", dashboard=False).dashboard_address is None
    with pytest.raises(ValueError, match="host:port"):
        LocalClusterSpec(kind="local", dashboard="everywhere")


# -- item 6: inputs read through a private snapshot --------------------------------------------------------


def _nvdb_job(tmp_path: Path, **volume) -> tuple[Path, Path, vdbflow.Volume]:
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=24)
    nvdb = tmp_path / "flow.nvdb"
    vdbflow.save(nvdb, {"velocity": vol})
    cfg = base_config(tmp_path, volume={"path": str(nvdb), **volume})
    cfg["points"] = {"kind": "line", "start": [0.5, 3.1, 3.1], "end": [5.8, 3.1, 3.1], "count": 500}
    cfg["sampling"] = {"outputs": ["value", "jacobian"]}
    return write_config(tmp_path / "job.yaml", cfg), nvdb, vol


@pytest.mark.slow
def test_a_truncated_input_cannot_crash_the_job(tmp_path, monkeypatch):
    """Another process truncates the .nvdb just as the job reads it: the job reads its private snapshot
    and finishes with the right values (mapped in place, reading would have hit SIGBUS)."""
    from vdbflow.distribution import volume as distributed

    cfg_path, nvdb, vol = _nvdb_job(tmp_path)
    original = nvdb.read_bytes()
    real = distributed.distribute

    from vdbflow.io import grid_ref

    real_open = grid_ref.open_volume

    def path_of(source):  # a path, or the GridRef a job names its files by
        return Path(getattr(source, "path", source))

    def truncate(source):
        assert path_of(source) != nvdb and path_of(source).name.startswith(".result.zarr.input-")
        with open(nvdb, "r+b") as f:
            f.truncate(100)

    def truncate_then_distribute(source, *args, **kwargs):  # a partitioned volume
        truncate(source)
        return real(source, *args, **kwargs)

    def truncate_then_open(source, *args, **kwargs):  # every worker reads the whole (small) volume
        if path_of(source).name.startswith(".result.zarr.input-"):  # the job opening its snapshot
            truncate(source)
        return real_open(source, *args, **kwargs)

    monkeypatch.setattr(distributed, "distribute", truncate_then_distribute)
    monkeypatch.setattr(grid_ref, "open_volume", truncate_then_open)  # where a GridRef opens its file
    result = invoke("run", str(cfg_path))
    assert result.exit_code == 0, result.output
    ds = xr.open_zarr(tmp_path / "result.zarr")
    pts = np.stack([ds[c].values for c in "xyz"], axis=1)
    assert nvdb.stat().st_size == 100  # the original was truncated meanwhile
    np.testing.assert_array_equal(ds["velocity"].values, vol.sample(pts)["velocity"].values)
    assert np.isfinite(ds["velocity"].values).sum() > 10
    assert json.loads(ds.attrs["input_sha256"]) == {"velocity": hashlib.sha256(original).hexdigest()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flow.nvdb", "job.yaml", "result.zarr"]  # snapshot gone


@pytest.mark.parametrize("snapshot", [True, False])
def test_an_input_changed_after_the_plan_is_refused(tmp_path, monkeypatch, snapshot):
    from vdbflow.jobs import runner as job

    cfg_path, nvdb, _ = _nvdb_job(tmp_path, snapshot=snapshot)
    real = job.plan_job

    def plan_then_truncate(*args, **kwargs):
        plan = real(*args, **kwargs)
        with open(nvdb, "r+b") as f:
            f.truncate(100)
        return plan

    monkeypatch.setattr(job, "plan_job", plan_then_truncate)
    result = invoke("run", str(cfg_path))
    assert result.exit_code == 1, result.output
    assert "as the plan saw it" in said(result) and "another process replaced or rewrote it" in said(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flow.nvdb", "job.yaml"]


def test_the_plan_says_how_the_input_is_read(tmp_path):
    cfg_path, _, _ = _nvdb_job(tmp_path)
    result = invoke("run", str(cfg_path), "--dry-run")
    assert result.exit_code == 0 and "private snapshot" in said(result), result.output
    result = invoke("run", str(cfg_path), "--dry-run", "--set", "volume.snapshot=false")
    assert result.exit_code == 0 and "memory-mapped in place" in said(result), result.output


# -- issue 40, row 1: what comes out of the exchange is checked again before it is deleted ---------------


@pytest.mark.parametrize("exchange", [True, False])
def test_publish_never_deletes_a_directory_that_replaced_the_checked_result(tmp_path, monkeypatch, exchange):
    """Publishing checks that the output is an earlier result, then exchanges; a directory of someone's
    files that took its place in between comes out of the exchange, is put back untouched, and the
    complete new result is kept at an unpublished path that the error names."""
    from vdbflow.jobs.publish import output

    final = fake_result(tmp_path / "r.zarr", "old")
    part = fake_result(partial_path(final), "new")
    calls = []

    def check_then_race(path):
        problem = not_a_result(path)
        if not calls:  # the first check, of the earlier result: then someone's directory replaces it
            os.rename(final, tmp_path / "moved-away")
            final.mkdir()
            (final / "thesis.tex").write_text("precious")
        calls.append(path)
        return problem

    monkeypatch.setattr(output, "not_a_result", check_then_race)
    if not exchange:
        monkeypatch.setattr(output, "renameat2", lambda *args: False)
    with pytest.raises(OutputError, match="appeared after the check") as caught:
        publish(part, final, "always")
    (kept,) = tmp_path.glob("r.zarr.unpublished-*")
    assert str(kept) in str(caught.value) and f"it is back at {final}" in str(caught.value)
    assert _tree(final) == ["thesis.tex"] and (final / "thesis.tex").read_text() == "precious"
    assert (kept / "data" / "0").read_text() == "new" and (tmp_path / "moved-away" / "data" / "0").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["r.zarr", "moved-away", kept.name])


def test_publish_replaces_a_result_that_replaced_the_checked_one(tmp_path, monkeypatch):
    """Another run's result that took the checked one's place is a result too: overwrite: always replaces it."""
    from vdbflow.jobs.publish import output

    final = fake_result(tmp_path / "r.zarr", "old")
    part = fake_result(partial_path(final), "new")
    calls = []

    def check_then_race(path):
        problem = not_a_result(path)
        if not calls:
            remove_tree_then = tmp_path / "other"
            fake_result(remove_tree_then, "other")
            os.replace(final, tmp_path / "gone")
            os.rename(remove_tree_then, final)
        calls.append(path)
        return problem

    monkeypatch.setattr(output, "not_a_result", check_then_race)
    publish(part, final, "always")
    assert (final / "data" / "0").read_text() == "new" and len(calls) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone", "r.zarr"]
