"""The GPU extras resolve: pip (``install --dry-run``, nothing installed) finds one set of versions for vdbflow's
needs and each GPU extra on a Python 3.12 GPU node, with the CUDA runtime wheels CuPy 14 needs on a node that
has only the driver (``cupy[ctk]``: cuda-toolkit), cuda.bindings for dask_cuda, and dask and distributed at
the versions dask-cuda pins; a requirement that conflicts with that pin makes the resolution fail.
Needs the package index (PyPI)."""

import re
import sys
from pathlib import Path

import pytest
from sampling import sample

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import gpu_wheelhouse  # noqa: E402 - scripts/ is not a package

pytestmark = pytest.mark.slow


def _versions(items: list[dict]) -> dict[str, str]:
    return {gpu_wheelhouse.canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


# one of the two extras a run, drawn by tests/sampling.py (each resolution downloads for a minute or more);
# `python scripts/gpu_wheelhouse.py FOLDER --extra EXTRA` resolves (and downloads) either one by hand
@pytest.mark.parametrize(("extra", "cuda"), sample([("gpu", "12"), ("gpu-cuda13", "13")], 1, "gpu extra"))
def test_each_gpu_extra_resolves_with_the_cuda_runtime_wheels(extra, cuda):
    got = _versions(gpu_wheelhouse.resolve(gpu_wheelhouse.requirements(extra)))
    cupy = f"cupy-cuda{cuda}x"
    assert int(got[cupy].split(".")[0]) >= 14, got[cupy]
    assert got["cuda-toolkit"].startswith(f"{cuda}.")  # [ctk]: the runtime libraries as wheels
    assert got["cuda-bindings"].startswith(f"{cuda}.")
    assert f"rmm-cu{cuda}" in got and "dask-cuda" in got
    assert got["dask"] == got["distributed"]  # dask-cuda's exact pin of both (rapids-dask-dependency)
    assert re.fullmatch(r"\d{4}\.\d+\.\d+", got["dask"])


def test_a_dask_pin_other_than_dask_cudas_is_a_conflict():
    reqs = [*gpu_wheelhouse.requirements("gpu-cuda13"), "dask==2024.12.1"]
    with pytest.raises(gpu_wheelhouse.ResolutionFailed, match="could not resolve"):
        gpu_wheelhouse.resolve(reqs)
