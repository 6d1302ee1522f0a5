"""The GPU check: one prepared run that proves a machine's GPU in at most 8 minutes, or its rehearsal on the
CPU (``--emulate``), each step in a process of its own with its own time limit.

    python scripts/gpu_check.py                       # on a GPU machine whose Python already has vdbflow
    python scripts/gpu_check.py --wheelhouse WH       # offline: vdbflow and its needs from WH, into a folder of its own
    python scripts/gpu_check.py --emulate             # every step under VDBFLOW_CUDA_EMULATE=1, small sizes

Steps (scripts/gpu_check_steps.py): ``install`` (only with --wheelhouse: the wheelhouse's pins and vdbflow
built from this checkout, offline, into a folder of the work folder put first on PYTHONPATH), ``import`` (vdbflow and
its compiled extension from outside the checkout, so that the source tree cannot shadow the installed
package), ``machine``, ``build`` (every entry into an empty cache, each image loaded, resources and blocks a
multiprocessor), ``warm-load`` (a fresh process's first call loads its entry from the cache), ``compare``
(every operation against the CPU, random and sorted points), ``workers`` (two worker processes a GPU with
partitions and halos, equal to one process), ``bench`` (sample_grad on 32M points with CUDA events) and
``gpu-tests`` (the suite's GPU tests on the GPU; under --emulate a few of them).

A step that fails, times out or does not run (an earlier step it needs failed) is a FAIL; the exit status
is 0 only when every step passed.  One ``PASS``/``FAIL`` line a step; the JSON summary goes to
``$OUT/gpu-check.json`` when OUT is set (or --out), with each step's output beside it.  Nothing is installed
into the environment that runs the check, and nothing is left in the checkout: the work folder (packages,
build folder, build cache) is a temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STEPS_SCRIPT = REPO / "scripts" / "gpu_check_steps.py"


@dataclass(frozen=True)
class Step:
    name: str
    timeout: float  # seconds, on a GPU machine
    emulate_timeout: float  # seconds under --emulate
    needs: tuple[str, ...] = ()


# the limits add up to 8 minutes on the GPU machine (install included)
STEPS = (
    Step("install", 150, 0),
    Step("import", 15, 60, ("install",)),
    Step("machine", 10, 60, ("import",)),
    Step("build", 75, 900, ("machine",)),  # emulated: the one library, compiled once for the suite too
    Step("warm-load", 10, 120, ("build",)),
    Step("compare", 60, 300, ("warm-load",)),
    Step("workers", 45, 300, ("build",)),
    Step("bench", 60, 300, ("build",)),
    Step("gpu-tests", 55, 300, ("build",)),
)


@dataclass
class Outcome:
    name: str
    status: str  # PASS, FAIL
    seconds: float
    detail: str
    result: dict = field(default_factory=dict)


def install(work: Path, wheelhouse: str, timeout: float) -> tuple[bool, str]:
    """The wheelhouse's pins and vdbflow built from this checkout (no build isolation: the image's compiler,
    CMake, scikit-build-core and nanobind), offline, into ``work/site``: a folder of the check's own that the
    steps put first on PYTHONPATH (a venv made from the image's Python, itself a venv, would not see the
    image's CuPy); the build folder is under ``work`` too, so nothing is written into the checkout."""
    site = work / "site"
    start = time.monotonic()
    log = []
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
    pip += ["--target", str(site)]
    commands = [
        [*pip, "--find-links", wheelhouse, "-r", str(Path(wheelhouse) / "requirements.txt")],
        [*pip, "--no-build-isolation", "-C", f"build-dir={work / 'build'}", str(REPO)],
    ]
    for cmd in commands:
        left = timeout - (time.monotonic() - start)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, left))
        except subprocess.TimeoutExpired:
            return False, "\n".join(log) + f"\ntimed out: {' '.join(cmd)}"
        log.append(f"$ {' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
        if done.returncode != 0:
            return False, "\n".join(log)
    return True, "\n".join(log)


def run_step(step: Step, python: str, work: Path, args: argparse.Namespace, env: dict) -> Outcome:
    """One step of scripts/gpu_check_steps.py in a fresh process, from the work folder (not the checkout)."""
    result_file = work / f"{step.name}.json"
    result_file.unlink(missing_ok=True)
    cmd = [python, "-P", str(STEPS_SCRIPT), step.name, "--result", str(result_file), "--repo", str(REPO)]
    cmd += ["--points", str(args.points)] + (["--emulate"] if args.emulate else [])
    limit = step.emulate_timeout if args.emulate else step.timeout
    start = time.monotonic()
    # a session of its own: a step that runs out of time is ended with every process it started (compilers,
    # workers), not only its Python
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work, env=env, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=limit)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return Outcome(step.name, "FAIL", time.monotonic() - start, f"timed out after {limit:.0f} s\n{output}")
    seconds = time.monotonic() - start
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    ok = code == 0 and result.get("ok") is True
    detail = output if not ok else result.get("summary", "")
    if code == 0 and not ok:
        detail = f"the step exited 0 without reporting success\n{output}"
    return Outcome(step.name, "PASS" if ok else "FAIL", seconds, detail, result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emulate", action="store_true", help="every step under VDBFLOW_CUDA_EMULATE=1, small sizes")
    parser.add_argument("--wheelhouse", default=os.environ.get("WHEELHOUSE") or None, help="install offline from it")
    parser.add_argument("--out", default=os.environ.get("OUT") or None, help="folder of the JSON summary ($OUT)")
    parser.add_argument("--points", type=int, default=None, help="benchmark points (default 32M; 20k emulated)")
    parser.add_argument("--only", default=None, help="comma-separated steps to run (the others are FAIL: not run)")
    args = parser.parse_args(argv)
    if args.points is None:
        args.points = 20_000 if args.emulate else 32 * 2**20
    if args.emulate and args.wheelhouse:
        parser.error("--emulate installs nothing: leave out --wheelhouse")
    work = Path(tempfile.mkdtemp(prefix="vdbflow-gpu-check-"))
    out = Path(args.out) if args.out else None
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("VDBFLOW_CUDA_EMULATE", None)
    if args.emulate:  # the emulation's one library comes from the usual cache (built once, by the suite too)
        env.update(VDBFLOW_CUDA_EMULATE="1", VDBFLOW_CUDA_EMULATE_THREADS="2")
    else:  # every entry compiled into an empty cache of its own
        env.update(VDBFLOW_REQUIRE_GPU="1", VDBFLOW_CUDA_CACHE=str(work / "cuda-cache"))
    python = sys.executable
    if args.wheelhouse:  # the check's own packages first: the image's Python is left as it is
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work / "site"), env.get("PYTHONPATH", "")]))
    only = set(args.only.split(",")) if args.only else None
    outcomes: dict[str, Outcome] = {}
    started = time.monotonic()
    for step in STEPS:
        missing = [
            n for n in step.needs if n in outcomes and outcomes[n].status != "PASS" and (only is None or n in only)
        ]
        if only is not None and step.name not in only:
            outcome = Outcome(step.name, "FAIL", 0.0, "not run (--only)")
        elif step.name == "install":
            if args.emulate or not args.wheelhouse:
                why = "--emulate installs nothing" if args.emulate else "no --wheelhouse: the running Python is checked"
                outcome = Outcome(step.name, "PASS", 0.0, f"nothing to install ({why})")
            else:
                t0 = time.monotonic()
                ok, log = install(work, args.wheelhouse, step.timeout)
                outcome = Outcome(step.name, "PASS" if ok else "FAIL", time.monotonic() - t0, log[-6000:])
        elif missing:
            outcome = Outcome(step.name, "FAIL", 0.0, f"not run: {', '.join(missing)} did not pass")
        else:
            outcome = run_step(step, python, work, args, env)
        outcomes[step.name] = outcome
        first = outcome.detail.strip().splitlines()[:1] if outcome.status == "PASS" else []
        print(f"{outcome.status} {step.name} ({outcome.seconds:.1f} s){': ' + first[0] if first else ''}", flush=True)
        if outcome.status == "FAIL":
            print("    " + "\n    ".join(outcome.detail.strip().splitlines()[-25:]), flush=True)
    passed = all(o.status == "PASS" for o in outcomes.values())
    summary = {
        "passed": passed,
        "mode": "emulated" if args.emulate else "gpu",
        "seconds": round(time.monotonic() - started, 1),
        "work": str(work),  # removed at the end
        "steps": [asdict(o) for o in outcomes.values()],
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu-check.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"gpu_check: {sum(o.status == 'PASS' for o in outcomes.values())}/{len(outcomes)} steps passed", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
