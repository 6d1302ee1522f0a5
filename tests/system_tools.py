"""The real OpenVDB/NanoVDB tools as test oracles: Debian's ``python3-openvdb``, ``libnanovdb-tools``
and ``libopenvdb-tools`` (installed by ``.ci/run``).

Outside CI a missing tool skips its test with the install line; under ``CI=true`` it is a failure,
so that a CI machine without them cannot pass by skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

INSTALL_LINE = "apt-get install python3-openvdb libnanovdb-tools libopenvdb-tools"
SYSTEM_PYTHON = "/usr/bin/python3"


def _missing(what: str) -> None:
    message = f"{what} is not installed ({INSTALL_LINE})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}: under CI=true the real tools are required")
    pytest.skip(message)


def require_tool(name: str) -> str:
    """The path of a command-line tool such as ``nanovdb_validate``; skips (or fails under CI) without it."""
    path = shutil.which(name)
    if path is None:
        _missing(f"the command {name!r}")
    return path


def require_pyopenvdb() -> str:
    """The system python3 that imports ``pyopenvdb``; skips (or fails under CI) without it."""
    if not os.path.exists(SYSTEM_PYTHON):
        _missing(SYSTEM_PYTHON)
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import pyopenvdb"], capture_output=True, text=True)
    if probe.returncode != 0:
        _missing(f"pyopenvdb for {SYSTEM_PYTHON}")
    return SYSTEM_PYTHON


def run_pyopenvdb(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``script`` (Python source) under the system python3 with pyopenvdb; raises on failure."""
    python = require_pyopenvdb()
    done = subprocess.run([python, "-c", script, *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"the pyopenvdb script failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done
