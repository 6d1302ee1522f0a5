"""The GPU host path's pipeline (vdbflow.devices.pipeline), checked on the CPU with a stand-in for CuPy
that records every call: the pieces cover the chunk once, in order, through two reused slots whose
buffers are allocated once, each slot waited on before its buffers are reused, and the assembled
outputs equal a direct computation.  (On a GPU machine scripts/gpu_check.sh runs the real thing.)"""

from __future__ import annotations

import numpy as np
import pytest

from vdbflow.devices.pipeline import HostPipeline


class FakeStream:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def synchronize(self):
        self.log.append(("sync", self.name))

    def __enter__(self):
        self.log.append(("enter", self.name))
        return self

    def __exit__(self, *exc):
        self.log.append(("exit", self.name))


class FakeDevice:
    """A device array: a NumPy array with CuPy's set/get (asynchronous there, immediate here)."""

    def __init__(self, data, log):
        self.data, self.log = data, log

    def __getitem__(self, key):
        return FakeDevice(self.data[key], self.log)

    def set(self, host, stream=None):
        self.log.append(("h2d", stream.name, len(host)))
        self.data[...] = host

    def get(self, stream=None, out=None, blocking=True):
        assert not blocking  # the pipeline waits for a slot only before reusing its buffers
        self.log.append(("d2h", stream.name, len(out)))
        out[...] = self.data


class FakeXp:
    def __init__(self):
        self.log, self.allocations = [], 0
        outer = self

        class cuda:  # noqa: N801 - CuPy's namespace
            class Stream:
                count = 0

                def __new__(cls, non_blocking=False):
                    cls.count += 1
                    return FakeStream(outer.log, f"s{cls.count}")

        self.cuda = cuda

    def empty(self, shape, dtype):
        self.allocations += 1
        return FakeDevice(np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0, dtype), self.log)


def launch(points, out):
    """A stand-in kernel: the sum of each point's coordinates, and the point scaled by 2."""
    out["s"].data[...] = points.data.sum(axis=1)
    out["v"].data[...] = 2 * points.data


@pytest.mark.parametrize("n", [0, 1, 999, 1000, 1001, 4321])
def test_pieces_cover_the_chunk_once_through_two_reused_slots(n):
    xp = FakeXp()
    pinned = []

    def pin(shape, dtype):
        pinned.append(shape)
        return np.empty(shape, dtype)

    pipe = HostPipeline(xp, piece=1000, pinned=pin)
    rng = np.random.default_rng(n)
    outputs = {"s": ((), np.float64), "v": ((3,), np.float32)}
    for _ in range(3):  # the same buffers serve chunk after chunk
        pts = rng.normal(size=(n, 3))
        got = pipe.run(pts, outputs, launch)
        np.testing.assert_array_equal(got["s"], pts.sum(axis=1))
        np.testing.assert_array_equal(got["v"], (2 * pts).astype(np.float32))
        assert got["v"].dtype == np.float32 and got["s"].shape == (n,)
    assert len(pinned) == (6 if n else 0) and xp.allocations == len(pinned)  # 2 slots x (points, s, v), once
    h2d = [e for e in xp.log if e[0] == "h2d"]
    assert sum(e[2] for e in h2d) == 3 * n
    streams = [e[1] for e in h2d[: -(-n // 1000)]]
    assert streams == [["s1", "s2"][k % 2] for k in range(len(streams))]  # alternating slots
    # a slot is synchronised before its buffers take the next piece
    for k, event in enumerate(xp.log):
        if event[0] == "h2d":
            earlier = [e for e in xp.log[:k] if e[1] == event[1]]
            copies_back = [i for i, e in enumerate(earlier) if e[0] == "d2h"]
            if copies_back:
                assert ("sync", event[1]) in earlier[copies_back[-1] :]


def test_given_output_buffers_are_filled_in_place():
    xp = FakeXp()
    pipe = HostPipeline(xp, piece=64, pinned=lambda shape, dtype: np.empty(shape, dtype))
    pts = np.arange(300.0).reshape(100, 3)
    out = {"s": np.zeros(100), "v": np.zeros((100, 3), np.float32)}
    got = pipe.run(pts, {"s": ((), np.float64), "v": ((3,), np.float32)}, launch, out=out)
    assert got["s"] is out["s"] and np.array_equal(out["s"], pts.sum(axis=1))


def test_sample_host_arrays_on_the_cpu_is_sample_arrays(rng):
    import vdbflow
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays, sample_host_arrays

    ijk = rng.integers(0, 20, (200, 3))
    ijk = np.unique(ijk, axis=0)
    vol = vdbflow.Volume.from_voxels(ijk, rng.normal(size=len(ijk)))
    pts = rng.uniform(0, 20, (500, 3))
    request = SampleRequest("linear", ("value", "jacobian"))
    a, b = sample_host_arrays(vol, request, pts), sample_arrays(vol, request, pts)
    for name in request.outputs:
        np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.slow
def test_the_gpu_job_benchmark_runs_on_the_cpu(tmp_path):
    """The CPU half of scripts/gpu_check.sh's host-path benchmark: the same script, every row."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu_job.py"
    out = tmp_path / "r.json"
    run = subprocess.run(
        [sys.executable, str(script), "--device", "cpu", "--points", "20000", "--resolution", "32", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(out.read_text())
    assert {"kernel random", "kernel sorted", "host path", "job"} <= set(report) and report["points"] == 20000
    assert all(report[k] > 0 for k in ("kernel random", "kernel sorted", "host path", "job"))
