"""The CUDA backend's device code on the CPU (VDBFLOW_CUDA_EMULATE=1): what it computes against the CPU
backend (bit for bit against the CPU's baseline target, which does not contract a*b+c into an FMA either;
within a stated bound against FMA targets), odd launch shapes, races between blocks, stream order, and the
emulation's own strictness (argument types, implicit host copies)."""

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from gpu_support import EMULATED, cupy, emulate  # noqa: F401 - emulate: the autouse fixture
from reference import probe_points, random_sparse_voxels

import vdbflow
from vdbflow.devices import cuda, cuda_build, emulation

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not EMULATED, reason="the emulation runs where there is no GPU")]
HARNESS = Path(__file__).parent / "harness"

# Every kind of entry, on the CPU and on the emulated GPU, in a fresh interpreter whose CPU backend runs the
# baseline target (no FMA): the two must agree bit for bit.
PROBE = """
import sys
import numpy as np
import vdbflow
from vdbflow import _core
from vdbflow.devices import cuda
from vdbflow.ops.hessian import sample_hessian_arrays
from vdbflow.ops.sampling import MODES

xp = cuda.cupy_module()
rng = np.random.default_rng(11)
ijk = np.unique(rng.integers(-20, 20, (3000, 3)), axis=0)
pts = np.concatenate([rng.uniform(-24, 24, (2000, 3)), [[np.nan, 0, 0], [1e30, 0, 0], [-5e6, 3, 3]]])
out = {}
for dtype, C in ((np.float32, 3), (np.float64, 1), (np.float32, 4)):
    data = rng.standard_normal((len(ijk), C) if C > 1 else len(ijk)).astype(dtype)
    vol = vdbflow.Volume.from_voxels(ijk, data, background=0.25)
    for mode in MODES:  # every scheme of the kernels
        for dev, p in (("cpu", pts), ("gpu", xp.asarray(pts))):
            v, j = vdbflow.sample_grad_arrays(vol, p, mode, device="cpu" if dev == "cpu" else "cuda")
            out[f"{dev}/{dtype.__name__}{C}/{mode}/v"] = v if dev == "cpu" else v.get()
            out[f"{dev}/{dtype.__name__}{C}/{mode}/j"] = j if dev == "cpu" else j.get()
    if C in (1, 3):
        for dev, p in (("cpu", pts[:500]), ("gpu", xp.asarray(pts[:500]))):
            h = sample_hessian_arrays(vol, p, "lag4", device="cpu" if dev == "cpu" else "cuda")[2]
            out[f"{dev}/{dtype.__name__}{C}/hessian"] = h if dev == "cpu" else h.get()
vel = vdbflow.Volume.from_voxels(ijk, rng.standard_normal((len(ijk), 3)).astype(np.float32))
names = ["value", "jacobian", "q_criterion", "vorticity", "lambda2", "helicity", "divergence"]
for dev in ("cpu", "cuda"):
    ds = vel.sample_grad(pts, device=dev, outputs=names)
    for n in ds.data_vars:
        a = ds[n].data
        out[f"{dev}/derived/{n}"] = a.get() if dev == "cuda" else np.asarray(a)
    out[f"{dev}/grid_fd4"] = vdbflow.gradient_field(vel, "fd4", device=dev).active_values()
ints = vdbflow.Volume.from_voxels(ijk, rng.integers(-1000, 1000, len(ijk)).astype(np.int32))
out["cpu/int"] = vdbflow.sample_grad_arrays(ints, np.nan_to_num(pts[:2000]), "closest", jacobian=False)[0]
gi = vdbflow.sample_grad_arrays(ints, xp.asarray(np.nan_to_num(pts[:2000])), "closest", jacobian=False, device="cuda")
out["gpu/int"] = gi[0].get()
per = vdbflow.Volume.from_voxels(ijk, rng.standard_normal((len(ijk), 3)).astype(np.float32), periodic=(True, 36, False))
for mode in MODES:  # periodic: stencils and points wrap on the device as on the host
    for dev, p in (("cpu", pts), ("gpu", xp.asarray(pts))):
        v, j = vdbflow.sample_grad_arrays(per, p, mode, device="cpu" if dev == "cpu" else "cuda")
        out[f"{dev}/periodic/{mode}/v"] = v if dev == "cpu" else v.get()
        out[f"{dev}/periodic/{mode}/j"] = j if dev == "cpu" else j.get()
np.savez(sys.argv[1], **out)
print(_core.CPU_TARGET)
"""


def test_device_code_equals_the_cpu_baseline_bit_for_bit(tmp_path):
    path = tmp_path / "probe.npz"
    env = {**os.environ, "VDBFLOW_CPU_TARGET": "baseline", "VDBFLOW_CUDA_EMULATE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, env=env, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(path) as f:
        got = dict(f)
    cpu_keys = [k for k in got if k.startswith("cpu/")]
    assert len(cpu_keys) >= 80
    for key in cpu_keys:
        other = key.replace("cpu/", "gpu/", 1) if not key.startswith("cpu/derived") else key.replace("cpu/", "cuda/", 1)
        other = other.replace("cpu/grid", "cuda/grid")
        if key.startswith("cpu/grid"):
            other = "cuda/grid_fd4"
        np.testing.assert_array_equal(got[other], got[key], err_msg=key)  # NaNs where the CPU has NaN, too


def _volume(rng, dtype=np.float32, components=3):
    ijk, values = random_sparse_voxels(rng, components=components, dtype=dtype)
    return ijk, values, vdbflow.Volume.from_voxels(ijk, values, 0.5)


def _fma_bound(values, dtype) -> float:
    """What FMA contraction may change (the CPU's x86-64-v3 target, nvcc on a real GPU): a few ulps of the
    largest value, as tests/test_kernels_build.py bounds the CPU targets against each other."""
    return 64 * float(np.finfo(dtype).eps) * max(1.0, float(np.abs(values).max()))


@pytest.mark.parametrize("n", [0, 1, 255, 256, 257])
@pytest.mark.parametrize("mode", ["linear", "lag4"])
def test_odd_point_counts_with_nan_and_far_points(rng, n, mode):
    ijk, values, vol = _volume(rng)
    pts = probe_points(rng, ijk, max(n, 1))[:n]
    if n >= 2:
        pts[0] = [np.nan, 1.0, 2.0]
        pts[-1] = [1e12, -1e12, 3.0]
    cv, cj = vdbflow.sample_grad_arrays(vol, pts, mode)
    gv, gj = vdbflow.sample_grad_arrays(vol, cupy.asarray(pts), mode, device="cuda")
    assert isinstance(gv, cupy.ndarray) and gv.shape == cv.shape and gj.shape == cj.shape
    tol = _fma_bound(values, np.float32)
    np.testing.assert_allclose(gv.get(), cv, atol=tol, rtol=0)
    np.testing.assert_allclose(gj.get(), cj, atol=2 * tol, rtol=0)
    if n >= 2:
        assert np.isnan(gv.get()[0]).all() and np.isnan(gj.get()[0]).all()
        np.testing.assert_array_equal(gv.get()[-1], cv[-1])  # far away: the background, exactly


def test_grid_stride_loop_covers_every_point(rng, monkeypatch):
    """With the launch capped at 2 blocks, each thread takes several points (the grid-stride loop):
    the results are those of one thread a point, bit for bit."""
    ijk, _, vol = _volume(rng)
    pts = probe_points(rng, ijk, 3001)
    wide = [a.get() for a in vdbflow.sample_grad_arrays(vol, cupy.asarray(pts), "lag4", device="cuda")]
    monkeypatch.setattr(cuda, "MAX_BLOCKS", 2)
    launches = []
    real = emulation.Function.__call__

    def spy(self, grid, block, args, **kw):
        launches.append((self.name, grid, block))
        return real(self, grid, block, args, **kw)

    monkeypatch.setattr(emulation.Function, "__call__", spy)
    narrow = [a.get() for a in vdbflow.sample_grad_arrays(vol, cupy.asarray(pts), "lag4", device="cuda")]
    assert launches and all(grid == (2,) for _, grid, _ in launches)
    for w, s in zip(wide, narrow, strict=True):
        np.testing.assert_array_equal(s, w)


@pytest.mark.parametrize("threads", ["1", "4"])
def test_reverse_mode_atomics_over_host_threads(rng, monkeypatch, threads):
    """Thousands of points share a few voxels, so blocks on different host threads add to the same
    accumulator rows: with atomicAdd the sums are the CPU's up to the order of the additions."""
    monkeypatch.setenv("VDBFLOW_CUDA_EMULATE_THREADS", threads)
    ijk = np.stack(np.meshgrid(*[np.arange(4)] * 3, indexing="ij"), -1).reshape(-1, 3)
    vol = vdbflow.Volume.from_active(ijk).with_data(rng.standard_normal((len(ijk), 3)).astype(np.float64), 0.0)
    pts = rng.uniform(0.2, 2.8, (20_000, 3))
    a_val, a_jac = rng.standard_normal((len(pts), 3)), rng.standard_normal((len(pts), 3, 3))
    cpu = vdbflow.sample_grad_vjp(vol, pts, a_val, a_jac)
    gpu = vdbflow.sample_grad_vjp(vol, cupy.asarray(pts), cupy.asarray(a_val), cupy.asarray(a_jac), device="cuda")
    scale = float(np.abs(cpu.voxel_data).max())
    np.testing.assert_allclose(gpu.voxel_data.get(), cpu.voxel_data, rtol=0, atol=1e-12 * scale * len(pts))
    np.testing.assert_allclose(gpu.points.get(), cpu.points, rtol=0, atol=1e-12)


def test_a_missing_atomic_loses_updates_here_as_on_a_gpu(monkeypatch):
    """Blocks run on several host threads: a plain read-modify-write of one counter loses updates (the race
    a GPU would have), atomicAdd loses none."""
    monkeypatch.setenv("VDBFLOW_CUDA_EMULATE_THREADS", "4")
    built = cuda_build.emulated_library(("add_plain", "add_atomic"), HARNESS / "emulate_race.cu")
    module = emulation.RawModule(path=str(built.path))
    n = 200_000
    counts = {}
    for name in ("add_atomic", "add_plain"):
        for _ in range(20):  # a race is likely, not certain, on one try (lost updates seen on the first here)
            counter = emulation.zeros(1, np.float64)
            module.get_function(name)((n // 256,), (256,), (counter, np.int64(n)))
            counts[name] = float(counter.get()[0])
            if name == "add_atomic" or counts[name] < n:
                break
    assert counts["add_atomic"] == n
    assert counts["add_plain"] < n


def test_kernel_arguments_are_checked_against_the_entry():
    """A scalar of another width, a host array or a missing argument is refused, where CuPy would launch
    with the wrong bytes."""
    built = cuda_build.emulated_library(("add_plain", "add_atomic"), HARNESS / "emulate_race.cu")
    fn = emulation.RawModule(path=str(built.path)).get_function("add_atomic")
    assert fn.signature == "pdq" and fn.parameters == ["pd", "q"]  # double*, long long
    counter = emulation.zeros(1, np.float64)
    with pytest.raises(TypeError, match="argument 0: expected a device array of float64, got float32"):
        fn((1,), (32,), (emulation.zeros(1, np.float32), np.int64(5)))
    with pytest.raises(TypeError, match="argument 1: expected a int64 scalar, got int32"):
        fn((1,), (32,), (counter, np.int32(5)))
    with pytest.raises(TypeError, match="argument 1: expected a int64 scalar, got int"):
        fn((1,), (32,), (counter, 5))
    with pytest.raises(TypeError, match="argument 0: expected a device array"):
        fn((1,), (32,), (np.zeros(1), np.int64(5)))
    with pytest.raises(TypeError, match="expected 2 kernel arguments, got 1"):
        fn((1,), (32,), (counter,))
    fn((1,), (32,), (counter, np.int64(5)))
    assert float(counter.get()[0]) == 5.0


def test_device_arrays_are_not_host_arrays():
    a = emulation.asarray(np.arange(5.0))
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
        np.asarray(a)
    with pytest.raises(TypeError, match="got a NumPy array"):
        a + np.ones(5)
    assert isinstance(a + 1, emulation.ndarray) and (a + 1).get().tolist() == [1, 2, 3, 4, 5]


def test_stream_work_runs_in_stream_order_not_at_once():
    """A copy queued behind unfinished work on a stream has not run until the stream gets there; a
    non-blocking stream does not wait for the null stream or the other way round."""
    s = emulation.Stream(non_blocking=True)
    gate = threading.Event()
    s.submit(gate.wait)  # the stream is busy until the gate opens
    dev = emulation.asarray(np.arange(4.0))
    host = np.full(4, -1.0)
    dev.get(stream=s, out=host, blocking=False)
    pinned = np.arange(4.0) * 10
    dev.set(pinned, stream=s)
    pinned[:] = 7.0  # the copy reads the host buffer when it runs
    assert host.tolist() == [-1.0] * 4  # not yet
    gate.set()
    s.synchronize()
    assert host.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert dev.get().tolist() == [7.0] * 4


def test_host_pipeline_is_per_thread_and_overlaps(rng, monkeypatch):
    """Four threads sample host points through the GPU host path at once, in many pieces each: every row is
    the CPU's (pipelines are per thread; a shared one would mix the threads' pieces), and every copy back is
    queued on its slot's stream without blocking the host (the next piece's work is issued meanwhile)."""
    from vdbflow.devices import pipeline
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_host_arrays

    monkeypatch.setattr(pipeline, "PIECE", 97)
    ijk, values, vol = _volume(rng)
    request = SampleRequest("linear", ("value", "q_criterion"), device="cuda")
    jobs = [probe_points(rng, ijk, 3000) for _ in range(4)]
    want = [sample_host_arrays(vol, request.replace(device="cpu"), p) for p in jobs]
    got: dict[int, dict] = {}

    def work(k: int) -> None:
        got[k] = sample_host_arrays(vol, request, jobs[k])

    copies = []
    real_get = emulation.ndarray.get

    def get(self, stream=None, order="C", out=None, blocking=True):
        copies.append((stream is not None and not stream.null, blocking))
        return real_get(self, stream=stream, order=order, out=out, blocking=blocking)

    monkeypatch.setattr(emulation.ndarray, "get", get)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(copies) >= 4 * 2 * (3000 // 97) and all(on_stream and not blocking for on_stream, blocking in copies)
    for k in range(len(jobs)):
        for name in request.outputs:  # Q: products of Jacobian entries, each within FMA's few ulps
            scale = max(1.0, float(np.abs(want[k][name]).max()))
            tol = 64 * np.finfo(np.float32).eps * scale * (8 if name == "q_criterion" else 1)
            np.testing.assert_allclose(got[k][name], want[k][name], atol=tol, rtol=0, err_msg=f"{k} {name}")


def test_first_use_uploads_are_finished_before_another_stream_reads_them(rng):
    """The volume's arrays go to the device on the stream current at first use; a kernel on another stream
    must see them complete (the backend waits for its first-use uploads)."""
    ijk, _, vol = _volume(rng)
    pts = probe_points(rng, ijk, 500)
    cv, _ = vdbflow.sample_grad_arrays(vol, pts, "linear")
    first, second = emulation.Stream(non_blocking=True), emulation.Stream(non_blocking=True)
    gate = threading.Event()
    with first:
        first.submit(gate.wait)  # hold back everything queued on the first stream
        threading.Timer(0.2, gate.set).start()
        cuda.device_record(vol.kernel_arrays())  # uploads queued behind the gate, then waited for
    with second:
        gv, _ = vdbflow.sample_grad_arrays(vol, emulation.asarray(pts), "linear", device="cuda")
        second.synchronize()
    np.testing.assert_allclose(gv.get(), cv, atol=_fma_bound(cv, np.float32), rtol=0)


def test_build_cache_reuses_and_rebuilds_corrupt_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(tmp_path))
    calls = []

    def make():
        calls.append(1)
        return b"image-bytes", {"lowered": {}}

    parts = {"unit": "x", "options": ["-a"]}
    path, meta, how, _ = cuda_build._cached_build(parts, ".bin", make)
    assert how == "compiled" and path.read_bytes() == b"image-bytes" and meta["key"] == parts
    assert cuda_build._cached_build(parts, ".bin", make)[2] == "cached" and len(calls) == 1
    path.write_bytes(b"image-bytez")  # corrupt: its digest no longer matches the record
    assert cuda_build._cached_build(parts, ".bin", make)[2] == "compiled" and len(calls) == 2
    path.with_suffix(".json").write_text("{not json")
    assert cuda_build._cached_build(parts, ".bin", make)[2] == "compiled" and len(calls) == 3
    assert cuda_build._cached_build({**parts, "unit": "y"}, ".bin", make)[2] == "compiled"  # another key
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind
    assert json.loads(path.with_suffix(".json").read_text())["image_sha256"]
    other = {**parts, "unit": "z"}
    key = hashlib.sha256(json.dumps(other, sort_keys=True).encode()).hexdigest()[:32]
    (tmp_path / f"{key}.lock").mkdir()  # a lock that cannot be taken (as in a cache this user cannot write)
    with pytest.raises(cuda_build.DeviceError, match="expected a writable CUDA build cache"):
        cuda_build._cached_build(other, ".bin", make)


def test_a_failure_on_a_stream_is_raised_at_its_synchronize():
    """As CUDA reports a failed launch at the next synchronization: the first failure of a stream's work is
    raised by synchronize (not lost behind later work), and events recorded after it still complete."""
    s = emulation.Stream(non_blocking=True)

    def fail() -> None:
        raise ValueError("the first failure")

    ran = []
    s.submit(fail)
    s.submit(lambda: ran.append(1))  # skipped: the stream has failed
    event = s.record()
    event.synchronize()
    with pytest.raises(ValueError, match="the first failure"):
        s.synchronize()
    assert ran == []
    s.submit(lambda: ran.append(2))
    s.synchronize()
    assert ran == [2]


@pytest.mark.parametrize("n", [0, 1, 255, 257])
def test_odd_point_counts_for_derived_hessian_and_reverse_mode(rng, n):
    """The other point entries at the same odd counts, NaN and far points among them: the fused derived
    pass, Hessians and the reverse mode against the CPU backend."""
    from vdbflow.core.kernel import DERIVED
    from vdbflow.ops.hessian import sample_hessian_arrays
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays

    ijk, values, vol = _volume(rng)
    pts = probe_points(rng, ijk, max(n, 1))[:n]
    if n >= 2:
        pts[0], pts[-1] = [np.nan, 1.0, 2.0], [1e12, -1e12, 3.0]
    tol = _fma_bound(values, np.float32)
    request = SampleRequest("lag4", ("value", "jacobian", *DERIVED), device="cuda")
    gpu = sample_arrays(vol, request, cupy.asarray(pts))
    cpu = sample_arrays(vol, request.replace(device="cpu"), pts)
    for name in request.outputs:
        assert gpu[name].shape == cpu[name].shape
        scale = max(1.0, float(np.nanmax(np.abs(cpu[name]), initial=0.0)))
        np.testing.assert_allclose(gpu[name].get(), cpu[name], atol=64 * 1.2e-7 * scale, rtol=1e-5, err_msg=name)
    on_gpu = sample_hessian_arrays(vol, cupy.asarray(pts), "lag4", device="cuda")
    for g, c in zip(on_gpu, sample_hessian_arrays(vol, pts, "lag4"), strict=True):
        assert g.shape == c.shape
        np.testing.assert_allclose(g.get(), c, atol=4 * tol, rtol=0)
    index_vol = vdbflow.Volume.from_active(ijk).with_data(values.astype(np.float64), 0.5)
    a_val, a_jac = rng.standard_normal((n, 3)), rng.standard_normal((n, 3, 3))
    r_cpu = vdbflow.sample_grad_vjp(index_vol, pts, a_val, a_jac)
    r_gpu = vdbflow.sample_grad_vjp(
        index_vol, cupy.asarray(pts), cupy.asarray(a_val), cupy.asarray(a_jac), device="cuda"
    ).get()
    for name in ("voxel_data", "tile_values", "background", "points"):
        np.testing.assert_allclose(getattr(r_gpu, name), getattr(r_cpu, name), atol=1e-10, rtol=0, err_msg=name)
