"""What the suite samples of its long campaigns and compiles (the whole of each is a script: docs/testing.md).

``RUN_SEED`` is drawn once a run (``tests/conftest.py`` puts it in ``VDBFLOW_TEST_SEED`` before any worker
starts, and prints it in the header), so every run covers another sample and a failing one is rerun with
``VDBFLOW_TEST_SEED=<seed> pytest ...``."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def run_seed() -> int:
    """This run's seed (``VDBFLOW_TEST_SEED``; conftest sets it when the run starts)."""
    return int(os.environ.get("VDBFLOW_TEST_SEED", "0"))


def sample(items: Sequence[T], k: int, salt: str, always: Sequence[T] = ()) -> list[T]:
    """``always`` and ``k`` more of ``items``, drawn by this run's seed and ``salt`` (one draw a test), in
    ``items``' order."""
    rest = [x for x in items if x not in always]
    picked = set(random.Random(f"{run_seed()}:{salt}").sample(range(len(rest)), min(k, len(rest))))
    chosen = [*always, *(x for i, x in enumerate(rest) if i in picked)]
    return [x for x in items if x in chosen]
