"""The two walks of docs/architecture.md, measured: the vdbflow modules whose Python functions run, in the
order they are first entered, for points sampled by ``Volume.sample_grad`` and for a job run from a config
(the client's side: the workers' task threads are not traced).

    python scripts/walks.py            # both walks, one module a line
    python scripts/walks.py --markdown # both walks as docs/architecture.md lists them

tests/test_walks.py holds docs/architecture.md's figures to these measurements.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import numpy as np


def walk(fn) -> list[str]:
    """The vdbflow modules entered while ``fn()`` runs in this thread, in first-entered order."""
    seen: dict[str, None] = {}

    def profile(frame, event, arg):
        if event == "call":
            name = frame.f_globals.get("__name__", "")
            if name.startswith("vdbflow") and name not in seen:
                seen[name] = None

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return list(seen)


def point_walk() -> list[str]:
    import vdbflow

    vol = vdbflow.Volume.from_dense(np.random.default_rng(0).standard_normal((16, 16, 16, 3)).astype(np.float32))
    pts = np.random.default_rng(1).uniform(2, 12, (100, 3))
    vol.sample_grad(pts, space="index")  # warm: first-use imports are not part of the walk
    return walk(lambda: vol.sample_grad(pts, space="index"))


def job_walk() -> list[str]:
    import distributed

    import vdbflow

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "job.yaml"
        config.write_text(
            "volume: {synthetic: {field: taylor_green, resolution: 32}}\n"
            "points: {kind: random, count: 2000, chunk: 1000, seed: 1}\n"
            "sampling: {mode: linear, outputs: [value, jacobian, q_criterion]}\n"
            f"output: {{path: {tmp}/out.zarr}}\n"
        )
        with (
            distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
            distributed.Client(c) as client,
        ):
            vdbflow.run(config, client=client, **{"output.path": f"{tmp}/warm.zarr"})  # warm
            return walk(lambda: vdbflow.run(config, client=client))


def short(modules: list[str]) -> list[str]:
    """Module names as docs/architecture.md writes them: without the leading ``vdbflow.``."""
    return [m.removeprefix("vdbflow.") for m in modules]


# "Measured with `python scripts/walks.py` (...): **N** modules: `a`, `b`, ..." - the count, then the names
_DOCUMENTED = re.compile(
    r"Measured with `python scripts/walks\.py`[^*]*\*\*(\d+)\*\*\s+modules:\s*((?:`[\w.]+`(?:,\s*)?)+)"
)


def documented(text: str) -> list[tuple[int, list[str]]]:
    """The walks a page states, in its order: (the bold count, the module names listed after it)."""
    return [(int(n), re.findall(r"`([\w.]+)`", names)) for n, names in _DOCUMENTED.findall(text)]


def markdown(modules: list[str]) -> str:
    """A walk as the page states it: the bold count, then the names."""
    return f"**{len(modules)}** modules: " + ", ".join(f"`{m}`" for m in short(modules))


if __name__ == "__main__":
    for title, modules in (("a point (Volume.sample_grad)", point_walk()), ("a job (vdbflow.run)", job_walk())):
        if "--markdown" in sys.argv:
            print(f"{title}: {markdown(modules)}")
            continue
        print(f"{title}: {len(modules)} modules")
        for m in modules:
            print(f"  {m}")
