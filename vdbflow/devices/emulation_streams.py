"""The emulated CUDA's streams and events (``VDBFLOW_CUDA_EMULATE=1``, :mod:`vdbflow.devices.emulation`): work of
a stream made with ``Stream()`` runs in order on a thread of its own; the legacy null stream runs work at once on
the calling thread after the blocking streams' work; a failure is raised at the stream's next synchronize."""

from __future__ import annotations

import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from vdbflow.devices import emulation_memory as memory
from vdbflow.errors import DeviceError

_registry_lock = threading.RLock()  # re-entrant, as every lock a finalizer (a freed array) may take


def streams_of(streams: weakref.WeakSet) -> list[Stream]:
    """A copy of a set of streams, taken while no thread adds one."""
    with _registry_lock:
        return list(streams)


class Stream:
    """A CUDA stream: work runs in order on a thread of its own (the null stream: at once, see the module)."""

    _blocking: weakref.WeakSet[Stream] = weakref.WeakSet()  # the legacy null stream waits for these
    _all: weakref.WeakSet[Stream] = weakref.WeakSet()

    def __init__(self, null: bool = False, non_blocking: bool = False, ptr: int = 0):
        self.null = null
        self.non_blocking = non_blocking
        self.ptr = 0 if null else id(self)
        self._executor = None if null else ThreadPoolExecutor(1, thread_name_prefix="emulated-stream")
        self._last: Future | None = None
        self._error: BaseException | None = None
        self._lock = threading.RLock()
        if not null:
            with _registry_lock:
                Stream._all.add(self)
                if not non_blocking:
                    Stream._blocking.add(self)
            weakref.finalize(self, memory.forget_stream, self.ptr).atexit = False

    def busy(self) -> bool:
        """Work submitted and not yet run."""
        last = self._last
        return last is not None and not last.done()

    def in_order(self, work: Any) -> None:
        """Runs ``work()`` after the work this stream has now (the null stream: after the blocking streams'),
        never waiting: what a freed array's poisoning takes, from any thread."""
        if not self.null:
            self.submit(work, always=True)
            return
        busy = [s for s in streams_of(Stream._blocking) if s.busy()]
        left, lock = [len(busy)], threading.Lock()

        def reached() -> None:
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                work()

        for other in busy:
            other.submit(reached, always=True)
        if not busy:
            work()

    def submit(self, work: Any, always: bool = False) -> None:
        """Runs ``work()`` in the stream's order; a failure is kept and raised by :meth:`synchronize` (as
        CUDA reports a failed launch at the next synchronization), and the stream's later work is skipped."""
        if self.null:
            for other in streams_of(Stream._blocking):
                other.synchronize()
            work()
            return

        def run() -> None:
            if self._error is None or always:  # markers (events) run even after a failure: nothing waits forever
                try:
                    work()
                except BaseException as err:
                    self._error = err

        with self._lock:
            self._last = self._executor.submit(run)

    def synchronize(self) -> None:
        with self._lock:
            last = self._last
        if last is not None:
            last.result()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def record(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        marker = event._marker
        if marker is not None:
            self.submit(marker.result)

    def __enter__(self) -> Stream:
        current_stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        current_stack().pop()

    def use(self) -> Stream:
        stack = current_stack()
        stack[:] = [self]
        return self


class Event:
    """A CUDA event: a marker in a stream's order."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self._marker: Future | None = None
        self._time: float | None = None  # perf_counter when the stream reached the marker

    def record(self, stream: Stream | None = None) -> None:
        stream = stream or get_current_stream()
        marker: Future = Future()
        self._marker = marker
        self._time = None

        def reached() -> None:
            self._time = time.perf_counter()
            marker.set_result(None)

        stream.submit(reached, always=True)

    def synchronize(self) -> None:
        if self._marker is not None:
            self._marker.result()

    @property
    def done(self) -> bool:
        return self._marker is None or self._marker.done()


Stream.null = Stream(null=True)  # type: ignore[attr-defined]


def get_elapsed_time(start: Event, end: Event) -> float:
    """Milliseconds between two recorded events, once both were reached (cupy.cuda.get_elapsed_time)."""
    if start._marker is None or end._marker is None:
        raise DeviceError("emulated CUDA: get_elapsed_time needs two recorded events")
    if not (start._marker.done() and end._marker.done()):
        raise DeviceError("emulated CUDA: an event of get_elapsed_time is not reached yet (synchronize it first)")
    return (end._time - start._time) * 1e3


_local = threading.local()


def current_stack() -> list[Stream]:
    stack = getattr(_local, "streams", None)
    if stack is None:
        stack = _local.streams = []
    return stack


def get_current_stream() -> Stream:
    stack = current_stack()
    return stack[-1] if stack else Stream.null  # type: ignore[attr-defined]


def ordered() -> None:
    """Work done at once on the calling thread follows the current stream's earlier work (stream order)."""
    stream = get_current_stream()
    if stream.null:
        for other in streams_of(Stream._blocking):
            other.synchronize()
    else:
        stream.synchronize()


def synchronize_all() -> None:
    for stream in streams_of(Stream._all):
        stream.synchronize()


def in_order_of(stream: Stream) -> Any:
    """``stream.in_order``, the stream held weakly (a dead stream's work has all run)."""
    if stream.null:
        return stream.in_order
    ref = weakref.ref(stream)

    def in_order(work: Any) -> None:
        alive = ref()
        if alive is None:
            work()
        else:
            alive.in_order(work)

    return in_order
