"""A Zarr result written unit by unit, each unit recorded in a manifest once written: what makes a
job resumable.

A *unit* is one stored chunk (format 2, or format 3 without shards) or one shard (format 3) along the
result's first dimension (``point``, ``particle``, or a lattice's first axis), every variable's slice of
it written by one task.  Once a unit's arrays are written, the task adds ``.vdbflow-manifest/units/U.json``
to the store: the unit's rows, the SHA-256 of each variable's array there (its decoded bytes, C order)
and the job summary's figures of the chunks of points assigned to it (their edge-of-data tally and
analytic errors), so that a resumed job adds them up without computing those chunks again.
``.vdbflow-manifest/job.json``, written before any unit, holds what the result depends on (the config,
the inputs' identities; their SHA-256 in ``inputs.json`` once hashed).  The manifest is removed just
before the result is published.

A resumed job reads each recorded unit back, decodes it and checks its hashes: a unit whose hashes
match is kept; any other (no record, a record whose unit is missing, truncated or changed) is written
again.  An object store needs nothing more than writing whole objects: each record is one PUT, made
after the unit's own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import dask
import numpy as np
import zarr
from dask.delayed import Delayed

from vdbflow.io.location import Target, filesystem, read_json, write_json, zarr_store
from vdbflow.jobs.chunks import ANALYTIC_KEY, SECONDS_KEY, TALLY_KEY

POINT_INDEX = "point"  # the point-index coordinate (0 .. N-1) of a job's random, file or line points

MANIFEST = ".vdbflow-manifest"
# the job summary's figures of each chunk of points, kept per chunk in the manifest: the per-chunk task-key
# prefix that finds them in the graph of the figure (vdbflow.jobs.chunks), and how the chunks add up
EXTRAS = {"tally": TALLY_KEY, "errors": ANALYTIC_KEY, "seconds": SECONDS_KEY}


def digest(block: np.ndarray) -> str:
    """SHA-256 of an array's bytes in C order (what a unit records of each variable)."""
    return hashlib.sha256(memoryview(np.ascontiguousarray(block)).cast("B")).hexdigest()


@dataclass
class Manifest:
    """The manifest of the store at ``target``: ``job.json``, ``inputs.json`` and one record a unit."""

    target: Target
    options: dict[str, Any] | None = None

    def _path(self, *parts: str) -> tuple[Any, str]:
        fs, root = filesystem(self.target, self.options)
        return fs, "/".join((root, MANIFEST, *parts))

    def job(self) -> dict[str, Any] | None:
        """``job.json``: what the result depends on (None: none yet, the store is not resumable)."""
        return read_json(*self._path("job.json"))

    def started(self) -> float:
        """When ``job.json`` was written (seconds since the epoch; 0 where the store does not say)."""
        fs, path = self._path("job.json")
        try:
            modified = fs.modified(path)
        except (OSError, NotImplementedError, ValueError):
            return 0.0
        return float(modified.timestamp())

    def write_job(self, record: dict[str, Any]) -> None:
        write_json(*self._path("job.json"), record)

    def inputs(self) -> dict[str, Any] | None:
        """The inputs' SHA-256 by name, once recorded."""
        return read_json(*self._path("inputs.json"))

    def write_inputs(self, sha256: dict[str, Any]) -> None:
        write_json(*self._path("inputs.json"), sha256)

    def records(self) -> dict[int, dict[str, Any]]:
        """Every unit's record, by unit."""
        fs, folder = self._path("units")
        try:
            names = [p for p in fs.ls(folder, detail=False) if p.endswith(".json")]
        except (OSError, ValueError):
            return {}
        found = fs.cat(names) if names else {}
        out = {}
        for path, blob in found.items():
            try:
                record = json.loads(blob)
                unit = int(record["unit"])
                if str(path).rsplit("/", 1)[-1] != f"{unit}.json":  # a record in another unit's name
                    continue
                out[unit] = record
            except (ValueError, KeyError, TypeError):
                continue  # a record cut short: its unit is written again
        return out

    def remove(self) -> None:
        """Remove the manifest (before the store is published)."""
        fs, folder = self._path()
        try:
            if fs.exists(folder):
                fs.rm(folder, recursive=True)
        except OSError:
            pass


@functools.lru_cache(maxsize=64)
def _array(target: Target, options: str, name: str) -> Any:
    return zarr.open_array(zarr_store(target, json.loads(options)), path=name, mode="r+")


def write_unit(
    unit: int,
    target: Target,
    options: str,
    names: tuple[str, ...],
    rows: tuple[int, int],
    index: bool,
    extras: dict[str, dict[int, Any]],
    *blocks: np.ndarray,
) -> dict[str, Any]:
    """One unit written on a worker: each variable's block at ``rows`` of the first dimension (and the
    point index there, where ``index``), then its record added to the manifest; returns the record."""

    start, stop = rows
    hashes = {}
    for name, block in zip(names, blocks, strict=True):
        block = np.asarray(block)
        _array(target, options, name)[start:stop] = block
        hashes[name] = digest(block)
    if index:
        values = np.arange(start, stop, dtype=np.int64)
        _array(target, options, POINT_INDEX)[start:stop] = values
        hashes[POINT_INDEX] = digest(values)
    record = {
        "unit": unit,
        "rows": [start, stop],
        "sha256": hashes,
        "extras": {k: {str(c): np.asarray(v).tolist() for c, v in parts.items()} for k, parts in extras.items()},
    }
    fs, root = filesystem(target, json.loads(options))
    write_json(fs, f"{root}/{MANIFEST}/units/{unit}.json", record)
    return record


def verified(target: Target, options: dict[str, Any] | None, records: dict[int, dict[str, Any]]) -> set[int]:
    """The units whose every recorded array reads back (decoded) with its recorded SHA-256."""
    with warnings.catch_warnings():  # the manifest is not a Zarr node
        warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
        group = zarr.open_group(zarr_store(target, options), mode="r")
    good = set()
    for unit, record in records.items():
        try:
            start, stop = (int(r) for r in record["rows"])
            arrays = {name: group[name] for name in record["sha256"]}
            ok = all(digest(np.asarray(arrays[n][start:stop])) == sha for n, sha in record["sha256"].items())  # type: ignore[index]
        except Exception:  # noqa: BLE001 - a unit that cannot be read back is written again, whatever failed
            ok = False
        if ok:
            good.add(unit)
    return good


def per_chunk(figure: Any, prefix: str, chunks: int) -> list[Any] | None:
    """The per-chunk parts of a job summary's lazy ``figure`` (tasks named ``PREFIX-TOKEN-B`` for the
    chunks B = 0 .. chunks - 1 of points), or None where it has no such parts."""
    if figure is None:
        return None
    graph = figure.__dask_graph__()
    pattern = re.compile(rf"{re.escape(prefix)}-[0-9a-f]+-(\d+)")
    found = {int(m.group(1)): key for key in graph if isinstance(key, str) and (m := pattern.fullmatch(key))}
    if sorted(found) != list(range(chunks)):
        return None
    return [Delayed(found[b], graph) for b in range(chunks)]


def _rows_sum(rows: list) -> np.ndarray:
    return np.sum(np.concatenate([np.asarray(r).reshape(1, -1) for r in rows]), axis=0)


def _rows(rows: list) -> np.ndarray:
    return np.concatenate([np.asarray(r, dtype=np.float64).reshape(1, -1) for r in rows])


def _times(rows: list) -> np.ndarray:
    if not rows:
        return np.zeros(3)
    return np.sum(np.stack([np.asarray(r, dtype=np.float64) for r in rows]), axis=0)


_COMBINE = {"tally": _rows_sum, "errors": _rows, "seconds": _times}


@dataclass
class UnitPlan:
    """The units of one job's result: which are written already (``done``, their records), the per-chunk
    parts of the summary's figures, and the chunks of points (their starts) these belong to."""

    target: Target
    options: dict[str, Any] | None
    chunk_starts: np.ndarray  # (chunks + 1,) the points' chunk boundaries
    parts: dict[str, list[Any]] = field(default_factory=dict)  # figure -> per-chunk lazy parts
    done: dict[int, dict[str, Any]] = field(default_factory=dict)  # unit -> its verified record
    owner: np.ndarray | None = None  # (chunks,) the unit that records each chunk's figures
    resumed: bool = False  # the store is a partial result resumed (its metadata is checked, not written)
    units: int = 0  # units of the result
    written: int = 0  # units this run writes
    unit_points: np.ndarray | None = None  # (units + 1,) the units' boundaries in points

    def assign(self, unit_points: np.ndarray) -> None:
        """Each chunk of points recorded by the unit that holds its last point (``unit_points``: (units + 1,)
        boundaries of the units in points)."""
        self.unit_points = np.asarray(unit_points)
        last = np.maximum(self.chunk_starts[1:] - 1, self.chunk_starts[:-1])
        self.owner = np.searchsorted(unit_points, last, side="right") - 1

    def points_sampled(self) -> int:
        """Points this run samples: those of every chunk of points that a unit written now overlaps (the
        chunks only kept units need are culled); all points when nothing is kept."""
        total = int(self.chunk_starts[-1])
        if self.unit_points is None or not self.done:
            return total
        lo, hi = self.chunk_starts[:-1], self.chunk_starts[1:]
        needed = np.zeros(len(lo), dtype=bool)
        for unit in range(len(self.unit_points) - 1):
            if unit not in self.done:
                needed |= (lo < self.unit_points[unit + 1]) & (hi > self.unit_points[unit])
        return int(np.sum((hi - lo)[needed]))

    def keep_complete(self, unit_rows: np.ndarray, names: tuple[str, ...]) -> list[int]:
        """Drop from ``done`` every record that does not cover its unit: its rows (``unit_rows``: the units'
        boundaries in rows), a SHA-256 for each array ``names`` the job writes, and the figures of each chunk
        the unit records; returns the units dropped (written again).  A record listing no arrays verifies
        vacuously: kept, its unit would be published as the fill value."""
        assert self.owner is not None
        dropped = []
        for unit, record in list(self.done.items()):
            if not self._covers(unit, record, unit_rows, names):
                del self.done[unit]
                dropped.append(unit)
        return sorted(dropped)

    def _covers(self, unit: int, record: Any, unit_rows: np.ndarray, names: tuple[str, ...]) -> bool:
        if not isinstance(record, dict) or not 0 <= unit < len(unit_rows) - 1:
            return False
        if record.get("rows") != [int(unit_rows[unit]), int(unit_rows[unit + 1])]:
            return False
        hashes = record.get("sha256")
        if not isinstance(hashes, dict) or set(hashes) != set(names):
            return False
        extras = record.get("extras")
        mine = [str(c) for c in np.flatnonzero(self.owner == unit)]
        return isinstance(extras, dict) and all(
            isinstance(extras.get(name), dict) and all(c in extras[name] for c in mine) for name in self.parts
        )

    def extras_of(self, unit: int) -> dict[str, dict[int, Any]]:
        """The figures' parts of the chunks unit ``unit`` records."""
        assert self.owner is not None
        mine = np.flatnonzero(self.owner == unit)
        return {name: {int(c): parts[c] for c in mine} for name, parts in self.parts.items()}

    def figure(self, name: str) -> Any:
        """The lazy whole of figure ``name``: recorded chunks from the manifest, the others computed (a
        resumed job's seconds count only the chunks computed now)."""
        assert self.owner is not None
        rows = []
        for c, unit in enumerate(self.owner):
            record = self.done.get(int(unit))
            if record is None:
                rows.append(self.parts[name][c])
            elif name != "seconds":
                rows.append(np.asarray(record["extras"][name][str(c)]))
        return dask.delayed(_COMBINE[name], pure=True)(rows)
