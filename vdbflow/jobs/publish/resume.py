"""Resumable jobs: what a partial result records of the job that writes it, and the checks that let a
later run (``vdbflow run --resume``, ``vdbflow.run(..., resume=True)``) continue it.

The partial store's manifest (:mod:`~vdbflow.jobs.publish.units`) holds the job's config (the keys the
result depends on: everything but ``cluster``, ``limits``, ``output.overwrite`` / ``storage_options`` and
the paths of the output and inputs, whose contents are compared instead), the identity of its input
files (size and modification time, then their SHA-256 once hashed, as the result's ``input_sha256``) and
the SHA-256 of a points file.  A resumed run must match them all: a changed key or input is a
:class:`~vdbflow.jobs.config.model.ConfigError` naming it.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vdbflow.io.identity import FileIdentity
from vdbflow.io.location import Target, is_url
from vdbflow.io.redact import redact_url
from vdbflow.jobs.config.model import ConfigError, FilePoints, JobConfig
from vdbflow.jobs.publish.output import leftovers_at
from vdbflow.jobs.publish.units import EXTRAS, Manifest, UnitPlan, per_chunk, verified
from vdbflow.version import __version__

log = logging.getLogger("vdbflow.run")
# keys a result does not depend on; input files are compared by their contents (SHA-256), not their paths
RESULT_NEUTRAL = (
    "cluster",
    "limits",
    "output.overwrite",
    "output.storage_options",
    "output.path",
    "volume.path",
    "points.path",
)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def config_record(cfg: JobConfig) -> dict[str, Any]:
    """The config's keys the result depends on, dotted (``points.count``)."""
    flat = _flat(cfg.model_dump(mode="json", exclude_none=True))
    return {k: v for k, v in flat.items() if not any(k == n or k.startswith(n + ".") for n in RESULT_NEUTRAL)}


def _sha256(path: Any) -> str:
    """SHA-256 of a file, or of a folder's files (a Zarr points store: names and bytes, in name order)."""
    digest = hashlib.sha256()
    files = [str(path)]
    if os.path.isdir(path):
        files = sorted(os.path.join(d, n) for d, _, names in os.walk(path) for n in names)
    for name in files:
        digest.update(os.path.relpath(name, path).encode() + b"\0")
        with open(name, "rb") as f:
            while block := f.read(1 << 24):
                digest.update(block)
    return digest.hexdigest()


def _points_file(path: Any) -> dict[str, Any]:
    """What identifies a points file: its SHA-256 (a local file or folder); a URL's size and ETag."""
    if is_url(path):
        found = FileIdentity.of(path, storage_options=getattr(path, "storage_options", None) or None)
        return {"path": redact_url(str(path)), "size": found.size, "tag": found.tag}
    return {"path": str(path), "sha256": _sha256(path)}


def job_record(cfg: JobConfig, plan: Any, units: int) -> dict[str, Any]:
    """``job.json`` of a new partial result."""
    inputs = {
        key: {"path": redact_url(str(i.path)), "size": i.size, "mtime_ns": i.mtime_ns, "tag": getattr(i, "tag", "")}
        for key, i in plan.inputs.items()
    }
    if isinstance(cfg.points, FilePoints):
        inputs["points.path"] = _points_file(cfg.points.path)
    return {"config": config_record(cfg), "inputs": inputs, "units": units, "vdbflow_version": _version()}


def _version() -> str:
    return str(__version__)


def _changed_keys(then: dict[str, Any], now: dict[str, Any]) -> list[str]:
    keys = sorted(set(then) | set(now))
    return [
        f"{k}: {then.get(k, '(unset)')!r} then, {now.get(k, '(unset)')!r} now"
        for k in keys
        if then.get(k) != now.get(k)
    ]


def check_same_job(
    cfg: JobConfig, plan: Any, manifest: Manifest, checksum: Mapping[Any, concurrent.futures.Future]
) -> None:
    """Refuse (ConfigError) to resume the partial result of ``manifest`` with another config or inputs."""
    then = manifest.job() or {}
    where = f"the partial result {manifest.target}"
    problems = _changed_keys(then.get("config", {}), config_record(cfg))
    if then.get("vdbflow_version") != _version():  # another release may write other bits: never one mixture
        written = then.get("vdbflow_version") or "a release that did not record its version"
        problems.append(f"vdbflow version: {written} then, {_version()} now")
    recorded = then.get("inputs", {})
    hashed = manifest.inputs()
    now_sha = None
    for key, seen in recorded.items():
        if key == "points.path":
            now = _points_file(cfg.points.path)  # type: ignore[union-attr]
            if any(now.get(k) != seen.get(k) for k in ("sha256", "size", "tag")):
                problems.append(f"points.path: the file {seen.get('path')} changed (its contents or ETag differ)")
            continue
        identity = plan.inputs.get(key)
        if identity is None:
            problems.append(f"{key}: {seen.get('path')} then, none now")
            continue
        if hashed:  # the SHA-256 of every input file, as the result's input_sha256 records them
            now_sha = now_sha or {str(k): f.result() for k, f in checksum.items()}
            if hashed != now_sha:  # (a URL's: etag:TAG size:N)
                problems.append(f"{key}: {identity.path} changed (its SHA-256 differs from the partial result's)")
        elif (identity.size, identity.mtime_ns, getattr(identity, "tag", "")) != (
            seen.get("size"),
            seen.get("mtime_ns"),
            seen.get("tag", ""),
        ):
            problems.append(
                f"{key}: {identity.path} changed ({seen.get('size'):,} bytes, mtime {seen.get('mtime_ns')} then; "
                f"{identity.size:,} bytes, mtime {identity.mtime_ns} now)"
            )
    if problems:
        raise ConfigError(
            f"--resume: expected the job that wrote {where}, found changes:\n"
            + "\n".join(f"  {p}" for p in problems)
            + "\n  (run without --resume to start over; it removes the partial result)"
        )


def resumable(final: Target, options: dict[str, Any] | None, store_of: Callable[[Any], Any]) -> Target | None:
    """The newest partial result at ``final`` whose writer has exited and whose manifest (in the store
    ``store_of(partial)``: the writer's :func:`manifest_target`) has its ``job.json`` (None: none)."""
    found = {}
    for item in leftovers_at(final, options):
        if item.kind not in ("partial", "tmp"):
            continue
        if not item.writer_gone:
            if item.writer_gone is None and item.pid is not None:
                log.warning(
                    "--resume: not resuming %s: it was written by %s, which cannot be checked from here (a "
                    "replaced pod?); the job starts over, and once that run is surely gone `vdbflow clean --force` "
                    "removes it (docs/jobs.md)",
                    item.path,
                    item.writer,
                )
            continue
        # a NetCDF job's partial file exists only once its chunks' store (.NAME.tmp-TAG) is complete
        head, _, name = str(item.path).rstrip("/").rpartition("/")
        partial = f"{head}/{name.replace('.tmp-', '.partial-', 1)}"
        target = partial if isinstance(item.path, str) else type(item.path)(partial)
        manifest = Manifest(store_of(target), options)
        if target not in found and manifest.job() is not None:
            found[target] = manifest.started()
    return max(found, key=lambda t: found[t]) if found else None


def record_inputs_when_hashed(manifest: Manifest, checksum: Mapping[Any, concurrent.futures.Future]) -> None:
    """Write the inputs' SHA-256 to the manifest once every hash is done (from the hashing thread)."""
    futures = list(checksum.values())
    if not futures:
        return

    def done(_: Any) -> None:
        if all(f.done() for f in futures) and not any(f.cancelled() or f.exception() for f in futures):
            try:
                manifest.write_inputs({str(k): f.result() for k, f in checksum.items()})
            except OSError as err:  # only resuming needs it
                log.debug("recording the inputs' SHA-256: %s", err)

    for f in futures:
        f.add_done_callback(done)


def unit_plan(target: Target, options: dict[str, Any] | None, sampled: Any, point_set: Any, resumed: bool) -> UnitPlan:
    """The units of a job's result: the per-chunk parts of its summary's figures and, for a resumed store,
    the units written and verified already.  A resumed job whose figures have no per-chunk parts (a
    particle job's, a partitioned job's analytic errors) is refused: its summary could not be added up."""
    starts = np.cumsum((0, *point_set.points.chunks[0]))
    plan = UnitPlan(target, options, starts, resumed=resumed)
    figures = {"tally": sampled.tally, "errors": sampled.errors, "seconds": sampled.chunk_seconds}
    chunks = len(starts) - 1
    missing = [n for n, f in figures.items() if f is not None and per_chunk(f, EXTRAS[n], chunks) is None]
    if getattr(sampled, "stopped", None) is not None:
        missing.append("particles stopped")
    if missing and resumed:
        raise ConfigError(
            f"--resume: this job's summary figures ({', '.join(missing)}) are not kept chunk by chunk, so the "
            "job cannot be resumed; run it without --resume"
        )
    if not missing:
        for name, figure in figures.items():
            if figure is not None:
                plan.parts[name] = per_chunk(figure, EXTRAS[name], chunks) or []
    if resumed:
        records = Manifest(target, options).records()
        good = verified(target, options, records)
        plan.done = {u: records[u] for u in good}
        bad = sorted(set(records) - good)
        log.warning(
            "resuming %s: %d unit(s) written and verified are kept%s",
            target,
            len(good),
            f"; {len(bad)} recorded unit(s) failed verification and are written again" if bad else "",
        )
    return plan
