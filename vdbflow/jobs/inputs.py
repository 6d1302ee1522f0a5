"""A job's input files: what the plan saw of each (:class:`InputIdentity`, :class:`InputError` when
one changed), private snapshots of them next to the output (:func:`snapshot`), and the volumes a job
reads, built from its config (:func:`build_volumes`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from vdbflow import synthetic
from vdbflow.errors import VdbflowError, VolumeError
from vdbflow.io.grid_ref import GridRef
from vdbflow.io.identity import FileIdentity
from vdbflow.io.nanovdb import save
from vdbflow.io.volumes import open_volume
from vdbflow.jobs.config.model import JobConfig
from vdbflow.jobs.publish.output import snapshot_path, tidy

log = logging.getLogger("vdbflow.run")


class InputError(VdbflowError, RuntimeError):
    """An input file changed, vanished or could not be copied between the plan and its reading."""


class InputIdentity(FileIdentity):
    """What the plan saw of an input file; reading it later checks the file is still the same one."""

    label = "the input"
    seen = "the plan saw it"
    error = InputError


FICLONE = 0x40049409  # Linux ioctl: the destination shares the source's blocks (btrfs, XFS, bcachefs...)


def snapshot(identity: InputIdentity, final: Path, stop: threading.Event | None = None) -> tuple[Path, str | None]:
    """A private copy of an input next to the output, checked against what the plan saw: a reflink
    (no data copied) where the filesystem allows, else a copy hashed as it is made.

    Returns the copy and its sha256 (None after a reflink, which reads nothing).
    """
    target = snapshot_path(final)
    digest = None
    try:
        with open(identity.path, "rb") as src:
            identity.check("when the job started", os.fstat(src.fileno()))
            with open(target, "xb") as dst:
                try:
                    import fcntl

                    fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
                except (ImportError, OSError):  # no reflinks here (ext4, tmpfs, another filesystem): copy
                    digest = hashlib.sha256()
                    block = bytearray(1 << 24)
                    view = memoryview(block)
                    while n := src.readinto(block):
                        if stop is not None and stop.is_set():
                            raise InputError(f"the snapshot of {identity.path} was stopped: the job ended") from None
                        digest.update(view[:n])
                        dst.write(view[:n])
            identity.check("after it was copied", os.fstat(src.fileno()))
        if (copied := target.stat().st_size) != identity.size:
            raise InputError(
                f"expected a {identity.size:,}-byte copy of {identity.path}, got {copied:,} bytes: "
                "another process changed it while it was copied"
            )
    except OSError as err:
        target.unlink(missing_ok=True)
        raise InputError(
            f"cannot make a private snapshot of {identity.path} at {target}: {err} "
            "(volume.snapshot: false reads the file in place instead)"
        ) from None
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target, None if digest is None else digest.hexdigest()


def file_periods(cfg: JobConfig, grid: str) -> Any:
    """The periods ``volume.periodic`` gives grid ``grid`` of ``volume.path`` (resolved here, against the whole
    grid's box: a Periodicity, or False for none), or None where the config leaves the file's own."""
    if cfg.volume.periodic is None:
        return None

    with cfg.about("volume.periodic", VolumeError):
        opened = open_volume(cfg.volume.path, grid, periodic=cfg.volume.periodic)  # mapped: the topology is read
    return opened.periodic or False


def build_volumes(cfg: JobConfig, grids: list[str]) -> tuple[dict[str, Any], Any]:
    """Volumes by grid name (a Volume, the GridRef of the file workers read, or a series' SeriesFiles) and the
    analytic field, if any."""
    from vdbflow.jobs.particles import SeriesFiles

    series = cfg.volume.series
    if series is not None:
        times = None if series.times is None else tuple(series.times)
        files = SeriesFiles(tuple(map(os.fspath, series.files())), times, series.grid, series.cache)  # Urls kept
        return {grids[0]: files}, None
    s, periodic = cfg.volume.synthetic, cfg.volume.periodic
    if s is None:
        return {name: GridRef(os.fspath(cfg.volume.path), name, file_periods(cfg, name)) for name in grids}, None
    with cfg.about("volume.synthetic", VolumeError, ValueError):
        analytic = synthetic.make_field(s.field, **s.params)
        vol = synthetic.flow_volume(analytic, s.resolution, s.extent, np.dtype(s.dtype), *s.shell, periodic=periodic)
    if s.write is not None:
        s.write.parent.mkdir(parents=True, exist_ok=True)
        for line in tidy(s.write.absolute()):  # what a killed run's save left beside it
            log.warning("%s", line)
        save(s.write, {vol.name: vol})  # atomic: a private directory beside it, then a rename
        log.info("wrote the synthetic field to %s", s.write)
        return {vol.name: GridRef(os.fspath(s.write), vol.name)}, analytic  # the file records the periods
    return {vol.name: vol}, analytic
