import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from object_store import memory_fs, s3  # noqa: E402, F401  (fixtures: moto's S3 server, memory://)


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


def f32_tolerance(values) -> float:
    """Agreement with Warp for float32 data: 32 * eps_f32 * max|v| (docs/design.md)."""
    return 32 * float(np.finfo(np.float32).eps) * max(1.0, float(np.abs(values).max()))
