"""A wheelhouse for scripts/gpu_check.py on a GPU machine without the package registries: the wheels of what
vdbflow and its GPU extra need that the machine's image lacks, for the machine's Python (not this one's).

    python scripts/gpu_wheelhouse.py WHEELHOUSE [--extra gpu-cuda13] [--python-version 3.12] [--have FILE]

The needs are resolved as pip would for that Python (``pip install --dry-run --report`` with
``--python-version``, ``--only-binary=:all:`` and manylinux x86-64 platforms), the image's packages are left out
(``--have``: a ``pip list --format=freeze`` or a list of names, one a line; default: the names of
scripts/gpu_image_packages.txt, the image the lent GPU machines run), and the rest downloaded
(``pip download --no-deps``); ``requirements.txt`` in the wheelhouse lists them pinned (gpu_check's install
step installs exactly those, offline, into a venv that sees the image's packages).  vdbflow itself is not a
wheel here: gpu_check builds it from the checkout on the machine (its compiler, CMake, scikit-build-core and
nanobind are in the image).  It fails when the wheelhouse is over ``--limit-mb`` (default 50).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parent.parent
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
PLATFORMS += ("manylinux_2_24_x86_64", "manylinux_2_34_x86_64", "manylinux1_x86_64", "any")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(extra: str) -> list[str]:
    """vdbflow's dependencies and those of ``extra`` (pyproject.toml), self-references left out."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    if extra not in extras:
        raise SystemExit(f"expected an extra among {', '.join(extras)}, got {extra!r}")
    return [r for r in (*project["dependencies"], *extras[extra]) if not r.startswith("vdbflow")]


def image_names(have: str | None) -> set[str]:
    path = Path(have) if have else REPO / "scripts" / "gpu_image_packages.txt"
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(canonical(re.split(r"[=<>!~ @\[]", line, maxsplit=1)[0]))
    return names


def pip_target_options(python_version: str) -> list[str]:
    options = ["--python-version", python_version, "--only-binary=:all:", "--implementation", "cp"]
    for p in PLATFORMS:
        options += ["--platform", p]
    return options


class ResolutionFailed(RuntimeError):
    """pip found no set of versions that satisfies the requirements (a conflict), or could not ask."""


def resolve(reqs: list[str], python_version: str = "3.12") -> list[dict]:
    """What ``pip install`` would install for ``reqs`` on a manylinux x86-64 machine with Python
    ``python_version`` (nothing installed: ``--dry-run``; ``--report``'s ``install`` items)."""
    with tempfile.TemporaryDirectory(prefix="vdbflow-resolve-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report"]
        cmd += [str(report), "--target", str(Path(tmp) / "t"), *pip_target_options(python_version), *reqs]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise ResolutionFailed(f"pip could not resolve {reqs} for Python {python_version}:\n{done.stderr[-3000:]}")
        return json.loads(report.read_text())["install"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheelhouse")
    parser.add_argument("--extra", default="gpu-cuda13")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--have", default=None, help="the image's packages (pip list --format=freeze, or names)")
    parser.add_argument("--limit-mb", type=float, default=50.0)
    args = parser.parse_args()
    house = Path(args.wheelhouse)
    house.mkdir(parents=True, exist_ok=True)
    try:
        resolved = resolve(requirements(args.extra), args.python_version)
    except ResolutionFailed as err:
        print(f"gpu_wheelhouse: {err}", file=sys.stderr)
        return 1
    have = image_names(args.have)
    pins = sorted(
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in resolved
        if canonical(item["metadata"]["name"]) not in have
    )
    left_out = sorted(item["metadata"]["name"] for item in resolved if canonical(item["metadata"]["name"]) in have)
    target = pip_target_options(args.python_version)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(house), *target, *pins]
    subprocess.run(cmd, check=True)
    (house / "requirements.txt").write_text("\n".join(pins) + "\n")
    size = sum(p.stat().st_size for p in house.glob("*.whl"))
    where = f"Python {args.python_version}; {len(left_out)} in the image"
    print(f"{len(pins)} wheels, {size / 1e6:.1f} MB in {house} ({where})")
    print("  " + " ".join(pins))
    if size > args.limit_mb * 1e6:
        print(f"gpu_wheelhouse: {size / 1e6:.1f} MB is over the {args.limit_mb:g} MB limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
