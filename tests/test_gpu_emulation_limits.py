"""The emulation of CUDA lies less: a device-memory limit (``VDBFLOW_CUDA_EMULATE_MEMORY``: an allocation past
it is CuPy's OutOfMemoryError, freed arrays give their bytes back) and several devices
(``VDBFLOW_CUDA_EMULATE_DEVICES``: each with its own copies of a volume, and a kernel refusing an array of
another device), so that memory pressure and multi-GPU placement run in CI."""

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
