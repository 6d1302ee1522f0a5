"""The array module the GPU tests run on: CuPy on a machine with an NVIDIA GPU, else vdbflow's emulation of
CUDA (VDBFLOW_CUDA_EMULATE=1: sample.cu's device code compiled for the host, devices/cuda.py unchanged).

``emulate`` is an autouse fixture for the GPU test modules: it sets VDBFLOW_CUDA_EMULATE=1 for each test
where there is no GPU, so that the rest of the suite still sees a machine without CUDA."""

import os

import pytest

try:
    import cupy as _cupy

    HAVE_GPU = _cupy.cuda.runtime.getDeviceCount() > 0
except Exception:  # no CuPy, or no driver
    HAVE_GPU = False

if HAVE_GPU:  # pragma: no cover - needs a GPU
    cupy = _cupy
    EMULATED = False
else:
    from vdbflow.devices import emulation as cupy  # noqa: F401 - the array module of the GPU tests

    EMULATED = True


@pytest.fixture(autouse=True)
def emulate(monkeypatch):
    if EMULATED:
        monkeypatch.setenv("VDBFLOW_CUDA_EMULATE", "1")
    yield EMULATED


if os.environ.get("VDBFLOW_REQUIRE_GPU") == "1" and not HAVE_GPU:  # scripts/gpu_check.sh
    raise RuntimeError("VDBFLOW_REQUIRE_GPU=1 but CuPy sees no GPU: the GPU tests would only run emulated")
