"""The Python API around jobs and files: ``vdbflow.run``, ``vdbflow.open`` of Zarr stores and OpenVDB
files, lazy imports, cluster start retries, reprs and packaging files."""

import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow import synthetic
from vdbflow.jobs import clusters
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.config.model import ConfigError, LocalClusterSpec
from vdbflow.jobs.runner import JobError, JobResult

REPO = Path(__file__).resolve().parents[1]
MATRIX = [[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [-2.0, 1.0, 0.125]]


def job(tmp_path: Path, **sections) -> dict:
    cfg = {
        "volume": {"synthetic": {"field": "linear", "resolution": 16, "params": {"matrix": MATRIX}}},
        "points": {"kind": "random", "count": 3_000, "chunk": 1_000, "seed": 1},
        "sampling": {"outputs": ["value", "jacobian", "divergence"]},
        "cluster": {"kind": "local", "workers": 1, "dashboard": False},
        "output": {"path": str(tmp_path / "result.zarr")},
    }
    cfg.update(sections)
    return cfg


@pytest.fixture(scope="module")
def client():
    import distributed

    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc,
        distributed.Client(lc) as c,
    ):
        yield c


# -- vdbflow.run ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_run_a_yaml_path_with_dotted_overrides(tmp_path, client, monkeypatch):
    """Keyword overrides by dotted path (``**{"output.path": ...}``) and with ``__`` for the dot; the
    given client is used (no cluster is started) and left open."""
    import yaml

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job(tmp_path)))
    monkeypatch.setattr("vdbflow.jobs.runner.open_cluster", lambda spec: pytest.fail("started a cluster of its own"))
    result = vdbflow.run(path, client, points__count=2_500, **{"output.path": str(tmp_path / "other.zarr")})
    assert isinstance(result, JobResult)
    assert result.output == (tmp_path / "other.zarr").absolute() and result.points == 2_500
    assert result.workers == 2 and result.analytic_error is not None and result.analytic_error < 1e-3
    ds = xr.open_zarr(result.output)
    assert ds.sizes["point"] == 2_500 and {"velocity", "velocity_jacobian", "divergence"} <= set(ds.data_vars)
    assert not (tmp_path / "result.zarr").exists()
    assert client.submit(lambda: 7).result(timeout=60) == 7  # still open


def test_run_a_mapping_with_an_overrides_dict(tmp_path, client):
    result = vdbflow.run(job(tmp_path), client=client, overrides={"points.count": 1_200, "output.overwrite": "always"})
    assert result.points == 1_200
    again = vdbflow.run(
        job(tmp_path),
        client=client,
        overrides={
            "points": {"kind": "line", "start": [0, 3, 3], "end": [6, 3, 3], "count": 50},
            "output.overwrite": "always",
        },
    )
    assert again.points == 50 and xr.open_zarr(again.output).sizes["point"] == 50


@pytest.mark.slow
def test_run_a_jobconfig_and_start_its_own_cluster(tmp_path):
    cfg = load_config(data=job(tmp_path))
    result = vdbflow.run(cfg, points__count=1_000)
    assert result.points == 1_000 and result.workers == 1
    assert cfg.points.count == 3_000  # the config given is not changed


def test_run_errors_are_vdbflow_exceptions(tmp_path, client, monkeypatch):
    with pytest.raises(ConfigError, match=r"points.count \(from an override\)"):
        vdbflow.run(job(tmp_path), client=client, points__count=0)
    with pytest.raises(ConfigError, match="found nothing"):
        vdbflow.run(tmp_path / "absent.yaml", client=client)
    with pytest.raises(ConfigError, match="unknown key"):
        vdbflow.run(job(tmp_path), client=client, **{"sampling.mood": "linear"})
    with pytest.raises(ConfigError, match="expected a config path"):
        vdbflow.run(42, client=client)
    with pytest.raises(ConfigError, match="expected a config value"):
        vdbflow.run(job(tmp_path), client=client, **{"points.seed": object()})
    (tmp_path / "result.zarr").mkdir()
    with pytest.raises(ConfigError, match="overwrite"):
        vdbflow.run(job(tmp_path), client=client)
    (tmp_path / "result.zarr").rmdir()

    import dask

    from vdbflow.jobs import executors as job_module

    def failing(*args):
        def boom(*parts):
            raise RuntimeError("a worker says no")

        return dask.delayed(boom)(*[dask.delayed(a) for a in args[:1]])

    monkeypatch.setattr(job_module, "_analytic_error", failing)  # a job whose volume is partitioned

    def failing_chunk(*args):  # a job whose workers read the whole volume: one task a chunk
        raise RuntimeError("a worker says no")

    from vdbflow.jobs import chunks

    monkeypatch.setattr(chunks, "sample_chunk", failing_chunk)
    with pytest.raises(JobError, match="a worker says no.*no result was published") as info:
        vdbflow.run(job(tmp_path), client=client)
    assert isinstance(info.value, vdbflow.VdbflowError) and isinstance(info.value.__cause__, RuntimeError)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_run_is_documented_and_exported():
    assert "run" in vdbflow.__all__ and vdbflow.run is vdbflow.jobs.runner.run
    assert "overrides" in vdbflow.run.__doc__ and "client" in vdbflow.run.__doc__


# -- vdbflow.open: Zarr stores and OpenVDB files ---------------------------------------------------------------


def test_open_a_zarr_volume_store(tmp_path):
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    vol.to_zarr(tmp_path / "v.zarr")
    back = vdbflow.open(tmp_path / "v.zarr")
    np.testing.assert_array_equal(back.active_voxels(), vol.active_voxels())
    np.testing.assert_array_equal(np.asarray(back.active_values()), np.asarray(vol.active_values()))
    assert vdbflow.open(str(tmp_path / "v.zarr"), grid=vol.name).name == vol.name
    with pytest.raises(vdbflow.VolumeError, match="the one volume"):
        vdbflow.open(tmp_path / "v.zarr", grid="density")
    with pytest.raises(vdbflow.VolumeError, match="bbox"):
        vdbflow.open(tmp_path / "v.zarr", bbox=((0, 0, 0), (7, 7, 7)))


def test_open_says_what_a_directory_is(tmp_path):
    xr.Dataset({"a": ("x", np.zeros(3))}).to_zarr(tmp_path / "other.zarr", zarr_format=2)
    xr.Dataset({"a": ("x", np.zeros(3))}, attrs={"title": "vdbflow run result"}).to_zarr(
        tmp_path / "result.zarr", zarr_format=2
    )
    (tmp_path / "plain").mkdir()
    for name, text in (
        ("other.zarr", "without the attrs of a stored volume"),
        ("result.zarr", "run result"),
        ("plain", "without Zarr metadata"),
        ("absent.zarr", "found nothing"),
    ):
        with pytest.raises(vdbflow.VolumeError, match=text):
            vdbflow.open(tmp_path / name)


def test_open_a_broken_openvdb_file_names_the_byte(tmp_path):
    path = tmp_path / "smoke.vdb"
    path.write_bytes(b" BDV" + bytes(60))  # OpenVDB's magic 0x56444220, little-endian, then version 0
    for data in (path, str(path), path.read_bytes()):
        with pytest.raises(vdbflow.OpenVDBError, match="at byte 8.*file format version.*found version 0"):
            vdbflow.open(data)
        with pytest.raises(vdbflow.OpenVDBError, match="at byte 8"):
            vdbflow.list_grids(data)
    vol = vdbflow.Volume.from_voxels(np.zeros((1, 3), int), np.ones(1, np.float32), name="rho")
    vdbflow.save(tmp_path / "nano.vdb", {"rho": vol})  # a NanoVDB file under another suffix still opens
    assert vdbflow.open(tmp_path / "nano.vdb").name == "rho"


# -- imports ------------------------------------------------------------------------------------------------


HEAVY = ("xarray", "pandas", "dask", "distributed")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return set(out)


def test_import_vdbflow_and_cli_help_load_no_xarray_dask_or_pandas():
    loaded = _modules_after("import vdbflow\nvdbflow.Volume, vdbflow.open, vdbflow.__version__")
    assert "vdbflow.core.volume" in loaded and not {m for m in HEAVY if m in loaded}
    loaded = _modules_after("from vdbflow.jobs.cli.main import main\nmain(['--help'], standalone_mode=False)")
    assert "vdbflow.jobs.cli.main" in loaded and not {m for m in HEAVY if m in loaded}


def test_lazy_names_resolve_and_the_accessor_is_registered_whoever_imports_xarray():
    code = textwrap.dedent("""
        import vdbflow
        import xarray as xr
        assert hasattr(xr.Dataset, "vdbflow"), "accessor missing after import vdbflow, xarray"
        for name in vdbflow.__all__:
            getattr(vdbflow, name)
        assert vdbflow.analysis.flow.q_criterion and vdbflow.synthetic.taylor_green
        assert set(vdbflow.__all__) <= set(dir(vdbflow))
        try:
            vdbflow.no_such_name
        except AttributeError as err:
            assert "no_such_name" in str(err)
        else:
            raise SystemExit("no AttributeError")
    """)
    subprocess.run([sys.executable, "-c", code], check=True)
    subprocess.run(
        [sys.executable, "-c", "import xarray as xr, vdbflow; assert hasattr(xr.Dataset, 'vdbflow')"], check=True
    )


# -- a local cluster whose worker dies while it starts is started again -----------------------------------


DIE_ONCE = """
import os

def dask_setup(worker):
    try:
        fd = os.open({marker!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.close(fd)
    os._exit(1)  # the first worker process to start dies, as a kill would leave it
"""


@pytest.mark.slow
def test_a_worker_killed_while_the_cluster_starts_is_retried(tmp_path, monkeypatch, caplog):
    import dask

    preload = tmp_path / "die_once.py"
    preload.write_text(DIE_ONCE.format(marker=str(tmp_path / "died")))
    monkeypatch.setattr(clusters, "START_BACKOFF_S", 0.1)
    spec = LocalClusterSpec(kind="local", workers=2, dashboard=False)
    with (
        caplog.at_level(logging.WARNING, logger="vdbflow.cluster"),
        dask.config.set({"distributed.worker.preload": [str(preload)]}),
        clusters.open_cluster(spec) as client,
    ):
        assert (tmp_path / "died").exists()  # a worker did die during the start
        client.wait_for_workers(2, timeout=30)
        assert client.submit(lambda: 42).result(timeout=60) == 42
    retries = [r.getMessage() for r in caplog.records if "starting it again" in r.getMessage()]
    assert len(retries) == 1 and "attempt 2 of 3" in retries[0] and "Nanny failed to start" in retries[0]


def test_cluster_start_attempts_are_bounded(monkeypatch, caplog):
    import distributed

    calls = []

    def never(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("Nanny failed to start.")

    monkeypatch.setattr(distributed, "LocalCluster", never)
    monkeypatch.setattr(clusters, "START_BACKOFF_S", 0.0)
    with (
        pytest.raises(clusters.ClusterError, match="failed 3 times.*Nanny failed to start"),
        caplog.at_level(logging.WARNING, logger="vdbflow.cluster"),
    ):
        with clusters.open_cluster(LocalClusterSpec(kind="local", workers=1, dashboard=False)):
            pass
    assert len(calls) == clusters.START_ATTEMPTS == 3
    assert sum("starting it again" in r.getMessage() for r in caplog.records) == 2
    # a mistake in the config is not retried
    monkeypatch.setattr(
        distributed,
        "LocalCluster",
        lambda **kw: calls.append(kw) or (_ for _ in ()).throw(ValueError("bad memory_limit")),
    )
    with pytest.raises(ValueError, match="bad memory_limit"):
        with clusters.open_cluster(LocalClusterSpec(kind="local", workers=1, dashboard=False)):
            pass
    assert len(calls) == 4


# -- SLURM clusters: options passed through, adapt, waiting for workers (a stand-in for SLURMCluster) --------


class _StandInJobqueue:
    """A module like dask_jobqueue whose SLURMCluster is an in-process LocalCluster: each 'job' is a worker."""

    def __init__(self):
        self.calls = {}
        import distributed

        calls = self.calls

        class SLURMCluster(distributed.LocalCluster):
            def __init__(self, name, scheduler_options, **options):
                calls["options"] = options
                self.started = False
                super().__init__(n_workers=0, processes=False, dashboard_address=None)
                self.started = True

            def adapt(self, **kwargs):
                calls["adapt"] = kwargs

            def scale(self, jobs=None, **kwargs):
                if self.started:  # LocalCluster scales to n_workers while it starts (and to 0 to close)
                    calls.setdefault("scale", []).append(jobs)
                return super().scale(jobs or 0)

        self.SLURMCluster = SLURMCluster


def _slurm_spec(**keys):
    cfg = load_config(
        data={
            "volume": {"synthetic": {"field": "abc"}},
            "points": {"kind": "random", "count": 1},
            "output": {"path": "x.zarr"},
            "cluster": {"kind": "slurm", "queue": "q", "cores": 4, "memory": "8GB", "dashboard": False, **keys},
        }
    )
    return cfg.cluster


def test_slurm_adapt_and_a_wait_that_times_out(monkeypatch):
    fake = _StandInJobqueue()
    monkeypatch.setattr(clusters, "_jobqueue", lambda: fake)
    monkeypatch.setattr(clusters, "_job_options", lambda spec: {})
    spec = _slurm_spec(
        adapt={"minimum_jobs": 0, "maximum_jobs": 3},
        wait_timeout=0.5,
        jobqueue_options={"log_directory": "logs", "death_timeout": 120},
    )
    with pytest.raises(
        clusters.ClusterError,
        match=r"expected 1 worker\(s\) within cluster.wait_timeout \(0.5 s\), "
        r"got 0",
    ):
        with clusters.open_cluster(spec):
            pass
    assert fake.calls["adapt"] == {"minimum_jobs": 0, "maximum_jobs": 3}
    assert not any(fake.calls.get("scale", []))  # no fixed number of jobs
    assert fake.calls["options"]["log_directory"] == "logs" and fake.calls["options"]["death_timeout"] == 120
    assert fake.calls["options"]["queue"] == "q"


def test_slurm_jobs_are_waited_for(monkeypatch):
    fake = _StandInJobqueue()
    monkeypatch.setattr(clusters, "_jobqueue", lambda: fake)
    monkeypatch.setattr(clusters, "_job_options", lambda spec: {})
    with clusters.open_cluster(_slurm_spec(jobs=2, wait_for_workers=2, wait_timeout="1min")) as client:
        assert len(client.scheduler_info()["workers"]) == 2
    assert fake.calls["scale"][0] == 2


@pytest.mark.parametrize(
    "keys,text",
    [
        ({"jobs": 2, "adapt": {"maximum_jobs": 4}}, "either 'jobs'"),
        ({"adapt": {"minimum_jobs": 5, "maximum_jobs": 4}}, "minimum_jobs <= maximum_jobs"),
        ({"wait_for_workers": 3}, "wait_for_workers <= 1"),
        ({"wait_timeout": "soon"}, "duration like"),
        ({"jobqueue_options": {"queue": "other", "n_workers": 2}}, "'n_workers' is 'jobs'"),
    ],
)
def test_slurm_section_errors(keys, text):
    with pytest.raises(ConfigError, match=text):
        _slurm_spec(**keys)


def test_slurm_wait_timeout_units():
    assert _slurm_spec(wait_timeout="30min").wait_timeout == 1800
    assert _slurm_spec(wait_timeout="2h").wait_timeout == 7200
    assert _slurm_spec(wait_timeout=90).wait_timeout == 90


def test_unknown_jobqueue_options_are_refused():
    pytest.importorskip("dask_jobqueue")
    with pytest.raises(ConfigError, match=r"\['lifetime_of_the_universe'\] are not options"):
        clusters.slurm_job_script(_slurm_spec(jobqueue_options={"lifetime_of_the_universe": 1}))
    script = clusters.slurm_job_script(_slurm_spec(jobqueue_options={"worker_extra_args": ["--lifetime", "55m"]}))
    assert "--lifetime 55m" in script


# -- reprs, docstrings and packaging ----------------------------------------------------------------------------


def test_sample_grad_vjp_repr_is_short():
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    pts = np.full((1000, 3), np.pi)
    out = vdbflow.sample_grad_vjp(vol, pts, adj_value=np.ones((1000, 3), np.float32))
    text = repr(out)
    assert text.startswith("SampleGradVJP(") and len(text) < 300 and "\n" not in text
    assert "points (1000, 3)" in text and "voxel_data" in text


def test_distributed_volume_repr_is_short(client):
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    dvol = vdbflow.distribute(vol, client, partitions=2)
    try:
        text = repr(dvol)
        assert text.startswith("<DistributedVolume 'velocity'") and len(text) < 300 and "\n" not in text
    finally:
        dvol.close()


def test_license_matches_pyproject_and_py_typed_is_shipped():
    declared = re.search(
        r'^license\s*=\s*(?:\{\s*text\s*=\s*)?"([^"]+)"', (REPO / "pyproject.toml").read_text(), flags=re.MULTILINE
    )
    assert declared is not None and declared.group(1) == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
    assert (Path(vdbflow.__file__).parent / "py.typed").is_file()
    assert os.path.getsize(Path(vdbflow.__file__).parent / "py.typed") == 0


def test_public_names_are_one_table():
    """``vdbflow.__all__`` is the error types plus the lazy table, and the TYPE_CHECKING imports (for type
    checkers) name exactly the objects of that table."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(vdbflow))
    typing_block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    declared = {}
    for node in typing_block.body:
        assert isinstance(node, ast.ImportFrom) and node.module.startswith("vdbflow.")
        for alias in node.names:
            declared[alias.asname or alias.name] = (node.module.removeprefix("vdbflow."), alias.name)
    assert declared == vdbflow._LAZY
    eager = [n for n in vdbflow.__all__ if n not in vdbflow._LAZY]
    assert eager and all(issubclass(getattr(vdbflow.errors, n), vdbflow.VdbflowError | ValueError) for n in eager)
    for name in vdbflow.__all__:
        assert getattr(vdbflow, name) is not None
