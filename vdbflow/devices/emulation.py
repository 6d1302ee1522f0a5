"""A stand-in for CuPy that runs vdbflow's CUDA backend on the host (``VDBFLOW_CUDA_EMULATE=1``).

The backend (:mod:`vdbflow.devices.cuda`) takes its array module from ``cupy_module()``; under emulation that
is this module, so the backend's own code runs unchanged on a machine without a GPU: its arrays, copies,
streams and launches go through the calls below, and its kernels are sample.cu's device code compiled for the
host (:func:`vdbflow.devices.cuda_build.emulated_library`, launched as ``emulate/cuda_host.h`` describes).

What is emulated as a GPU behaves, so that the mistakes a GPU punishes show here too:

- device memory is a NumPy array inside :class:`ndarray`, which refuses implicit conversion to NumPy (as
  CuPy does: ``.get()`` copies to the host) and refuses NumPy arrays in its operations;
- a kernel checks its arguments against the entry's C++ parameters: a scalar must be a NumPy scalar of the
  parameter's exact type (CuPy passes a scalar by its own size), a pointer an :class:`ndarray` of the
  pointee's dtype or a ``numpy.uint64`` address (a host array is refused);
- streams made with ``Stream()`` run their work (launches, ``asarray``/``set``/``get`` copies, event records
  and waits) in order on a thread of their own, so work that is not ordered by the stream, an event or a
  synchronize really runs concurrently; a copy reads its host buffer when it runs, not when it is asked
  for; a failure is raised at the stream's next synchronize; the null stream runs work at once on the
  calling thread after the blocking streams' work, and never waits for non-blocking streams;
- a launch's blocks run on ``VDBFLOW_CUDA_EMULATE_THREADS`` host threads (default 4);
- ``asarray`` of pinned host memory (``empty_pinned``) reads it when the stream runs the copy, as
  ``cudaMemcpyAsync`` does (pageable memory is staged at once, as CUDA stages it);
- device memory is a pool as CuPy's (:mod:`vdbflow.devices.emulation_memory`): freed memory is poisoned in
  its stream's order and reused at once, guard pages and guard bytes around each array make a kernel's
  out-of-bounds read or write a DeviceError, and a launch keeps no argument alive (as CuPy's does not);
- ``VDBFLOW_CUDA_EMULATE_MEMORY`` bytes of device memory at most: past it an allocation is
  ``cuda.memory.OutOfMemoryError``; arrays give their bytes back when NumPy frees them (``memGetInfo``);
- ``VDBFLOW_CUDA_EMULATE_DEVICES`` devices (default 1): ``Device(n)`` makes one current, each array belongs
  to the device current when it was made, and a launch refuses an array of another device.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from vdbflow.devices import emulation_memory as memory
from vdbflow.devices.emulation_memory import OutOfMemoryError, allocated_bytes, memory_limit
from vdbflow.devices.emulation_streams import (
    Event,
    Stream,
    get_current_stream,
    get_elapsed_time,
    in_order_of,
    ordered,
    synchronize_all,
)
from vdbflow.errors import DeviceError

float16, float32, float64 = np.float16, np.float32, np.float64
int8, int16, int32, int64 = np.int8, np.int16, np.int32, np.int64
uint8, uint16, uint32, uint64 = np.uint8, np.uint16, np.uint32, np.uint64
bool_ = np.bool_
dtype = np.dtype
__version__ = "emulated"


def host_threads() -> int:
    return max(1, int(os.environ.get("VDBFLOW_CUDA_EMULATE_THREADS", "4")))


# --- device arrays -------------------------------------------------------------------------------------


class _Pointer:
    def __init__(self, ptr: int):
        self.ptr = ptr


def _host_array_refused(what: str) -> TypeError:
    return TypeError(
        f"emulated CuPy: {what} got a NumPy array; device code takes device arrays (asarray copies to the device)"
    )


def _unwrap(x: Any, what: str, allow_host: bool = False) -> Any:
    if isinstance(x, ndarray):
        return x._a
    if isinstance(x, np.ndarray) and x.ndim > 0 and not allow_host:
        raise _host_array_refused(what)
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(v, what, allow_host) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap(v, what, allow_host) for k, v in x.items()}
    return x


def _wrap(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return ndarray(x)
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    return x


class ndarray(NDArrayOperatorsMixin):  # noqa: N801 - CuPy's name
    """An array in (emulated) device memory, on the device that was current when it was made."""

    __cuda_emulated__ = True

    def __init__(self, a: np.ndarray):
        self._device = _current_device()
        self._a = _pooled(a, self._device) if a.flags.owndata else a  # views: of pool memory, or shared (DLPack)

    @property
    def device(self) -> Device:
        return Device(self._device)

    # what CuPy arrays have
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: ndarray(self._a.T))
    data = property(lambda self: _Pointer(self._a.ctypes.data))

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self._a.shape,
            "typestr": self._a.dtype.str,
            "data": (self._a.ctypes.data, False),
            "strides": None if self._a.flags.c_contiguous else self._a.strides,
            "version": 3,
        }

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` (emulated CuPy)")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        ordered()
        args = _unwrap(inputs, f"{ufunc.__name__}")
        kw = _unwrap(kwargs, f"{ufunc.__name__}")
        return _wrap(getattr(ufunc, method)(*args, **kw))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        ordered()
        return _wrap(func(*_unwrap(args, func.__name__), **_unwrap(kwargs, func.__name__)))

    def __getitem__(self, key: Any) -> Any:
        ordered()
        return _wrap(self._a[_unwrap(key, "indexing")])

    def __setitem__(self, key: Any, value: Any) -> None:
        ordered()
        self._a[_unwrap(key, "indexing")] = _unwrap(value, "assignment", allow_host=True)

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Any:
        ordered()
        return (_wrap(v) for v in self._a)

    def _scalar(self) -> Any:
        ordered()
        if self._a.size != 1:
            raise TypeError("only size-1 arrays can be converted to Python scalars")
        return self._a.reshape(()).item()

    def __int__(self) -> int:
        return int(self._scalar())

    def __float__(self) -> float:
        return float(self._scalar())

    def __bool__(self) -> bool:
        return bool(self._scalar())

    def __index__(self) -> int:
        return int(self._scalar())

    def __repr__(self) -> str:
        ordered()
        return f"emulated {self._a!r}"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # NumPy's protocols (__array_interface__, ...) would expose host memory
            raise AttributeError(name)
        attr = getattr(self._a, name)  # methods: astype, reshape, sum, min, max, copy, ravel, fill, view, ...
        if not callable(attr):
            return _wrap(attr)

        def method(*args: Any, **kwargs: Any) -> Any:
            ordered()
            return _wrap(attr(*_unwrap(args, name), **_unwrap(kwargs, name)))

        return method

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        """DLPack of the device memory (host memory here: kDLCPU), after the current stream's work."""
        ordered()
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._a.__dlpack_device__()

    def get(self, stream: Stream | None = None, order: str = "C", out: np.ndarray | None = None, blocking: bool = True):
        """A host copy (into ``out`` where given), in ``stream``'s order (the current stream's by default);
        ``blocking``: wait for it."""
        stream = stream or get_current_stream()
        target = np.empty(self._a.shape, self._a.dtype) if out is None else out
        if target.shape != self._a.shape or target.dtype != self._a.dtype:
            raise ValueError(f"emulated CuPy: get(out=) expected {self._a.shape} {self._a.dtype}, got {target.shape}")

        def copy() -> None:
            target[...] = self._a

        stream.submit(copy)
        if blocking:
            stream.synchronize()
        return target

    def set(self, arr: np.ndarray, stream: Stream | None = None) -> None:
        """Copies host ``arr`` in, in ``stream``'s order (the copy reads ``arr`` when it runs)."""
        stream = stream or get_current_stream()
        if tuple(arr.shape) != self._a.shape:
            raise ValueError(f"emulated CuPy: set() expected shape {self._a.shape}, got {arr.shape}")

        def copy() -> None:
            self._a[...] = arr

        stream.submit(copy)


def _pooled(a: np.ndarray, device: int) -> np.ndarray:
    """``a``'s values in device memory of the pool, on the current stream."""
    stream = get_current_stream()
    return memory.pooled_copy(a, device, stream.ptr, in_order_of(stream))


def _empty(shape: tuple, dtype: Any) -> ndarray:
    stream = get_current_stream()
    return ndarray(memory.device_empty(shape, dtype, _current_device(), stream.ptr, in_order_of(stream)))


def asarray(a: Any, dtype: Any = None, order: Any = None) -> ndarray:
    """A device array: ``a`` itself (or a cast) for a device array, a copy for host data."""
    if isinstance(a, ndarray):
        ordered()
        return a if dtype is None or np.dtype(dtype) == a.dtype else ndarray(a._a.astype(dtype))
    if isinstance(a, PinnedArray) and (dtype is None or np.dtype(dtype) == a.dtype):
        host = a  # pinned: the copy reads the buffer when the stream reaches it (cudaMemcpyAsync)
        out = _empty(a.shape, a.dtype)
    else:
        host = np.array(a, dtype=dtype, order=order or "K", copy=True)  # read now: CUDA stages pageable memory
        out = _empty(host.shape, host.dtype)

    def copy() -> None:
        out._a[...] = host

    get_current_stream().submit(copy)  # arrives in the current stream's order
    return out


def ascontiguousarray(a: Any, dtype: Any = None) -> ndarray:
    ordered()
    if isinstance(a, ndarray):
        out = np.ascontiguousarray(a._a, dtype=dtype)
        return a if out is a._a else ndarray(out)
    raise _host_array_refused("ascontiguousarray")


def array(a: Any, dtype: Any = None, copy: bool = True) -> ndarray:
    ordered()
    return ndarray(np.array(a._a if isinstance(a, ndarray) else a, dtype=dtype, copy=True))


def asnumpy(a: Any, stream: Stream | None = None, out: np.ndarray | None = None) -> np.ndarray:
    return a.get(stream=stream, out=out) if isinstance(a, ndarray) else np.asarray(a)


def get_array_module(*arrays: Any) -> Any:
    return sys.modules[__name__] if any(isinstance(a, ndarray) for a in arrays) else np


def from_dlpack(x: Any) -> ndarray:
    """A device array sharing ``x``'s memory (DLPack, no copy; a CPU producer here)."""
    return ndarray(np.from_dlpack(x))


class PinnedArray(np.ndarray):
    """Host memory pinned for the device (views of it too): a copy from it is asynchronous."""


def empty_pinned(shape: Any, dtype: Any = float) -> np.ndarray:
    """Pinned host memory (cupyx.empty_pinned): copies to the device read it when their stream runs them."""
    return np.empty(shape, dtype).view(PinnedArray)


def __getattr__(name: str) -> Any:
    """NumPy's functions as device functions: device arrays in, device arrays out (host arrays refused)."""
    func = getattr(np, name)
    if not callable(func) or isinstance(func, type):
        return func

    @functools.wraps(func)
    def device_function(*args: Any, **kwargs: Any) -> Any:
        ordered()
        return _wrap(func(*_unwrap(args, name), **_unwrap(kwargs, name)))

    return device_function


# --- the CUDA runtime and modules -----------------------------------------------------------------------


def device_count() -> int:
    """Emulated devices: ``VDBFLOW_CUDA_EMULATE_DEVICES`` (default 1), so that multi-GPU placement runs in CI."""
    text = os.environ.get("VDBFLOW_CUDA_EMULATE_DEVICES", "1")
    if not text.isdigit() or int(text) < 1:
        raise DeviceError(f"expected VDBFLOW_CUDA_EMULATE_DEVICES to be a count of devices (1, 2, ...), got {text!r}")
    return int(text)


_local = threading.local()


def _current_device() -> int:
    return getattr(_local, "device", 0)


class _Runtime:
    @staticmethod
    def getDevice() -> int:  # noqa: N802 - CUDA's names
        return _current_device()

    @staticmethod
    def setDevice(device: int) -> None:  # noqa: N802
        Device(device).use()

    @staticmethod
    def getDeviceCount() -> int:  # noqa: N802
        return device_count()

    @staticmethod
    def deviceSynchronize() -> None:  # noqa: N802
        synchronize_all()

    @staticmethod
    def runtimeGetVersion() -> int:  # noqa: N802
        return 0

    @staticmethod
    def memGetInfo() -> tuple[int, int]:  # noqa: N802
        """(free, total) bytes of the emulated device memory (total: the limit, else the host's memory)."""
        limit = memory_limit()
        total = limit if limit is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return max(0, total - allocated_bytes()), total


class Device:
    """An emulated device (``VDBFLOW_CUDA_EMULATE_DEVICES`` of them): ``with Device(1):`` or ``.use()`` makes it
    the calling thread's current device, as in CuPy."""

    def __init__(self, device: int | None = None):
        device = _current_device() if device is None else int(device)
        count = device_count()
        if not 0 <= device < count:
            raise DeviceError(f"expected an emulated device among 0..{count - 1}, got {device}")
        self.id = device
        self.compute_capability = "emulated"
        self._previous: list[int] = []

    def synchronize(self) -> None:
        synchronize_all()

    def use(self) -> None:
        _local.device = self.id

    def __enter__(self) -> Device:
        self._previous.append(_current_device())
        self.use()
        return self

    def __exit__(self, *exc: Any) -> None:
        _local.device = self._previous.pop()


_PACK = {  # the signature letters of emulate/cuda_host.h: the NumPy scalar type each parameter takes
    "b": np.int8,
    "B": np.uint8,
    "h": np.int16,
    "H": np.uint16,
    "i": np.int32,
    "I": np.uint32,
    "q": np.int64,
    "Q": np.uint64,
    "f": np.float32,
    "d": np.float64,
    "?": np.bool_,
}


class Function:
    """One entry of an emulated module: ``f(grid, block, args, shared_mem=0, stream=None)`` as CuPy's."""

    def __init__(self, library: ctypes.CDLL, index: int, name: str, signature: str):
        self._lib, self._index, self.name, self.signature = library, index, name, signature

    @property
    def parameters(self) -> list[str]:
        """One token a parameter: a scalar's letter, or 'p' and the pointee's letter."""
        tokens, sig = [], self.signature
        i = 0
        while i < len(sig):
            step = 2 if sig[i] == "p" else 1
            tokens.append(sig[i : i + step])
            i += step
        return tokens

    def _pack(self, args: tuple) -> tuple[Any, list]:
        params = self.parameters
        if len(args) != len(params):
            raise TypeError(f"{self.name}: expected {len(params)} kernel arguments, got {len(args)}")
        values = []
        for position, (token, arg) in enumerate(zip(params, args, strict=True)):
            where = f"{self.name} argument {position}"
            letter = token[0]
            if letter == "p":
                if isinstance(arg, ndarray):
                    if arg._device != _current_device():
                        raise DeviceError(
                            f"{where}: expected an array on the launch's device {_current_device()}, got one on "
                            f"device {arg._device} (a GPU reads another GPU's memory only through peer access)"
                        )
                    pointee = token[1]
                    want = np.dtype(np.uint64) if pointee == "P" else _PACK.get(pointee)
                    if want is not None and arg.dtype != np.dtype(want):
                        raise TypeError(f"{where}: expected a device array of {np.dtype(want)}, got {arg.dtype}")
                    value = ctypes.c_void_p(arg._a.ctypes.data)  # CuPy keeps no argument alive: nor does this
                elif type(arg) is np.uint64:
                    value = ctypes.c_void_p(int(arg) or None)
                else:
                    raise TypeError(f"{where}: expected a device array or a numpy.uint64 address, got {type(arg)}")
            else:
                expected = _PACK[letter]
                if type(arg) is not expected:
                    raise TypeError(
                        f"{where}: expected a {np.dtype(expected)} scalar, got {type(arg).__name__} {arg!r}"
                    )
                value = np.ctypeslib.as_ctypes_type(np.dtype(expected))(arg)
            values.append(value)
        pointers = (ctypes.c_void_p * max(1, len(values)))(
            *(ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values)
        )
        return pointers, values

    def __call__(
        self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0, stream: Stream | None = None
    ) -> None:
        grid, block = tuple(grid) + (1, 1), tuple(block) + (1, 1)
        if grid[1:3] != (1, 1) or block[1:3] != (1, 1):
            raise DeviceError(f"emulated CUDA launches one-dimensional grids and blocks, got {grid[:3]} x {block[:3]}")
        if not (0 < grid[0] < 2**31 and 0 < block[0] <= 1024):
            raise DeviceError(f"invalid launch: {grid[0]} blocks of {block[0]} threads")
        pointers, keep = self._pack(tuple(args))
        stream = stream or get_current_stream()
        threads = host_threads()

        def run() -> None:
            _ = keep  # the packed values (not the arrays) live until the launch has run
            fault = (ctypes.c_uint64 * 4)()
            self._lib.vdbflow_emulate_launch(self._index, grid[0], block[0], pointers, threads)
            if self._lib.vdbflow_emulate_fault(fault):  # a fault in kernel code, the launch stopped
                raise DeviceError(memory.describe_fault(self.name, *fault))
            memory.check_guards(self.name)

        stream.submit(run)


class RawModule:
    """A module of emulated entries: the shared library that ``cuda_build.emulated_library`` built."""

    def __init__(self, code: str | None = None, path: str | None = None, **_: Any):
        if path is None:
            raise DeviceError("emulated CUDA loads built modules only (RawModule(path=...))")
        lib = _library(str(path))
        self._lib = lib
        self._entries = {}
        for e in range(lib.vdbflow_emulate_count()):
            self._entries[lib.vdbflow_emulate_name(e).decode()] = (e, lib.vdbflow_emulate_signature(e).decode())

    def get_function(self, name: str) -> Function:
        found = self._entries.get(name)
        if found is None:
            raise DeviceError(f"expected an entry {name!r} in the emulated module, it has {sorted(self._entries)}")
        return Function(self._lib, found[0], name, found[1])


@functools.cache
def _library(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    lib.vdbflow_emulate_count.restype = ctypes.c_int
    lib.vdbflow_emulate_name.restype = ctypes.c_char_p
    lib.vdbflow_emulate_name.argtypes = [ctypes.c_int]
    lib.vdbflow_emulate_signature.restype = ctypes.c_char_p
    lib.vdbflow_emulate_signature.argtypes = [ctypes.c_int]
    lib.vdbflow_emulate_launch.restype = None
    lib.vdbflow_emulate_launch.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_int]
    lib.vdbflow_emulate_fault.restype = ctypes.c_int  # 1: the calling thread's last launch faulted
    lib.vdbflow_emulate_fault.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    return lib


class _Cuda:
    """``cupy.cuda`` as the backend uses it."""

    runtime = _Runtime
    Stream = Stream
    Event = Event
    Device = Device
    get_current_stream = staticmethod(get_current_stream)
    get_elapsed_time = staticmethod(get_elapsed_time)

    class memory:  # noqa: N801 - cupy.cuda.memory
        OutOfMemoryError = OutOfMemoryError


cuda = _Cuda
