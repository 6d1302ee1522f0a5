"""A SLURM job whose submission fails (issue 26, row 1): `sbatch` refusing the job printed 240-330 lines
of asyncio tracebacks, waited `wait_timeout` (2 h in configs/slurm.yaml) and ended with `AssertionError:
Status.created`. Now the submission's own error (the command, its exit status, what it printed) is one
`error:` line as soon as the job is refused, exit 1 (a ClusterError), and a missing `sbatch` is said
before anything starts. The subprocess timeouts below only guard against a hang."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.skipif(importlib.util.find_spec("dask_jobqueue") is None, reason="needs dask-jobqueue")

REFUSAL = "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified"
VDBFLOW = Path(sys.executable).with_name("vdbflow")
HANG_GUARD_S = 120


def slurm_job(tmp_path: Path, **cluster) -> Path:
    cfg = {
        "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
        "points": {"kind": "random", "count": 2_000, "chunk": 1_000},
        "cluster": {
            "kind": "slurm",
            "queue": "compute",
            "account": "flowlab",
            "cores": 4,
            "memory": "8GB",
            "processes": 2,
            "jobs": 3,
            "wait_for_workers": 2,
            "wait_timeout": "2h",  # as configs/slurm.yaml: nothing may wait for it
            "dashboard": False,
            **cluster,
        },
        "output": {"path": str(tmp_path / "result.zarr")},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def fake_sbatch(tmp_path: Path, script: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text("#!/bin/sh\n" + script)
    sbatch.chmod(0o755)
    return bin_dir


def run(config: Path, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [str(VDBFLOW), "run", str(config)], capture_output=True, text=True, env=env, timeout=HANG_GUARD_S
    )


@pytest.mark.parametrize("scaling", ["jobs", "adapt"])
def test_a_refused_submission_is_one_line_with_sbatchs_error(tmp_path, scaling):
    bin_dir = fake_sbatch(tmp_path, f'echo "{REFUSAL}" >&2\nexit 1\n')
    config = slurm_job(tmp_path)
    if scaling == "adapt":  # dask-jobqueue's adaptive scaling submits the jobs itself
        spec = yaml.safe_load(config.read_text())
        del spec["cluster"]["jobs"]
        spec["cluster"]["adapt"] = {"minimum_jobs": 1, "maximum_jobs": 3}
        config.write_text(yaml.safe_dump(spec))
    done = run(config, f"{bin_dir}:{VDBFLOW.parent}:{os.environ['PATH']}")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) < 30 and "Traceback" not in done.stderr, done.stderr
    (error,) = [line for line in lines if line.startswith("error: ")]
    assert REFUSAL in error and "exited with status 1" in error and "`sbatch " in error, error
    assert "cluster.queue 'compute'" in error and "wait_timeout" not in error
    assert "AssertionError" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "result.zarr").exists()


def test_an_unreadable_submission_answer_is_said_too(tmp_path):
    bin_dir = fake_sbatch(tmp_path, 'echo "sbatch: queued, but I will not say as what"\nexit 0\n')
    done = run(slurm_job(tmp_path), f"{bin_dir}:{VDBFLOW.parent}:{os.environ['PATH']}")
    assert done.returncode == 1 and len(done.stderr.splitlines()) < 30, done.stderr
    assert "error: expected the SLURM jobs of the workers to be submitted" in done.stderr
    assert "Could not parse job id" in done.stderr and "I will not say as what" in done.stderr, done.stderr


def test_no_sbatch_on_path_is_said_before_anything_starts(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    path = f"{empty}:{VDBFLOW.parent}:/usr/bin:/bin"
    if shutil.which("sbatch", path=path) is not None:
        pytest.skip("this machine has SLURM's sbatch")
    done = run(slurm_job(tmp_path), path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: expected SLURM's 'sbatch' on PATH to submit the workers' jobs, found none (PATH={path}): run "
        "`vdbflow run` where SLURM's commands are (a login node), or use cluster.kind 'local' or 'address'"
    ]


def test_a_dry_run_notes_a_missing_sbatch(tmp_path):
    """--dry-run of a SLURM job where sbatch is not on PATH: the plan warns that the run would stop at the
    start (issue 41 row 10: the dry run passed silently), exit 0 as dry runs do with warnings; with a (fake)
    sbatch on PATH there is no such warning."""
    empty = tmp_path / "bin"
    empty.mkdir()
    path = f"{empty}:{VDBFLOW.parent}:/usr/bin:/bin"
    if shutil.which("sbatch", path=path) is not None:
        pytest.skip("this machine has SLURM's sbatch")
    config = slurm_job(tmp_path)
    env = {**os.environ, "PATH": path, "COLUMNS": "300"}
    done = subprocess.run(
        [str(VDBFLOW), "run", str(config), "--dry-run"], capture_output=True, text=True, env=env, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stderr
    assert "expected SLURM's 'sbatch' on PATH" in done.stdout + done.stderr
    (tmp_path / "with").mkdir()
    found = fake_sbatch(tmp_path / "with", "echo 'Submitted batch job 1'\n")
    env["PATH"] = f"{found}:{path}"
    done = subprocess.run(
        [str(VDBFLOW), "run", str(config), "--dry-run"], capture_output=True, text=True, env=env, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stderr
    assert "sbatch" not in (done.stdout + done.stderr).replace("#SBATCH", "")
