"""The command line: ``--help`` on every command, and the entry point installed as ``vdbflow``."""

import shutil
import subprocess

from click.testing import CliRunner

from vdbflow.jobs.cli.main import main


def test_help_on_every_command():
    commands = sorted(main.commands)
    assert {"run", "demo", "convert", "info", "clean"} <= set(commands)
    for args in [["--help"]] + [[c, "--help"] for c in commands]:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0 and "Usage" in result.output, (args, result.output)


def test_console_script_is_installed():
    exe = shutil.which("vdbflow")
    assert exe is not None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("vdbflow, version")


# -- output streams: results on stdout; errors, warnings and logs on stderr, unwrapped and not markup ------

import importlib.util  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

import vdbflow  # noqa: E402
from vdbflow import synthetic  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def invoke(*args, columns: int = 80):
    """The CLI as in an 80-column terminal (rich wraps to COLUMNS when it wraps at all)."""
    return CliRunner(env={"COLUMNS": str(columns)}).invoke(main, [str(a) for a in args], catch_exceptions=False)


def small_job(tmp_path: Path, **sections) -> Path:
    cfg = {
        "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
        "points": {"kind": "random", "count": 2_000, "chunk": 1_000},
        "cluster": {"kind": "local", "workers": 1, "dashboard": False},
        "output": {"path": str(tmp_path / "result.zarr")},
    }
    cfg.update(sections)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_config_errors_go_to_stderr_unwrapped(tmp_path):
    deep = tmp_path / ("a-directory-with-a-name-long-enough-to-need-wrapping-at-eighty-columns" * 2) / "v.nvdb"
    result = invoke("run", small_job(tmp_path, volume={"path": str(deep)}))
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "config error: the job cannot start:"
    assert any(line.endswith(f"found nothing at {deep}") for line in lines), result.stderr  # one line, whole path


def test_install_hints_keep_their_brackets(tmp_path, monkeypatch):
    from vdbflow.version import install_hint

    monkeypatch.setitem(sys.modules, "dask_jobqueue", None)  # as if not installed: import raises ImportError
    slurm = {"kind": "slurm", "queue": "q", "cores": 2, "memory": "4GB", "dashboard": False}
    result = invoke("run", small_job(tmp_path, cluster=slurm))
    assert result.exit_code == 2 and install_hint("slurm") in result.stderr, result.stderr
    # a dry run goes on without the job script, and says why
    result = invoke("run", small_job(tmp_path, cluster=slurm), "--dry-run")
    assert result.exit_code == 0 and "nothing has run" in result.stdout
    assert "warning: cluster" in result.stderr and install_hint("slurm") in result.stderr
    assert "#SBATCH" not in result.stdout
    if importlib.util.find_spec("dask_cuda") is None:
        result = invoke("run", small_job(tmp_path, cluster={"kind": "cuda", "dashboard": False}))
        assert result.exit_code == 2 and install_hint("gpu") in result.stderr, result.stderr
        result = invoke("run", small_job(tmp_path, cluster={"kind": "cuda", "dashboard": False}), "--dry-run")
        assert result.exit_code == 0 and "[gpu]" in result.stdout, result.stdout  # in the plan's table


@pytest.mark.parametrize(
    ("direct_url", "hint"),
    [
        (
            '{"url": "file:///home/me/vdbflow", "dir_info": {"editable": true}}',
            'pip install -e "/home/me/vdbflow[gpu]"',
        ),
        ('{"url": "file:///src/my%20vdbflow", "dir_info": {}}', 'pip install "/src/my vdbflow[gpu]"'),
        ('{"url": "https://example.org/vdbflow.whl", "archive_info": {}}', 'pip install "vdbflow[gpu]"'),
        (None, 'pip install "vdbflow[gpu]"'),  # from an index: no direct_url.json
    ],
)
def test_install_hints_fit_how_vdbflow_was_installed(monkeypatch, direct_url, hint):
    """Issue 50 row 1: vdbflow is not on an index, so `pip install "vdbflow[gpu]"` fails from a checkout; the
    hint follows PEP 610's record of where this vdbflow came from."""
    from vdbflow import version
    from vdbflow.version import install_hint

    class Found:
        def read_text(self, name):
            return direct_url if name == "direct_url.json" else None

    monkeypatch.setattr(version, "distribution", lambda name: Found())
    assert install_hint("gpu") == hint


@pytest.mark.slow
def test_verbose_logs_go_to_stderr_and_the_summary_to_stdout(tmp_path):
    result = invoke("run", small_job(tmp_path), "-v")
    assert result.exit_code == 0, result.output
    assert "summary" in result.stdout and "2,000" in result.stdout
    logs = [line for line in result.stderr.splitlines() if " INFO vdbflow.run: " in line]
    assert any("writing 2000 points to" in line and line.rstrip().endswith("when complete)") for line in logs), (
        result.stderr
    )
    assert "INFO" not in result.stdout


def test_templates_dry_run_as_the_readme_says_with_inputs_missing():
    """`vdbflow run configs/X.yaml --dry-run` where the templates' inputs are not: exit 0, a plan on
    stdout, each missing input a warning on stderr (a run would stop there: exit 2)."""
    for template, missing in (
        ("slurm", ("volume.path", "points.path")),
        ("cuda", ("volume.path",)),
        ("remote", ("volume.path",)),
    ):
        path = REPO / "configs" / f"{template}.yaml"
        if template == "slurm" and importlib.util.find_spec("dask_jobqueue") is None:
            missing += ("cluster",)
        if template == "slurm" and shutil.which("sbatch") is None:  # said by the plan: the run stops at the start
            missing += ("cluster",)
        result = invoke("run", path, "--dry-run")
        assert result.exit_code == 0, (template, result.output)
        assert "nothing has run" in result.stdout and "not read" in result.stdout
        warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
        assert [w.split()[1] for w in warnings] == list(missing), result.stderr
        assert invoke("run", path).exit_code == 2


def test_slurm_dry_run_prints_the_job_script_verbatim(tmp_path):
    """At 80 columns the worker command stays one line (rich used to wrap it), the venv's python runs the
    workers, and jobqueue_options reach the script."""
    pytest.importorskip("dask_jobqueue")
    result = invoke("run", REPO / "configs" / "slurm.yaml", "--dry-run")
    assert result.exit_code == 0, result.output
    script = result.stdout[result.stdout.index("#!/usr/bin/env bash") :]
    worker = [line for line in script.splitlines() if "distributed.cli.dask_worker" in line]
    assert len(worker) == 1 and len(worker[0]) > 80
    assert worker[0].startswith("python -m distributed.cli.dask_worker tcp://<scheduler address>:8786 ")
    for part in ("--nworkers 8", "--nthreads 4", "--local-directory $TMPDIR", "--lifetime 115m"):
        assert part in worker[0], (part, worker[0])
    assert "#SBATCH -o vdbflow-logs/" in script and "source $HOME/venvs/vdbflow/bin/activate" in script
    assert not Path("vdbflow-logs").exists()  # a dry run makes no log directory


def test_slurm_options_are_checked_in_the_dry_run(tmp_path):
    pytest.importorskip("dask_jobqueue")
    slurm = {"kind": "slurm", "queue": "q", "cores": 2, "memory": "4GB", "jobqueue_options": {"no_such_option": 1}}
    result = invoke("run", small_job(tmp_path, cluster=slurm), "--dry-run")
    assert result.exit_code == 2 and "['no_such_option'] are not options" in result.stderr
    slurm["jobqueue_options"] = {"queue": "other"}
    result = invoke("run", small_job(tmp_path, cluster=slurm), "--dry-run")
    assert result.exit_code == 2 and "cluster.jobqueue_options" in result.stderr and "['queue']" in result.stderr
    slurm["jobqueue_options"] = {}
    slurm["adapt"] = {"minimum_jobs": 1, "maximum_jobs": 6}
    result = invoke("run", small_job(tmp_path, cluster=slurm), "--dry-run")
    assert result.exit_code == 0 and "1 to 6 job(s)" in result.stdout.replace("\n", " ").replace("│", "")


# -- vdbflow info ------------------------------------------------------------------------------------------


def nvdb_files(tmp_path: Path) -> tuple[Path, Path]:
    tg = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    rho = vdbflow.Volume.from_voxels(np.array([[0, 0, 0], [9, 9, 9]]), np.ones(2, np.float32), name="rho")
    vdbflow.save(tmp_path / "two.nvdb", {"velocity": tg, "rho": rho})
    vdbflow.save(tmp_path / "one.nvdb", {"rho": rho})
    return tmp_path / "two.nvdb", tmp_path / "one.nvdb"


def test_info_fits_80_columns_and_takes_several_files(tmp_path):
    two, one = nvdb_files(tmp_path)
    result = invoke("info", two, one)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    headings = [f"{p}: {n} grid(s), {p.stat().st_size:,} bytes" for p, n in ((two, 2), (one, 1))]
    assert all(h in lines for h in headings)  # a heading per file, its path unwrapped, with the file's size
    assert max(len(line) for line in lines if line not in headings) <= 80
    for text in ("'velocity'", "'rho'", "Vec3f", "active voxels", "data box (world)", "voxel size"):
        assert text in result.stdout, text


def test_info_json(tmp_path):
    two, one = nvdb_files(tmp_path)
    (tmp_path / "smoke.vdb").write_bytes(b" BDV" + bytes(60))
    result = invoke("info", "--json", two, tmp_path / "smoke.vdb", one)
    assert result.exit_code == 2  # one file could not be read; the others are listed
    listing = json.loads(result.stdout)
    assert [Path(e["path"]).name for e in listing] == ["two.nvdb", "smoke.vdb", "one.nvdb"]
    assert [g["name"] for g in listing[0]["grids"]] == ["velocity", "rho"]
    assert listing[0]["grids"][1]["active_voxel_count"] == 2 and listing[0]["grids"][0]["grid_type"] == "Vec3f"
    assert "file format version" in listing[1]["error"] and "found version 0" in listing[1]["error"]
    assert "grids" not in listing[1]
    assert listing[2]["grids"][0]["index_bbox"] == [[0, 0, 0], [9, 9, 9]]


def test_info_of_a_broken_openvdb_file_names_the_byte(tmp_path):
    (tmp_path / "smoke.vdb").write_bytes(b" BDV" + bytes(60))  # OpenVDB's magic, then version 0
    result = invoke("info", tmp_path / "smoke.vdb")
    assert result.exit_code == 2 and result.stdout == ""
    assert "at byte 8" in result.stderr and "found version 0" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_device_cuda_on_an_embedded_cpu_cluster_is_refused_at_plan_time(tmp_path, monkeypatch):
    """A LocalCluster would put every worker on GPU 0: the plan refuses and names cluster.kind: cuda (under
    the CUDA emulation the one emulated device is the CPU, and the job may run there)."""
    monkeypatch.delenv("VDBFLOW_CUDA_EMULATE", raising=False)
    job = small_job(tmp_path, sampling={"device": "cuda"}, cluster={"kind": "local", "dashboard": False})
    result = invoke("run", job, "--dry-run")
    assert result.exit_code == 2, result.stdout
    assert "expected cluster.kind: cuda" in result.stderr and "got cluster.kind: local" in result.stderr
    assert invoke("run", small_job(tmp_path, sampling={"device": "cuda"}, cluster={"kind": "local", "workers": 2}),
                  "--dry-run").exit_code == 2  # fmt: skip
    one = {"kind": "local", "workers": 1, "dashboard": False}
    assert invoke("run", small_job(tmp_path, sampling={"device": "cuda"}, cluster=one), "--dry-run").exit_code == 0
    monkeypatch.setenv("VDBFLOW_CUDA_EMULATE", "1")
    assert invoke("run", job, "--dry-run").exit_code == 0
