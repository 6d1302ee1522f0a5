"""The CUDA backend's arrays: CuPy (or its emulation, :mod:`vdbflow.devices.emulation`, under
``VDBFLOW_CUDA_EMULATE=1``), and the device copies of a volume's kernel arrays with their kernel records
(abi.h), made once per GPU and kept in ``KernelArrays.device_cache``."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from vdbflow.core import kernel
from vdbflow.core.kernel import KernelArrays, KernelRecord
from vdbflow.errors import DeviceError
from vdbflow.version import install_hint


def emulated() -> bool:
    """Whether ``VDBFLOW_CUDA_EMULATE=1``: the device code runs on the CPU (:mod:`vdbflow.devices.emulation`)."""
    return os.environ.get("VDBFLOW_CUDA_EMULATE", "0") == "1"


def cupy_module() -> Any:
    """CuPy, checked to see a GPU; or its emulation under ``VDBFLOW_CUDA_EMULATE=1``."""
    if emulated():
        from vdbflow.devices import emulation

        return emulation
    try:
        import cupy
    except ImportError as err:  # pragma: no cover - depends on the machine
        raise DeviceError(
            f"device='cuda' needs CuPy: {install_hint('gpu')} (CUDA 12) or {install_hint('gpu-cuda13')}"
        ) from err
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # pragma: no cover - depends on the machine
        raise DeviceError(f"device='cuda' needs an NVIDIA GPU, CUDA reported: {err}") from err
    if count == 0:  # pragma: no cover
        raise DeviceError("device='cuda' needs an NVIDIA GPU, found none")
    return cupy


def device_record(k: KernelArrays) -> KernelRecord:
    """The record of ``k`` on the current GPU: device copies of the (checked) host arrays and a record
    pointing into them, made once and kept in ``k.device_cache``."""
    cupy = cupy_module()
    key = ("cuda", cupy.cuda.runtime.getDevice())
    rec = k.device_cache.get(key)
    if rec is None:
        host = kernel.host_record(k).arrays
        uploads = {
            f: cupy.asarray(getattr(host, f)) for f in ("masks", "prefix", "leaf_offset", "values", "tile_values")
        }
        at = None if host.leaf_values_at is None else cupy.asarray(host.leaf_values_at)
        tables = tuple(cupy.asarray(t) for t in host.tables)
        dev = dataclasses.replace(
            host, **uploads, tables=tables, background=cupy.asarray(host.background), leaf_values_at=at, device_cache={}
        )
        # the uploads ran on the current stream: finish them before another stream's kernels read them
        cupy.cuda.get_current_stream().synchronize()
        rec = k.device_cache.setdefault(key, KernelRecord(dev, kernel.make_record(dev)))  # one, if threads race
    return rec


def call_record(
    k: KernelArrays, mode: int, points_world: bool, jacobian_world: bool, hessian_world: bool = False
) -> tuple[KernelRecord, Any]:
    """The device record and a device copy of one call's record bytes (kept per option set)."""
    rec = device_record(k)
    options = (int(mode), bool(points_world), bool(jacobian_world), bool(hessian_world))
    call = rec.arrays.device_cache.get(options)
    if call is None:
        raw = np.frombuffer(rec.call(*options).tobytes(), np.uint8)
        xp = cupy_module()
        made = xp.asarray(raw)
        xp.cuda.get_current_stream().synchronize()  # as device_record: other streams will read it
        call = rec.arrays.device_cache.setdefault(options, made)
    return rec, call
