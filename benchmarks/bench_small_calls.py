"""Small kernel calls: time per call against the number of points, on one thread and on all (issue 26,
row 2), and the docs/particles.md example (66 particles x 200 steps through a series), each side by side
from this one script, interleaved, with the spread of several rounds.

Every host loop of the kernels opens an OpenMP parallel region; a region whose other threads get no
work still costs their wake-up and the closing barrier, which on a busy machine is milliseconds a call.
``launch.h threads_for`` gives a loop no more threads than it has chunks of work; this script measures
the crossover that choice rests on (``calls``) and what it means for a series advection (``advect``).

    python benchmarks/bench_small_calls.py calls [--rounds 5] [--json out.json]
    python benchmarks/bench_small_calls.py advect [--rounds 3]
    python benchmarks/bench_small_calls.py ab --before OTHER/bin/python [--after python] [--rounds 4]
    python benchmarks/bench_small_calls.py ab-calls --before OTHER/bin/python [--after python] [--rounds 4]

The machine this project runs on is shared (2 cores, other engineers' builds and tests): read the
spread, not one figure.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import vdbflow
from vdbflow import _core, synthetic

SIZES = (1, 10, 66, 100, 300, 1_000, 3_000, 8_192, 10_000, 30_000, 100_000)


def _per_call(fn, budget_s: float = 0.2) -> float:
    """Seconds a call, over as many calls as fit in about ``budget_s`` (at least 3), after a warm-up."""
    fn()
    calls, t0 = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - t0 < budget_s:
        fn()
        calls += 1
    return (time.perf_counter() - t0) / calls


def calls(rounds: int) -> dict:
    vol = synthetic.flow_volume(synthetic.taylor_green(), 64)
    rng = np.random.default_rng(0)
    lo, hi = np.asarray(vol.topology.world_bbox[0]), np.asarray(vol.topology.world_bbox[1])
    most = _core.get_max_threads()
    kernels = {
        "sample_grad lag4": lambda p: vdbflow.sample_grad_arrays(vol, p, mode="lag4"),
        "sample_grad linear": lambda p: vdbflow.sample_grad_arrays(vol, p, mode="linear"),
    }
    results: dict = {"threads": most, "sizes": list(SIZES), "kernels": {}}
    for name, kernel in kernels.items():
        times: dict[int, dict[int, list[float]]] = {n: {1: [], most: []} for n in SIZES}
        for r in range(rounds):
            for n in SIZES:
                pts = lo + (hi - lo) * rng.random((n, 3))
                for threads in (1, most) if r % 2 == 0 else (most, 1):  # interleaved, alternating order
                    _core.set_num_threads(threads)
                    times[n][threads].append(_per_call(functools.partial(kernel, pts)))
        _core.set_num_threads(most)
        results["kernels"][name] = {str(n): {str(t): v for t, v in by.items()} for n, by in times.items()}
        print(f"\n{name}: time per call, {rounds} rounds (median, min-max); {most} threads against 1")
        print(f"{'points':>8} {'1 thread (us)':>24} {f'{most} threads (us)':>24} {'ratio':>16}")
        for n in SIZES:
            one, all_ = times[n][1], times[n][most]
            ratios = [a / b for a, b in zip(all_, one, strict=True)]
            print(
                f"{n:>8,} {_spread(one, 1e6):>24} {_spread(all_, 1e6):>24} "
                f"{statistics.median(ratios):>6.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
            )
    return results


def _spread(values: list[float], scale: float) -> str:
    return f"{statistics.median(values) * scale:,.1f} ({min(values) * scale:,.1f}-{max(values) * scale:,.1f})"


def _gyre_run(tmp: str):
    """docs/particles.md's series (the double gyre, 41 steps, h = 1/64) and its advection of 66 seeds."""
    from vdbflow.synthetic import unsteady

    gyre = unsteady.double_gyre()
    unsteady.write_series(gyre, Path(tmp) / "gyre_fine", np.arange(0, 10.01, 0.25), voxel_size=1 / 64)
    series = vdbflow.open_series(str(Path(tmp) / "gyre_fine" / "*.nvdb"))
    X, Y = np.meshgrid(np.linspace(0, 2, 201), np.linspace(0, 1, 101))
    seeds = np.stack([X, Y, np.zeros_like(X)], axis=-1)[::20, ::20].reshape(-1, 3)
    return seeds, lambda: vdbflow.advect(series, seeds, 0.0, 10.0, dt=0.05, mode="lag4", time="pchip", save_every=4)


def once() -> None:
    """One timed advection of the example (after a warm one), in this interpreter's vdbflow: for ``ab``."""
    with tempfile.TemporaryDirectory() as tmp:
        _, run = _gyre_run(tmp)
        run()
        t0 = time.perf_counter()
        ds = run()
        print(time.perf_counter() - t0, hashlib.sha256(ds["position"].values.tobytes()).hexdigest())


def ab(before: str, after: str, rounds: int) -> dict:
    """The example in two builds (two interpreters, e.g. main's and this branch's), alternating, each
    run a fresh process with the kernels' default threads."""
    import subprocess

    times: dict[str, list[float]] = {"before": [], "after": []}
    digests: dict[str, set[str]] = {"before": set(), "after": set()}
    for r in range(rounds):
        for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
            python = before if side == "before" else after
            out = subprocess.run([python, __file__, "once"], capture_output=True, text=True, check=True).stdout.split()
            times[side].append(float(out[0]))
            digests[side].add(out[1])
    print(f"\nadvect, docs/particles.md, 66 particles x 200 steps, all threads, {rounds} runs a side (median, min-max)")
    for side in ("before", "after"):
        print(f"  {side:>6}: {_spread(times[side], 1)} s")
    print(f"  ratio after/before: {statistics.median(times['after']) / statistics.median(times['before']):.3f}")
    print(f"  positions the same bits: {digests['before'] == digests['after'] and len(digests['after']) == 1}")
    return {"seconds": times, "same": digests["before"] == digests["after"]}


def ab_calls(before: str, after: str, rounds: int) -> dict:
    """``calls`` in two builds, alternating, one round a fresh process: each side's ratio of all threads
    to one thread a call, side by side (both sides measured in the same minutes of the shared machine)."""
    import subprocess

    ratios: dict[str, dict[str, dict[int, list[float]]]] = {"before": {}, "after": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                out = Path(tmp) / f"{side}-{r}.json"
                python = before if side == "before" else after
                cmd = [python, __file__, "calls", "--rounds", "1", "--json", str(out)]
                subprocess.run(cmd, capture_output=True, text=True, check=True)
                found = json.loads(out.read_text())["calls"]
                most = str(found["threads"])
                for name, by_size in found["kernels"].items():
                    for n, by_threads in by_size.items():
                        ratio = by_threads[most][0] / by_threads["1"][0]
                        ratios[side].setdefault(name, {}).setdefault(int(n), []).append(ratio)
    for name in ratios["after"]:
        print(f"\n{name}: all threads / 1 thread a call, {rounds} rounds a side (median, min-max)")
        print(f"{'points':>8} {'before':>22} {'after':>22}")
        for n, values in ratios["after"][name].items():
            old = ratios["before"][name][n]
            print(
                f"{n:>8,} {statistics.median(old):>8.2f} ({min(old):.2f}-{max(old):.2f})"
                f"{'':>2} {statistics.median(values):>8.2f} ({min(values):.2f}-{max(values):.2f})"
            )
    return {side: {k: {str(n): v for n, v in by.items()} for k, by in r.items()} for side, r in ratios.items()}


def advect(rounds: int) -> dict:
    """docs/particles.md: 66 seeds of a lattice, t 0 -> 10, dt 0.05 (200 steps), lag4, pchip in time."""
    most = _core.get_max_threads()
    with tempfile.TemporaryDirectory() as tmp:
        seeds, run = _gyre_run(tmp)
        run()  # warm: the steps opened, the code loaded
        times: dict[int, list[float]] = {1: [], most: []}
        positions = {}
        for r in range(rounds):
            for threads in (1, most) if r % 2 == 0 else (most, 1):
                _core.set_num_threads(threads)
                t0 = time.perf_counter()
                ds = run()
                times[threads].append(time.perf_counter() - t0)
                positions[threads] = ds["position"].values
        _core.set_num_threads(most)
    same = np.array_equal(positions[1], positions[most], equal_nan=True)
    print(f"\nadvect, docs/particles.md: {len(seeds)} particles x 200 steps, {rounds} rounds (median, min-max)")
    print(f"  1 thread:   {_spread(times[1], 1)} s")
    print(f"  {most} threads:  {_spread(times[most], 1)} s")
    ratio = statistics.median(times[most]) / statistics.median(times[1])
    print(f"  ratio {most}/1:  {ratio:.2f}; positions equal: {same}")
    return {"particles": len(seeds), "threads": most, "seconds": {str(k): v for k, v in times.items()}, "equal": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["calls", "advect", "both", "ab", "ab-calls", "once"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", help="ab: the Python of the build before (its vdbflow)")
    parser.add_argument("--after", default=sys.executable, help="ab: the Python of the build after")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    out = {}
    if args.what == "once":
        once()
        return 0
    if args.what == "ab":
        out["ab"] = ab(args.before, args.after, args.rounds)
    if args.what == "ab-calls":
        out["ab-calls"] = ab_calls(args.before, args.after, args.rounds)
    if args.what in ("calls", "both"):
        out["calls"] = calls(args.rounds)
    if args.what in ("advect", "both"):
        out["advect"] = advect(max(2, args.rounds))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
