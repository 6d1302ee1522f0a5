"""Host points through a GPU and back, at the speed of the copies: the host path of a GPU worker.

A :class:`HostPipeline` cuts a chunk of host points into pieces and runs them through two CUDA streams:
while one piece's kernel runs, the next piece's points are copied to the device and the previous
piece's outputs back, each through pinned (page-locked) host buffers that the pipeline allocates once
and reuses from chunk to chunk.  Every copy and launch of a piece is queued on its slot's stream without
waiting (the copies back too: ``blocking=False``); the host waits for a slot only before it reuses the
slot's buffers.  Only the outputs the request asks for come back (a job asking for Q alone copies back
4 bytes a point).  Each thread keeps one pipeline per GPU (:func:`host_pipeline`).

The array module ``xp`` is CuPy's; tests hand it a stand-in with the same few calls (pinned and device
buffers, streams, asynchronous copies) to check the pieces' order and assembly on a machine without a GPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

PIECE = 1 << 20  # points per piece: large enough to fill an H200, small enough to overlap three pieces


class HostPipeline:
    """Pieces of host points through ``launch`` on the device, two at a time (see the module docstring)."""

    def __init__(self, xp: Any, piece: int | None = None, pinned: Callable[[tuple, Any], np.ndarray] | None = None):
        self.xp = xp
        self.piece = int(piece or PIECE)
        self._pinned = pinned or _pinned_empty
        self.streams = [xp.cuda.Stream(non_blocking=True) for _ in range(2)]
        self._buffers: dict[tuple, list[Any]] = {}

    def _slot_buffers(self, key: tuple, shape: tuple, dtype: Any) -> list[Any]:
        """Two (pinned host, device) buffer pairs of ``(piece,) + shape``, made once per key."""
        found = self._buffers.get(key)
        if found is None:
            full = (self.piece, *shape)
            found = [(self._pinned(full, dtype), self.xp.empty(full, dtype)) for _ in range(2)]
            self._buffers[key] = found
        return found

    def run(
        self,
        points: np.ndarray,
        outputs: dict[str, tuple[tuple[int, ...], Any]],
        launch: Callable[[Any, dict[str, Any]], None],
        out: dict[str, np.ndarray] | None = None,
    ) -> dict[str, np.ndarray]:
        """``launch(device_points (m, 3) float64, device_outputs)`` for every piece of ``points`` (N, 3),
        outputs by name of ``(trailing shape, dtype)``; returns host arrays (N, ...) (``out`` where given)."""
        n = len(points)
        result = out if out is not None else {}
        for name, (shape, dtype) in outputs.items():
            if name not in result:
                result[name] = np.empty((n, *shape), dtype)
        if n == 0:
            return result
        pts_buf = self._slot_buffers(("points",), (3,), np.float64)
        out_buf = {
            name: self._slot_buffers(("out", name, shape, np.dtype(dtype).str), shape, dtype)
            for name, (shape, dtype) in outputs.items()
        }
        pending: list[tuple[int, int] | None] = [None, None]  # the piece (start, stop) each slot holds

        def drain(slot: int) -> None:
            if pending[slot] is None:
                return
            start, stop = pending[slot]
            self.streams[slot].synchronize()
            for name in outputs:
                result[name][start:stop] = out_buf[name][slot][0][: stop - start]
            pending[slot] = None

        for k, start in enumerate(range(0, n, self.piece)):
            slot, stop = k % 2, min(n, start + self.piece)
            m = stop - start
            drain(slot)  # its pinned buffers are free again once its last piece is back
            stream = self.streams[slot]
            host_pts, dev_pts = pts_buf[slot]
            host_pts[:m] = points[start:stop]
            dev_pts[:m].set(host_pts[:m], stream=stream)
            with stream:
                launch(dev_pts[:m], {name: out_buf[name][slot][1][:m] for name in outputs})
            for name in outputs:  # queued behind the kernel; drain(slot) waits for them
                host, dev = out_buf[name][slot]
                dev[:m].get(stream=stream, out=host[:m], blocking=False)
            pending[slot] = (start, stop)
        drain(0)
        drain(1)
        return result


def _pinned_empty(shape: tuple, dtype: Any) -> np.ndarray:
    """A NumPy array in pinned host memory (CuPy's pinned memory pool; host memory under emulation)."""
    from vdbflow.devices.cuda import emulated

    if emulated():
        from vdbflow.devices.emulation import empty_pinned
    else:  # pragma: no cover - needs a GPU
        from cupyx import empty_pinned
    return empty_pinned(shape, dtype)


_per_thread = threading.local()


def host_pipeline(device_id: int) -> HostPipeline:
    """This thread's pipeline for GPU ``device_id`` (its buffers live as long as the thread).  One per
    thread: a pipeline's pinned buffers, device buffers and streams serve one ``run`` at a time, and a
    Dask worker runs tasks on several threads."""
    from vdbflow.devices.cuda import cupy_module

    pipelines = getattr(_per_thread, "pipelines", None)
    if pipelines is None:
        pipelines = _per_thread.pipelines = {}
    pipe = pipelines.get(device_id)
    if pipe is None:
        pipe = pipelines[device_id] = HostPipeline(cupy_module())
    return pipe
