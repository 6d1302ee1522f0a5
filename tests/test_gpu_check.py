"""scripts/gpu_check.py, rehearsed on every commit: ``--emulate`` runs every step of the GPU machine's check
under vdbflow's emulation of CUDA, passes them all, installs nothing and leaves nothing in the checkout; a step
that did not run is a FAIL and makes the exit status non-zero; the benchmark it runs reads no
``memoryClockRate`` and checks its results."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "scripts" / "gpu_check.py"


def _run(*args: str, out: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VDBFLOW_CUDA_EMULATE", "OUT")}
    return subprocess.run(
        [sys.executable, str(CHECK), *args], capture_output=True, text=True, env={**env, "OUT": str(out)}, timeout=1800
    )


def _untracked() -> list[str]:
    """Untracked and ignored paths of the checkout (other work may add its own meanwhile: compared by name)."""
    cmd = ["git", "status", "--porcelain", "--ignored", "--untracked-files=all"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO).stdout.splitlines()


@pytest.mark.slow
def test_the_emulated_check_passes_every_step_and_changes_nothing(tmp_path):
    freeze = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True).stdout
    before = set(_untracked())
    done = _run("--emulate", out=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    names = ["install", "import", "machine", "build", "warm-load", "compare", "workers", "bench", "gpu-tests"]
    assert [s["name"] for s in summary["steps"]] == names
    assert summary["passed"] is True and summary["mode"] == "emulated"
    assert all(s["status"] == "PASS" for s in summary["steps"])
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("PASS ", "FAIL "))]
    assert [ln.split()[:2] for ln in lines] == [["PASS", n] for n in names]
    steps = {s["name"]: s for s in summary["steps"]}
    assert "nothing to install" in steps["install"]["detail"]
    compare = steps["compare"]["result"]["checks"]
    assert len(compare) > 100 and all(c["max_error"] <= c["tolerance"] for c in compare)
    assert any(c["tolerance"] == 0 and "histogram counts" in c["what"] for c in compare)
    bench = steps["bench"]["result"]["report"]
    assert bench["checked"] is True and bench["copy bandwidth"] > 0 and len(bench["kernel random seconds"]) == 2
    assert len(set(steps["workers"]["result"]["runs"][0]["worker_pids"])) == 2
    assert steps["gpu-tests"]["result"]["passed"] > 0
    assert subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True).stdout == freeze
    assert not Path(summary["work"]).exists()  # the venv / cache folder, a temporary one, is gone
    new = set(_untracked()) - before
    assert not [p for p in new if "gpu" in p or "cuda" in p or "wheel" in p], new  # nothing left in the checkout


@pytest.mark.slow
def test_a_step_that_did_not_run_is_a_failure(tmp_path):
    done = _run("--emulate", "--only", "import", out=tmp_path)
    assert done.returncode == 1
    summary = json.loads((tmp_path / "gpu-check.json").read_text())
    status = {s["name"]: s["status"] for s in summary["steps"]}
    assert status["import"] == "PASS" and status["compare"] == "FAIL" and summary["passed"] is False
    assert "FAIL compare (0.0 s)" in done.stdout and "gpu_check: 1/9 steps passed" in done.stdout


def test_emulate_refuses_a_wheelhouse(tmp_path):
    done = _run("--emulate", "--wheelhouse", str(tmp_path), out=tmp_path)
    assert done.returncode == 2 and "--emulate installs nothing" in done.stderr


def test_the_benchmark_reads_no_removed_device_property():
    text = (REPO / "benchmarks" / "bench_gpu_job.py").read_text()
    assert "memoryClockRate" not in text and "get_elapsed_time" in text
    shell = (REPO / "scripts" / "gpu_check.sh").read_text()
    assert "gpu_check.py" in shell and "PIPESTATUS" not in shell and "pip install" not in shell
