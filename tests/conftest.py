import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from object_store import memory_fs, s3  # noqa: E402, F401  (fixtures: moto's S3 server, memory://)


def pytest_configure(config):
    # the seed of what this run samples of the long campaigns and compiles (tests/sampling.py): drawn here,
    # before pytest-xdist starts its workers, so that they all inherit it
    os.environ.setdefault("VDBFLOW_TEST_SEED", str(int.from_bytes(os.urandom(4), "little")))


def pytest_report_header(config):
    return f"sampled campaigns and compiles: VDBFLOW_TEST_SEED={os.environ['VDBFLOW_TEST_SEED']} (tests/sampling.py)"


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)


def f32_tolerance(values) -> float:
    """Agreement with Warp for float32 data: 32 * eps_f32 * max|v| (docs/design.md)."""
    return 32 * float(np.finfo(np.float32).eps) * max(1.0, float(np.abs(values).max()))
