"""Far periodic images on the device (issue 49 row 14): the CUDA backend's device code (a GPU, or the
emulation where there is none) reads a point 4e15 to 1e300 voxels from a periodic box with the bits of its
image, as the CPU does (tests/test_hostile_statistics.py); the image computed in exact rational arithmetic."""

from fractions import Fraction

import numpy as np
import pytest
from gpu_support import cupy, emulate  # noqa: F401 - emulate: the autouse fixture

import vdbflow

pytestmark = pytest.mark.gpu

FAR = [3.0 + 2**40 * 32, 2.0**52 + 5, 4.1e15 + 0.5, 1e17, 1e300, -1e300, -(2.0**53) - 2, -4.2e15 - 0.25, 2.0**63]


def _image(x: float, size: int) -> float:
    fx = Fraction(x)
    return float(fx - (fx // size) * size)


@pytest.mark.parametrize("mode", ["closest", "linear", "lag4"])
def test_a_far_periodic_image_reads_its_images_bits_on_the_device(mode):
    n = 32
    box = vdbflow.Volume.from_dense(np.random.default_rng(1).standard_normal((n, n, n)), periodic=True)
    far = np.stack([np.array(FAR), np.full(len(FAR), 7.0), np.full(len(FAR), 11.25)], 1)
    near = far.copy()
    near[:, 0] = [_image(x, n) for x in FAR]
    on_device = [
        vdbflow.sample_grad_arrays(box, cupy.asarray(p), mode, space="index", jacobian=False, device="cuda")[0].get()
        for p in (near, far)
    ]
    np.testing.assert_array_equal(on_device[1], on_device[0])  # the image's bits, on the device
    cpu = vdbflow.sample_grad_arrays(box, near, mode, space="index", jacobian=False)[0]
    assert np.all(np.isfinite(cpu))  # and the CPU's values, but for the multiply-adds its targets fuse
    np.testing.assert_allclose(on_device[0], cpu, rtol=0, atol=64 * np.finfo(np.float64).eps * np.abs(cpu).max())
