"""What validation of a job config alone cannot check: its input files are there (:func:`missing_inputs`),
and its outputs may be written where it puts them (:func:`check_inputs`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from vdbflow.core.atomic import private_directory
from vdbflow.jobs.config.model import DERIVED, SECOND, ConfigError, FilePoints, JobConfig
from vdbflow.jobs.publish.checks import remote_output_problems
from vdbflow.jobs.publish.results import not_a_result


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot be created, or None: its nearest existing ancestor must be a writable directory."""
    parent = path.absolute().parent
    while not parent.exists():
        if parent.is_symlink():
            return f"{parent} is a dangling symbolic link (to {os.readlink(parent)})"
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"the directory {parent} is not writable"
    try:  # access() says yes to root everywhere, and to read-only mounts and /proc: make a directory there
        os.rmdir(private_directory(parent / path.name))
    except OSError as err:
        return f"the directory {parent} does not take new files ({err.strerror or err})"
    return None


def free_bytes(path: Path) -> int | None:
    """Free bytes on the filesystem that will hold ``path`` (its nearest existing ancestor)."""
    place = path.absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        return shutil.disk_usage(place).free
    except OSError:
        return None


def _output_problems(cfg: JobConfig) -> list[str]:
    """Where the result goes: a path that can be written, and replaced only if it holds an earlier result."""
    key = f"output.path{cfg.where('output.path')}"
    if cfg.output.url is not None:  # an object store (vdbflow.jobs.publish.checks)
        return remote_output_problems(cfg, key)
    out = cfg.output.local
    if out.is_symlink():
        dangling = "" if out.exists() else " (dangling)"
        return [
            f"{key}: expected a path to write the result at, found a symbolic link{dangling} to "
            f"{os.readlink(out)} at {out}; give the path it should point to instead"
        ]
    problem = _unwritable(out)
    if problem is not None:
        return [f"{key}: cannot write {out}: {problem}"]
    real, cwd = out.resolve(), Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        return [f"{key}: expected a path for the result, got {out}, the current directory or one of its parents"]
    inputs = [
        ("volume.path", cfg.volume.path),
        ("points.path", getattr(cfg.points, "path", None)),
        ("volume.synthetic.write", cfg.volume.synthetic.write if cfg.volume.synthetic else None),
    ]
    for name, path in inputs:
        if path is not None and (path.resolve() == real or real in path.resolve().parents):
            return [
                f"{key}: expected a path for the result apart from the inputs, got {out}, which is or holds "
                f"{name} ({path})"
            ]
    if not (out.exists() or out.is_symlink()):
        return []
    if cfg.output.overwrite == "never":
        return [
            f"{key}: {out} exists and output.overwrite is 'never' (set output.overwrite: always to replace "
            "an earlier result)"
        ]
    what = not_a_result(out)
    if what is not None:
        return [
            f"{key}: output.overwrite 'always' replaces only an earlier vdbflow result; {out} is {what}. "
            "Nothing was touched: choose another path, or move it away yourself"
        ]
    return []


def missing_inputs(cfg: JobConfig) -> list[str]:
    """The input files the config names that are not there, one line each."""
    missing = []
    if cfg.volume.path is not None and not cfg.volume.path.is_file():
        missing.append(
            f"volume.path{cfg.where('volume.path')}: expected an .nvdb file, found nothing at {cfg.volume.path}"
        )
    series = cfg.volume.series
    if series is not None:
        files = series.files()
        where = f"volume.series.paths{cfg.where('volume.series.paths')}"
        if not files:
            missing.append(f"{where}: expected .nvdb files, found none matching {series.paths!r}")
        missing += [f"{where}: expected an .nvdb file, found nothing at {f}" for f in files if not f.is_file()]
    if isinstance(cfg.points, FilePoints) and not cfg.points.path.exists():
        missing.append(
            f"points.path{cfg.where('points.path')}: expected a points file, found nothing at {cfg.points.path}"
        )
    return missing


def check_inputs(cfg: JobConfig, missing_ok: bool = False) -> list[str]:
    """Check what validation of the YAML alone cannot: input files exist, outputs may be written.

    Raises :class:`ConfigError` listing every problem.  With ``missing_ok`` (a dry run) input files
    that are not there are returned as warnings instead.
    """
    problems, warnings = input_problems(cfg, missing_ok)
    if problems:
        raise ConfigError("the job cannot start:\n" + "\n".join(f"  {p}" for p in problems))
    return warnings


def input_problems(cfg: JobConfig, missing_ok: bool = False) -> tuple[list[str], list[str]]:
    """:func:`check_inputs`' problems and warnings (one line each), returned instead of raised."""
    missing = missing_inputs(cfg)
    problems = [] if missing_ok else list(missing)
    problems += _output_problems(cfg)
    write = cfg.volume.synthetic.write if cfg.volume.synthetic else None
    if write is not None:
        where = f"volume.synthetic.write{cfg.where('volume.synthetic.write')}"
        if write.is_dir():
            problems.append(f"{where}: expected a path for an .nvdb file, found a directory at {write}")
        elif (problem := _unwritable(write)) is not None:
            problems.append(f"{where}: cannot write {write}: {problem}")
    if cfg.output.resolved_format == "netcdf" and str(cfg.output.path).lower().endswith(".zarr"):
        problems.append(
            f"output.format{cfg.where('output.format')}: netcdf was asked for a path ending in .zarr "
            f"({cfg.output.path})"
        )
    derived = [o for o in cfg.sampling.outputs if o in DERIVED or o in SECOND]
    if derived and cfg.sampling.mode == "closest":
        problems.append(
            f"sampling.outputs{cfg.where('sampling.outputs')}: {derived} need derivatives, which mode "
            "'closest' does not give"
        )
    return problems, missing if missing_ok else []
