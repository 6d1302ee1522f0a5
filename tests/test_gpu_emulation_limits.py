"""The emulation of CUDA lies less: a device-memory limit (``VDBFLOW_CUDA_EMULATE_MEMORY``: an allocation past
it is CuPy's OutOfMemoryError, freed arrays give their bytes back) and several devices
(``VDBFLOW_CUDA_EMULATE_DEVICES``: each with its own copies of a volume, and a kernel refusing an array of
another device), so that memory pressure and multi-GPU placement run in CI; a pool as CuPy's (freed memory
poisoned in stream order and reused at once) and guarded allocations (an out-of-bounds read or write is a
DeviceError), so that a use-after-free or an out-of-bounds kernel shows here as it would on a GPU, or worse."""

import threading
from pathlib import Path

import numpy as np
import pytest

import vdbflow
from vdbflow.devices import emulation as em
from vdbflow.errors import DeviceError


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setenv("VDBFLOW_CUDA_EMULATE", "1")
    monkeypatch.delenv("VDBFLOW_CUDA_EMULATE_MEMORY", raising=False)
    monkeypatch.delenv("VDBFLOW_CUDA_EMULATE_DEVICES", raising=False)
    return monkeypatch


def test_an_allocation_past_the_memory_limit_is_out_of_memory(emulated):
    base = em.allocated_bytes()
    emulated.setenv("VDBFLOW_CUDA_EMULATE_MEMORY", str(base + 1_000_000))
    a = em.zeros(100_000, np.float64)  # 800 kB
    assert em.allocated_bytes() == base + 800_000
    free, total = em.cuda.runtime.memGetInfo()
    assert total == base + 1_000_000 and free == 200_000
    view = a[10:]  # a view holds no memory of its own
    assert em.allocated_bytes() == base + 800_000
    with pytest.raises(em.cuda.memory.OutOfMemoryError, match=r"allocating 800,000 bytes.*VDBFLOW_CUDA_EMULATE_MEMORY"):
        em.asarray(np.ones(100_000))
    del a
    assert em.allocated_bytes() == base + 800_000  # the view keeps the buffer alive
    del view
    assert em.allocated_bytes() == base
    b = em.asarray(np.ones(100_000))  # the freed bytes are available again
    assert float(b.sum()) == 100_000.0


def test_sampling_past_the_memory_limit_says_so(emulated, rng):
    vol = vdbflow.Volume.from_dense(rng.standard_normal((16, 16, 16, 3)).astype(np.float32))
    pts = em.asarray(rng.uniform(0, 15, (50_000, 3)))
    emulated.setenv("VDBFLOW_CUDA_EMULATE_MEMORY", str(em.allocated_bytes() + 100_000))
    with pytest.raises(MemoryError, match="Out of memory allocating"):
        vdbflow.sample_grad_arrays(vol, pts, device="cuda")


def test_bad_emulation_settings_are_refused(emulated):
    emulated.setenv("VDBFLOW_CUDA_EMULATE_MEMORY", "1GB")
    with pytest.raises(DeviceError, match="expected VDBFLOW_CUDA_EMULATE_MEMORY in bytes"):
        em.zeros(4)
    emulated.delenv("VDBFLOW_CUDA_EMULATE_MEMORY")
    emulated.setenv("VDBFLOW_CUDA_EMULATE_DEVICES", "0")
    with pytest.raises(DeviceError, match="expected VDBFLOW_CUDA_EMULATE_DEVICES to be a count"):
        em.cuda.runtime.getDeviceCount()
    emulated.setenv("VDBFLOW_CUDA_EMULATE_DEVICES", "2")
    with pytest.raises(DeviceError, match=r"expected an emulated device among 0\.\.1, got 2"):
        em.cuda.Device(2)


def test_two_emulated_devices_each_hold_their_own_copy(emulated, rng):
    emulated.setenv("VDBFLOW_CUDA_EMULATE_DEVICES", "2")
    assert em.cuda.runtime.getDeviceCount() == 2
    vol = vdbflow.Volume.from_dense(rng.standard_normal((16, 16, 16, 3)).astype(np.float32))
    host = rng.uniform(0, 15, (2000, 3))
    results = []
    for d in (0, 1):
        with em.cuda.Device(d):
            assert em.cuda.runtime.getDevice() == d
            pts = em.asarray(host)
            assert pts.device.id == d
            v, j = vdbflow.sample_grad_arrays(vol, pts, device="cuda")
            results.append((v.get(), j.get()))
    assert em.cuda.runtime.getDevice() == 0
    k = vol.kernel_arrays()
    assert {key for key in k.device_cache if key[0] == "cuda"} == {("cuda", 0), ("cuda", 1)}
    rec0, rec1 = k.device_cache[("cuda", 0)], k.device_cache[("cuda", 1)]
    assert int(rec0.record["values"]) != int(rec1.record["values"])  # separate device copies
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])
    on_zero = em.asarray(host)
    with em.cuda.Device(1), pytest.raises(DeviceError, match="expected an array on the launch's device 1"):
        vdbflow.sample_grad_arrays(vol, on_zero, device="cuda")


def test_a_copy_from_pinned_memory_reads_it_when_its_stream_runs(emulated):
    """cupy.asarray of pinned host memory is a cudaMemcpyAsync: the host must not write the buffer until the
    stream has reached the copy.  (Pageable memory is staged at once.)"""
    pinned = em.empty_pinned((1000,), np.float64)
    pinned[:] = 1.0
    pageable = np.ones(1000)
    stream = em.cuda.Stream(non_blocking=True)
    blocker = threading.Event()
    stream.submit(blocker.wait)  # the stream is busy until the host lets it go
    with stream:
        from_pinned = em.asarray(pinned[:500])  # a view of pinned memory is pinned too
        from_pageable = em.asarray(pageable)
    pinned[:] = 2.0  # too early: the copy has not run
    pageable[:] = 2.0
    blocker.set()
    stream.synchronize()
    assert float(from_pinned.sum()) == 500 * 2.0  # what the buffer held when the copy ran (at once: 500)
    assert float(from_pageable.sum()) == 1000.0


HARNESS = Path(__file__).resolve().parent / "harness"


def test_the_threads_of_a_block_run_out_of_index_order(emulated):
    """Even blocks run their threads last to first, odd ones odd threads first: a kernel that counts on
    index order (a neighbour's write already made) gives wrong values here, as it may on a GPU."""
    from vdbflow.devices import cuda_build

    built = cuda_build.emulated_library(("record_order", "prefix_by_neighbour"), HARNESS / "emulate_order.cu")
    module = em.RawModule(path=str(built.path))
    order, counter = em.zeros(2 * 8, np.int32), em.zeros(2, np.int32)
    module.get_function("record_order")((2,), (8,), (order, counter))
    got = order.get().reshape(2, 8)
    assert got[0].tolist() == [7, 6, 5, 4, 3, 2, 1, 0]
    assert got[1].tolist() == [1, 3, 5, 7, 0, 2, 4, 6]
    x = em.ones(16, np.int32)
    module.get_function("prefix_by_neighbour")((2,), (8,), (x,))
    assert x.get().tolist() != list(range(1, 9)) * 2  # index order would have made a running sum


@pytest.fixture(scope="module")
def memory_kernels():
    """tests/harness/emulate_memory.cu built for the emulation (seconds: three small kernels)."""
    from vdbflow.devices import cuda_build

    built = cuda_build.emulated_library(("read_at", "write_at", "copy_through"), HARNESS / "emulate_memory.cu")
    return em.RawModule(path=str(built.path))


def _copy_through(module, record, out, stream=None):
    """out[i] = x[i] for the array x whose address record[0] holds (as a KernelAbi holds its arrays)."""
    module.get_function("copy_through")((4,), (256,), (record, out, np.int64(out.size)), stream=stream)


def test_a_freed_array_is_poisoned_and_its_memory_reused_at_once(emulated, memory_kernels):
    """A kernel that reads an array through an address kept after the array was freed reads NaN (the poison),
    or, once an allocation of its size took the memory (CuPy's pool reuses it at once), that array's values."""
    values = np.arange(1000.0)
    x = em.asarray(values)
    record = em.asarray(np.array([x.data.ptr], np.uint64))
    out = em.zeros(1000)
    _copy_through(memory_kernels, record, out)
    np.testing.assert_array_equal(out.get(), values)  # correct: x is alive
    del x  # the bug: the record still points at x
    _copy_through(memory_kernels, record, out)
    assert np.isnan(out.get()).all()  # poisoned: 0xFF bytes
    y = em.asarray(np.full(1000, 7.0))  # the same size: the freed block, at once
    _copy_through(memory_kernels, record, out)
    np.testing.assert_array_equal(out.get(), 7.0)
    assert int(record[0]) == y.data.ptr


@pytest.mark.parametrize(
    "allocated_on, stream_kind",
    [("launch stream", "non-blocking"), ("null stream", "blocking"), ("null stream", "non-blocking")],
)
def test_memory_freed_while_a_stream_reads_it_is_poisoned_in_stream_order(
    emulated, memory_kernels, allocated_on, stream_kind
):
    """An array freed after the launch that reads it is poisoned behind that launch where CUDA orders the reuse
    behind it (the launch's own stream; the null stream behind a blocking stream's work), and before it where
    nothing does (freed on the null stream while a non-blocking stream has still to read it: a real bug)."""
    stream, blocker = em.cuda.Stream(non_blocking=stream_kind == "non-blocking"), threading.Event()
    values = np.arange(1000.0)
    with stream if allocated_on == "launch stream" else em.cuda.Device(0):
        if allocated_on == "launch stream":
            stream.submit(blocker.wait)  # busy until the host lets it go
        x = em.asarray(values)
        record = em.asarray(np.array([x.data.ptr], np.uint64))
        out = em.asarray(np.zeros(1000))
    if allocated_on == "null stream":
        stream.submit(blocker.wait)
    _copy_through(memory_kernels, record, out, stream=stream)
    del x  # freed before the launch ran
    blocker.set()
    stream.synchronize()
    if stream_kind == "blocking" or allocated_on == "launch stream":
        np.testing.assert_array_equal(out.get(), values)
    else:
        assert np.isnan(out.get()).all()


def test_out_of_bounds_reads_and_writes_are_device_errors(emulated, memory_kernels):
    """Each array ends at a guard page (a read or write past the end faults: the launch reports it) and the
    bytes before its start are checked after each launch; in-bounds accesses pass."""
    read_at, write_at = memory_kernels.get_function("read_at"), memory_kernels.get_function("write_at")
    x, out = em.asarray(np.arange(10.0)), em.zeros(1)
    for i in (0, 9):
        read_at((1,), (32,), (x, np.int64(i), out))
        assert float(out[0]) == i
        write_at((1,), (32,), (x, np.int64(i), np.float64(-1.0)))
    with pytest.raises(
        DeviceError,
        match=r"read_at \(block 0, thread 0\) read device memory out of bounds .*: "
        r"byte 0 after the end of a device array of 80 bytes \(float64, shape \(10,\)\)",
    ):
        read_at((1,), (32,), (x, np.int64(10), out))
    with pytest.raises(DeviceError, match=r"write_at \(block 0, thread 0\) wrote device memory out of bounds"):
        write_at((1,), (32,), (x, np.int64(10), np.float64(5.0)))
    with pytest.raises(DeviceError, match=r"write_at wrote 8 bytes before the start of a device array of 80 bytes"):
        write_at((1,), (32,), (x, np.int64(-1), np.float64(5.0)))
    with pytest.raises(DeviceError, match="read device memory out of bounds .*no emulated device memory"):
        read_at((1,), (32,), (x, np.int64(2**40), out))
    np.testing.assert_array_equal(x.get(), [-1.0, 1, 2, 3, 4, 5, 6, 7, 8, -1.0])  # nothing out of bounds landed
    stream = em.cuda.Stream(non_blocking=True)
    read_at((1,), (32,), (x, np.int64(10), out), stream=stream)  # on a stream: raised at its synchronize
    with pytest.raises(DeviceError, match="read device memory out of bounds"):
        stream.synchronize()


def test_a_fault_in_a_synchronizing_kernel_stops_its_block(emulated):
    """A launch whose threads synchronize (a host thread a CUDA thread): the thread that faults stops, the
    block's other threads waiting at __syncthreads are let go, and the launch reports the fault."""
    from vdbflow.devices import cuda_build

    name = "vdbflow::reduce_kernel<1>"
    built = cuda_build.emulated_library((name,), HARNESS / "emulate_synchronized.cu")
    kernel = em.RawModule(path=str(built.path)).get_function(name)
    x, out = em.asarray(np.arange(10.0)), em.zeros(2)
    kernel((2,), (32,), (x, np.int64(7), np.uint32(5), out))
    assert out.get()[0] == 7.0
    with pytest.raises(DeviceError, match=r"reduce_kernel<1> \(block 0, thread 5\) read device memory out of bounds"):
        kernel((2,), (32,), (x, np.int64(10), np.uint32(5), out))
