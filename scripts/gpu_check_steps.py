"""The steps of scripts/gpu_check.py, one a process: ``python -P gpu_check_steps.py STEP --result FILE``.

Each step writes ``{"ok": bool, "summary": str, ...}`` to FILE and exits 0 when it passed.  Under
``--emulate`` (VDBFLOW_CUDA_EMULATE=1, set by the runner) the array module is vdbflow's emulation of CUDA
and the sizes are small; otherwise CuPy on the GPU.

Tolerances (docs/gpu.md "Bits"): the GPU contracts ``a*b + c`` into FMAs where the CPU's baseline target
does not; each contraction skips one rounding of a product, so a value made of the ``m`` taps an axis of a
scheme (three nested weighted sums) differs by at most ``3·m·eps·L³·max|v|`` (``L``: the sum of a tap's
absolute weights, ``L³`` the stencil's); the check allows twice that.  Closest samples, integer data,
statistics' counts of closest samples and the derived quantities of equal Jacobians are exact.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

# taps an axis and the sum of a tap's absolute weights (Lebesgue constant, rounded up) of each scheme
SCHEME_TAPS = {
    "closest": (0, 1.0),
    "linear": (2, 1.0),
    "lag4": (4, 1.25),
    "lag6": (6, 1.4),
    "lag8": (8, 1.6),
    "fd2": (4, 1.5),
    "fd4": (6, 2.0),
    "fd6": (8, 2.5),
    "fd8": (10, 3.0),
    "fd4lag4": (8, 2.5),
    "catmull_rom": (4, 1.25),
    "bspline3": (4, 1.0),
    "m2q8": (8, 1.6),
}


def tolerance(mode: str, dtype: Any, scale: float, derivative: int = 0) -> float:
    """The FMA bound of a scheme's values (derivative 0), Jacobians (1) or Hessians (2) at data of ``scale``."""
    taps, lebesgue = SCHEME_TAPS[mode]
    eps = float(np.finfo(np.dtype(dtype) if np.dtype(dtype).kind == "f" else np.float64).eps)
    return 2 * 3 * taps * lebesgue**3 * (4.0**derivative) * eps * max(scale, 1.0)


class StepFailed(Exception):
    pass


def xp_module(emulate: bool) -> Any:
    from vdbflow.devices.cuda import cupy_module

    return cupy_module()


def _volumes(rng: np.random.Generator, n: int) -> dict[str, Any]:
    import vdbflow

    vec = rng.standard_normal((n, n, n, 3)).astype(np.float32)
    scalar = rng.standard_normal((n, n, n)).astype(np.float64)
    ints = rng.integers(-1000, 1000, (n, n, n)).astype(np.int32)
    active = rng.random((n, n, n)) < 0.9  # holes: points whose stencils leave the data
    return {
        "vec3f": vdbflow.Volume.from_dense(vec, active=active),
        "scalar_d": vdbflow.Volume.from_dense(scalar, active=active),
        "int": vdbflow.Volume.from_dense(ints, active=active),
    }


def _points(rng: np.random.Generator, n: int, count: int) -> dict[str, np.ndarray]:
    pts = rng.uniform(-2.0, n + 1.0, (count, 3))
    pts[:3] = [[np.nan, 1, 1], [1e9, 0, 0], [n / 2, n / 2, n / 2]]
    order = np.lexsort((pts[:, 2], pts[:, 1], pts[:, 0]))
    return {"random": pts, "sorted": np.ascontiguousarray(pts[order])}


def _err(got: np.ndarray, want: np.ndarray) -> float:
    """Largest absolute difference; NaNs must sit at the same places (else inf)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape or not np.array_equal(np.isnan(got), np.isnan(want)):
        return float("inf")
    finite = ~np.isnan(want)
    return float(np.max(np.abs(got[finite] - want[finite]), initial=0.0))


# --- steps ---------------------------------------------------------------------------------------------


def step_import(args: argparse.Namespace) -> dict:
    import vdbflow
    import vdbflow._core

    where = Path(vdbflow.__file__).resolve()
    return {"ok": True, "summary": f"vdbflow from {where.parent}", "vdbflow": str(where), "python": sys.version}


def step_machine(args: argparse.Namespace) -> dict:
    xp = xp_module(args.emulate)
    count = int(xp.cuda.runtime.getDeviceCount())
    info: dict[str, Any] = {"devices": count, "array_module": getattr(xp, "__version__", "?")}
    if not args.emulate:
        from vdbflow.devices import nvrtc

        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        info["nvidia_smi"] = smi.stdout.strip().splitlines()
        info["cuda_runtime"] = int(xp.cuda.runtime.runtimeGetVersion())
        info["capabilities"] = [xp.cuda.Device(d).compute_capability for d in range(count)]
        info["nvrtc"] = list(nvrtc.load_for(info["cuda_runtime"] // 1000).version)
    if count < 1:
        raise StepFailed("expected at least one GPU, found none")
    return {"ok": True, "summary": json.dumps(info), **info}


def step_build(args: argparse.Namespace) -> dict:
    """Every entry built into the (empty) cache and loaded; resources and blocks a multiprocessor (GPU)."""
    from vdbflow.devices import cuda, cuda_build

    xp = xp_module(args.emulate)
    names = (*cuda.name_expressions(), *cuda_build.EXTERN_ENTRIES)
    t0 = time.perf_counter()
    if args.emulate:
        built = cuda._emulated_library()
        module = xp.RawModule(path=str(built.path))
        for name in names:
            module.get_function(built.lowered[name])
        return {"ok": True, "summary": f"{len(names)} emulated entries loaded ({built.source})", "entries": len(names)}
    from vdbflow.devices import cuda_occupancy, nvrtc

    compiler = nvrtc.load_for(int(xp.cuda.runtime.runtimeGetVersion()) // 1000)
    capability = int(xp.cuda.Device(0).compute_capability)
    arch = cuda_build.choose_arch(capability, compiler)
    builds = cuda_build.build_all(names, arch, compiler, workers=os.cpu_count())
    compiled = time.perf_counter() - t0
    rows, low = [], []
    for name, b in sorted(builds.items()):
        if b.source != "compiled":
            raise StepFailed(f"expected {name} compiled into an empty cache, it was {b.source}")
        xp.RawModule(path=str(b.path)).get_function(b.lowered[name])
        meta = json.loads(b.path.with_suffix(".json").read_text())
        r = cuda_build.resources(meta.get("log", "")).get(b.lowered[name])
        row = {"entry": name, "registers": None, "blocks_per_sm": None}
        if r is not None and arch.startswith("sm_") and capability in cuda_occupancy.LIMITS:
            blocks = cuda_occupancy.blocks_per_sm(r, capability, cuda_build.THREADS_PER_BLOCK)
            row.update(
                registers=r.registers, stack=r.stack, spills=r.spill_stores + r.spill_loads, blocks_per_sm=blocks
            )
            if cuda_occupancy.fills_the_card(name) and blocks < 2:
                low.append(f"{name}: {blocks} block(s) an SM ({r.registers} registers)")
        rows.append(row)
    if low:
        raise StepFailed("expected 2 blocks an SM at least:\n" + "\n".join(low))
    return {
        "ok": True,
        "summary": f"{len(names)} entries compiled for {arch} in {compiled:.1f} s and loaded",
        "arch": arch,
        "entries": rows,
        "seconds": compiled,
    }


def step_warm_load(args: argparse.Namespace) -> dict:
    """A fresh process's first call finds its entry in the cache (under a second on a GPU)."""
    t0 = time.perf_counter()
    import vdbflow
    from vdbflow.devices import cuda_build

    xp = xp_module(args.emulate)
    t1 = time.perf_counter()
    vol = vdbflow.Volume.from_dense(np.random.default_rng(0).random((32, 32, 32, 3)).astype(np.float32))
    pts = xp.asarray(np.random.default_rng(1).uniform(0, 31, (100_000, 3)))
    t2 = time.perf_counter()
    vdbflow.sample_grad_arrays(vol, pts, device="cuda")
    xp.cuda.Device().synchronize()
    first = time.perf_counter() - t2
    said = cuda_build.build_summary()
    if "compiled" in said or "loaded from the cache" not in said:
        raise StepFailed(f"expected the first call to load its entry from the cache, the builds: {said!r}")
    if not args.emulate and first > 1.0:
        raise StepFailed(f"expected the first call on a warm cache under 1 s, it took {first:.3f} s ({said})")
    return {"ok": True, "summary": f"imports {t1 - t0:.2f} s, first call {first:.3f} s ({said})", "first_s": first}


def step_compare(args: argparse.Namespace) -> dict:
    """Every operation against the CPU on random and sorted points, within the FMA bounds."""
    import vdbflow
    from vdbflow.core.kernel import DERIVED, MODES
    from vdbflow.ops.hessian import HESSIAN_MODES, sample_hessian_arrays
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays

    xp = xp_module(args.emulate)
    rng = np.random.default_rng(7)
    n = 16 if args.emulate else 48
    vols = _volumes(rng, n)
    sets = _points(rng, n, 3000 if args.emulate else 100_000)
    checks: list[dict] = []

    def check(what: str, got: Any, want: Any, tol: float) -> None:
        err = _err(xp.asnumpy(got) if not isinstance(got, np.ndarray) else got, want)
        checks.append({"what": what, "max_error": err, "tolerance": tol, "ok": bool(err <= tol)})

    for label, pts in sets.items():
        dpts = xp.asarray(pts)
        for key in ("vec3f", "scalar_d"):
            vol = vols[key]
            scale = float(np.nanmax(np.abs(vol.kernel_arrays().values)))
            for mode in MODES:
                cv, cj = vdbflow.sample_grad_arrays(vol, pts, mode)
                gv, gj = vdbflow.sample_grad_arrays(vol, dpts, mode, device="cuda")
                check(f"{key} {mode} value {label}", gv, cv, tolerance(mode, cv.dtype, scale))
                check(f"{key} {mode} jacobian {label}", gj, cj, tolerance(mode, cj.dtype, scale, 1))
            for mode in HESSIAN_MODES[:3] if args.emulate else HESSIAN_MODES:
                cpu = sample_hessian_arrays(vol, pts, mode, space="index", hessian_space="index")
                gpu = sample_hessian_arrays(vol, dpts, mode, space="index", hessian_space="index", device="cuda")
                for part, c, g in zip(("value", "jacobian", "hessian"), cpu, gpu, strict=True):
                    check(f"{key} {mode} hessian-call {part} {label}", g, c, tolerance(mode, c.dtype, scale, 2))
        finite = pts[np.isfinite(pts).all(axis=1)]  # integer data take finite points only
        iv, ij = vdbflow.sample_grad_arrays(vols["int"], finite, "closest")
        gv, gj = vdbflow.sample_grad_arrays(vols["int"], xp.asarray(finite), "closest", device="cuda")
        check(f"int closest value {label}", gv, iv, 0.0)
        check(f"int closest jacobian {label}", gj, ij, 0.0)
        vol = vols["vec3f"]
        for mode in ("linear", "lag4"):
            request = SampleRequest(mode, ("value", "jacobian", *DERIVED), "index")
            cpu = sample_arrays(vol, request, pts)
            gpu = sample_arrays(vol, request.replace(device="cuda"), dpts)
            for name in DERIVED:  # derived of Jacobians within their bound: relative to the Jacobians' scale
                scale = float(np.nanmax(np.abs(cpu["jacobian"]))) ** (3 if name == "r_invariant" else 2)
                check(f"derived {mode} {name} {label}", gpu[name], cpu[name], 64 * tolerance(mode, np.float32, scale))
        kw = {"bins": 32, "range": (-3.0, 3.0), "space": "index", "mode": "closest"}
        h_cpu = vdbflow.histogram(vols["scalar_d"], pts, of="value", **kw)
        h_gpu = vdbflow.histogram(vols["scalar_d"], pts, of="value", device="cuda", **kw)
        check(f"histogram counts (closest) {label}", h_gpu["count"].values, h_cpu["count"].values, 0.0)
        m_cpu = vdbflow.moments(vols["vec3f"], pts, of=["vorticity_magnitude"], space="index")
        m_gpu = vdbflow.moments(vols["vec3f"], pts, of=["vorticity_magnitude"], space="index", device="cuda")
        for name in ("count", "nan_count"):
            check(f"moments {name} {label}", m_gpu[name].values, m_cpu[name].values, 0.0)
        biggest = float(np.nanmax(np.abs(m_cpu["max"].values)))
        check(f"moments mean {label}", m_gpu["mean"].values, m_cpu["mean"].values, 1e-5 * biggest)
        adj_v = rng.standard_normal((len(pts), 3)).astype(np.float32)
        adj_j = rng.standard_normal((len(pts), 3, 3)).astype(np.float32)
        cpu = vdbflow.sample_grad_vjp(vol, pts, adj_v, adj_j)
        gpu = vdbflow.sample_grad_vjp(vol, dpts, xp.asarray(adj_v), xp.asarray(adj_j), device="cuda")
        bound = 1e-5 * np.sqrt(len(pts)) * float(np.abs(adj_v).max() + np.abs(adj_j).max())  # float sums, any order
        check(f"vjp voxel_data {label}", gpu.voxel_data, cpu.voxel_data, bound)
        check(f"vjp points {label}", gpu.points, cpu.points, tolerance("linear", np.float32, 100.0, 1))
    bad = [c for c in checks if not c["ok"]]
    if bad:
        lines = [f"{c['what']}: {c['max_error']:.3g} > {c['tolerance']:.3g}" for c in bad[:30]]
        raise StepFailed(f"{len(bad)} of {len(checks)} comparisons out of bounds:\n" + "\n".join(lines))
    worst = max(checks, key=lambda c: c["max_error"] / c["tolerance"] if c["tolerance"] else 0.0)
    return {
        "ok": True,
        "summary": f"{len(checks)} comparisons within bounds (closest: {worst['what']}, "
        f"{worst['max_error']:.3g} of {worst['tolerance']:.3g})",
        "checks": checks,
    }


def step_workers(args: argparse.Namespace) -> dict:
    """Two worker processes a GPU, a partitioned volume with halos: equal to one process, bit for bit."""
    import distributed

    import vdbflow
    from vdbflow.distribution.volume import distribute

    xp = xp_module(args.emulate)
    gpus = int(xp.cuda.runtime.getDeviceCount())
    rng = np.random.default_rng(3)
    n = 24 if args.emulate else 96
    vol = vdbflow.Volume.from_dense(rng.standard_normal((n, n, n, 3)).astype(np.float32))
    pts = rng.uniform(0, n - 1, (4000 if args.emulate else 400_000, 3))
    one = vol.sample_grad(pts, "lag4", space="index", device="cuda")["value_jacobian"].data
    want = np.asarray(xp.asnumpy(one) if not isinstance(one, np.ndarray) else one).reshape(len(pts), -1)
    report = []
    for gpu in range(gpus):
        env = {"CUDA_VISIBLE_DEVICES": str(gpu)} if not args.emulate else {}
        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", env=env
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            pids = set(client.run(os.getpid).values())
            if len(pids) != 2 or os.getpid() in pids:
                raise StepFailed(f"expected two worker processes besides this one, got pids {pids}")
            dvol = distribute(vol, client, 4, halo=4)
            ds = dvol.sample_grad(pts, "lag4", space="index", device="cuda").compute()
            got = ds["value_jacobian"].values.reshape(len(pts), -1)
            used = client.run(_device_in_use)
            dvol.close()
        if not np.array_equal(got, want, equal_nan=True):
            raise StepFailed(f"GPU {gpu}: two workers differ from one process by {_err(got, want):.3g}")
        report.append({"gpu": gpu, "worker_pids": sorted(pids), "devices_in_use": list(used.values())})
    return {"ok": True, "summary": f"{gpus} GPU(s) x 2 worker processes equal one process", "runs": report}


def _device_in_use() -> Any:
    """The CUDA device a worker process holds a context on (-1: none yet)."""
    from vdbflow.devices.cuda import cupy_module

    return int(cupy_module().cuda.runtime.getDevice())


def step_bench(args: argparse.Namespace) -> dict:
    result = Path(args.result).with_name("bench-gpu-job.json")
    cmd = [sys.executable, "-P", str(Path(args.repo) / "benchmarks" / "bench_gpu_job.py"), "--device", "cuda"]
    cmd += ["--points", str(args.points), "--no-job", "--json", str(result)]
    cmd += ["--resolution", "32", "--runs", "2"] if args.emulate else ["--resolution", "128"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise StepFailed(f"bench_gpu_job.py exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    report = json.loads(result.read_text())
    for key in ("kernel random", "kernel sorted", "copy bandwidth", "checked"):
        if key not in report:
            raise StepFailed(f"expected {key!r} in the benchmark's report, got {sorted(report)}")
    if report["checked"] is not True:
        raise StepFailed(f"the benchmark's results differ from the CPU's: {report['checked']}")
    return {"ok": True, "summary": done.stdout.strip().splitlines()[-1], "report": report}


def step_gpu_tests(args: argparse.Namespace) -> dict:
    """The suite's GPU tests on the GPU (VDBFLOW_REQUIRE_GPU=1); under --emulate the sampling ones."""
    repo = Path(args.repo)
    cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "tests/test_gpu.py"]
    if args.emulate:
        cmd += ["-k", "test_cuda_matches_cpu and float32"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=repo)
    tail = done.stdout.strip().splitlines()[-1:] or [""]
    import re

    passed = re.search(r"(\d+) passed", tail[0])
    if done.returncode != 0 or not passed or int(passed.group(1)) == 0:
        raise StepFailed(f"pytest exited {done.returncode}: {tail[0]}\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
    return {"ok": True, "summary": tail[0], "passed": int(passed.group(1))}


STEPS = {
    "import": step_import,
    "machine": step_machine,
    "build": step_build,
    "warm-load": step_warm_load,
    "compare": step_compare,
    "workers": step_workers,
    "bench": step_bench,
    "gpu-tests": step_gpu_tests,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=sorted(STEPS))
    parser.add_argument("--result", required=True)
    parser.add_argument("--repo", required=True)
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--emulate", action="store_true")
    args = parser.parse_args()
    try:
        result = STEPS[args.step](args)
    except StepFailed as err:
        result = {"ok": False, "summary": str(err)}
        print(f"FAIL: {err}", file=sys.stderr)
    except Exception:
        result = {"ok": False, "summary": traceback.format_exc()[-4000:]}
        print(result["summary"], file=sys.stderr)
    Path(args.result).write_text(json.dumps(result, default=str))
    print(result["summary"])
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
