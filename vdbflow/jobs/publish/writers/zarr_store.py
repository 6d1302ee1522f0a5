"""The Zarr writer of job results (:class:`ZarrStore`): Zarr format 2 (default) or 3 (``output.zarr_format``;
shards with ``output.shard``; label coordinates in the ``vdbflow_labels`` attr, :mod:`vdbflow.io.labels`) with
consolidated metadata, Blosc-compressed chunks written by the workers one unit (a chunk or a shard) a task,
the point index with them, each unit recorded in the store's manifest (:mod:`~vdbflow.jobs.publish.units`).
A local path or an fsspec URL (``output.storage_options``).  The writers of one file (:class:`StagedFile`:
NetCDF, VTKHDF) stage their chunks in such a store, then write the file from it by one task."""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import numcodecs.blosc
import numpy as np
import xarray as xr
import zarr
from numcodecs import Blosc
from zarr.codecs import BloscCodec

from vdbflow.core.atomic import remove_tree
from vdbflow.errors import OutputError
from vdbflow.io import labels
from vdbflow.io.location import Target, remove, zarr_store
from vdbflow.jobs.publish.units import POINT_INDEX, UnitPlan, write_unit
from vdbflow.jobs.publish.writers import plain_attrs, with_plain_attrs

log = logging.getLogger("vdbflow.run")


INDEX_KEY = "vdbflow-write-index"  # the tasks that write the point index


def _point_index(ds: xr.Dataset) -> tuple[dict[str, Any], tuple[int, ...]] | None:
    """The attrs of ``ds``'s point index and the point dim's chunks, where the index is 0 .. N-1 and the
    data are chunked along it (then the workers write it; else None)."""
    if POINT_INDEX not in ds.coords or ds[POINT_INDEX].dims != (POINT_INDEX,) or POINT_INDEX not in ds.chunks:
        return None
    index = ds.indexes[POINT_INDEX]
    n = len(index)
    exact = n == 0 or (index[0] == 0 and index[n - 1] == n - 1 and index.is_monotonic_increasing and index.is_unique)
    if index.dtype != np.int64 or not exact:  # strictly increasing integers from 0 to n - 1: 0 .. n - 1
        return None
    return dict(ds[POINT_INDEX].attrs), tuple(int(c) for c in ds.chunks[POINT_INDEX])


def _done(*parts: Any) -> None:
    return None


def blosc_threads(cores: int, workers_on_host: int, threads_per_worker: int) -> int:
    """Blosc threads for one worker: its share of the host's cores beyond its task threads, plus one
    (1: no spare core, Blosc encodes in the calling thread)."""
    share = max(1, cores // max(1, workers_on_host))
    return max(1, share - threads_per_worker + 1)


def use_spare_cores(workers_on_host: int, threads_per_worker: int) -> int:
    """Run on a worker (``client.run``): Blosc encodes with the worker's spare cores, from any thread (by
    default numcodecs uses Blosc's threads from the main thread only).  Returns Blosc's thread count."""
    threads = blosc_threads(os.cpu_count() or 1, workers_on_host, threads_per_worker)
    if threads > 1:
        numcodecs.blosc.use_threads = True
        numcodecs.blosc.set_nthreads(threads)
    return threads


def spare_cores_for_blosc(client: Any) -> dict[str, int]:
    """Blosc threads of each worker of ``client``'s cluster (:func:`use_spare_cores` on each)."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    per_host = Counter(w.get("host") for w in info.values())
    out = {}
    for address, w in info.items():
        done = client.run(use_spare_cores, per_host[w.get("host")], int(w.get("nthreads", 1)), workers=[address])
        out.update(done)
    return out


def _codecs(spec: ZarrStore, zarr_format: int) -> tuple:
    """The chunks' codecs: Blosc with byte shuffle (lz4 at level 5: 1.1 GB/s a core on the demo's samples,
    ratio 0.83; zstd at level 1: 0.5 GB/s, 0.73), as numcodecs' (format 2) or zarr's (format 3) codec."""
    if spec.compression == "none":
        return ()
    level = 5 if spec.compression == "lz4" else 1
    if zarr_format == 2:
        return (Blosc(cname=spec.compression, clevel=level, shuffle=Blosc.SHUFFLE),)
    return (BloscCodec(cname=spec.compression, clevel=level, shuffle="shuffle"),)


def _unit_dim(ds: xr.Dataset) -> str | None:
    """The dimension the result is written along, unit by unit: the first of its lazy coordinates' (the
    positions of its points or particles); None where none is lazy (statistics: written whole by one task)."""
    lazy = [v for v in ds.coords.values() if v.chunks is not None and v.ndim]
    return str(lazy[0].dims[0]) if lazy else None


def _layout(ds: xr.Dataset, spec: ZarrStore, dim: str, points: int) -> tuple[xr.Dataset, int, int, int]:
    """``ds`` with each lazy variable along ``dim`` in units (a chunk, or a shard, of rows; whole in its
    other dimensions), anything else lazy computed now; the rows of a chunk and of a unit, and the points
    of a row."""
    size = ds.sizes[dim]
    row = points // size if size and points % size == 0 else 1
    chunk_rows = max(1, int(ds.chunks[dim][0])) if size else 1
    shard = spec.shard
    unit_rows = chunk_rows * max(1, shard // (chunk_rows * row)) if shard else chunk_rows
    coords: dict[Any, xr.Variable] = {}
    data: dict[Any, xr.Variable] = {}
    for name, var in ds.variables.items():
        if var.chunks is None:
            continue
        if var.ndim and var.dims[0] == dim:
            var = var.chunk({dim: unit_rows, **{d: -1 for d in var.dims[1:]}})
        else:
            var = var.load()
        (coords if name in ds.coords else data)[name] = var
    return ds.assign_coords(coords).assign(data), chunk_rows, unit_rows, row


def _encoding(ds: xr.Dataset, dim: str, codecs: tuple, chunk_rows: int, unit_rows: int, sharded: bool) -> dict:
    encoding: dict[str, dict] = {}
    for name, var in ds.variables.items():
        if var.dtype.kind not in "fiub":
            continue
        encoding[str(name)] = {"compressors": codecs}
        if var.chunks is not None and var.dims[0] == dim:
            whole = tuple(var.shape[1:])
            encoding[str(name)]["chunks"] = (chunk_rows if sharded else unit_rows, *whole)
            if sharded:
                encoding[str(name)]["shards"] = (unit_rows, *whole)
    return encoding


def _lazy_write(spec: ZarrStore, ds: xr.Dataset, target: Target, plan: UnitPlan | None) -> Any:
    """:meth:`ZarrStore.lazy_write`."""
    ds = with_plain_attrs(ds)
    zarr_format = spec.zarr_format
    if zarr_format == 3:  # no string arrays: the v3 core has none (vdbflow.io.labels)
        ds = labels.to_attrs(ds)
    options = spec.storage_options
    codecs = _codecs(spec, zarr_format)
    index = _point_index(ds)
    if index is not None:  # written by the workers, unit by unit, not by this process now
        ds = ds.drop_vars(POINT_INDEX)
    dim = _unit_dim(ds)
    store = zarr_store(target, options)
    if dim is None:  # a few kilobytes (statistics): written whole
        encoding = {str(n): {"compressors": codecs} for n in ds.variables if ds[n].dtype.kind in "fiub"}
        return ds.to_zarr(
            store, mode="w-", compute=False, consolidated=False, zarr_format=zarr_format, encoding=encoding
        )
    points = int(plan.chunk_starts[-1]) if plan is not None else ds.sizes[dim]
    ds, chunk_rows, unit_rows, row = _layout(ds, spec, dim, points)
    sharded = zarr_format == 3 and spec.shard is not None
    encoding = _encoding(ds, dim, codecs, chunk_rows, unit_rows, sharded)
    resumed = plan is not None and plan.resumed
    _write_metadata(ds, store, zarr_format, encoding, index, codecs, (chunk_rows, unit_rows, sharded), resumed)
    size = ds.sizes[dim]
    bounds = np.append(np.arange(0, size, unit_rows), size) if size else np.array([0, 0])
    if plan is None:
        plan = UnitPlan(target, options, bounds * row)
    plan.assign(bounds * row)
    names = tuple(str(n) for n, v in ds.variables.items() if v.chunks is not None)
    dropped = plan.keep_complete(bounds, (*names, POINT_INDEX) if index is not None else names)
    if dropped:
        log.warning(
            "resuming %s: %d unit record(s) do not cover their unit (rows, every array, the figures of its chunks) "
            "and are written again: %s",
            target,
            len(dropped),
            ", ".join(map(str, dropped[:10])) + (" ..." if len(dropped) > 10 else ""),
        )
    blocks = {n: ds[n].data.to_delayed(optimize_graph=False).reshape(-1) for n in names}
    token = dask.base.tokenize(str(target), names, unit_rows, size)
    opts = json.dumps(options or {}, sort_keys=True)
    tasks = []
    for unit in range(len(bounds) - 1):
        if unit in plan.done:
            continue
        rows = (int(bounds[unit]), int(bounds[unit + 1]))
        tasks.append(
            dask.delayed(write_unit, pure=False)(
                unit,
                target,
                opts,
                names,
                rows,
                index is not None,
                plan.extras_of(unit),
                *(blocks[n][unit] for n in names),
                dask_key_name=f"{INDEX_KEY}-{token}-{unit}",
            )
        )
    plan.units, plan.written = len(bounds) - 1, len(tasks)
    return dask.delayed(_done, pure=False)(*tasks, dask_key_name=f"{INDEX_KEY}-done-{token}")


def _write_metadata(
    ds: xr.Dataset,
    store: Any,
    zarr_format: int,
    encoding: dict,
    index: tuple[dict[str, Any], tuple[int, ...]] | None,
    codecs: tuple,
    chunking: tuple[int, int, bool],
    resumed: bool,
) -> None:
    """The store's metadata and the variables held in memory (and the point index's array); a resumed
    store's checked instead: its arrays must be those this job writes (an OutputError names the first that
    differs)."""
    into = zarr.storage.MemoryStore() if resumed else store
    ds.to_zarr(into, mode="w-", compute=False, consolidated=False, zarr_format=zarr_format, encoding=encoding)
    if index is not None:
        attrs, _ = index
        chunk_rows, unit_rows, sharded = chunking
        n = ds.sizes[POINT_INDEX]
        zarr.open_group(into, mode="r+", zarr_format=zarr_format).create_array(  # type: ignore[arg-type]
            POINT_INDEX,
            shape=(n,),
            chunks=(max(1, chunk_rows if sharded else unit_rows),),
            shards=(max(1, unit_rows),) if sharded else None,
            dtype=np.int64,
            compressors=codecs,
            fill_value=None if zarr_format == 2 else 0,
            attributes={**attrs, "_ARRAY_DIMENSIONS": [POINT_INDEX]} if zarr_format == 2 else attrs,
            dimension_names=None if zarr_format == 2 else [POINT_INDEX],
        )
    if resumed:
        _same_arrays(into, store, zarr_format)


def _array_metadata(store: Any, zarr_format: int) -> dict[str, Any]:
    group = zarr.open_group(store, mode="r", zarr_format=zarr_format, use_consolidated=False)
    out = {}
    with warnings.catch_warnings():  # the manifest is not a Zarr node
        warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
        arrays = list(group.arrays())
    for name, array in arrays:
        meta = array.metadata.to_dict()
        meta.pop("attributes", None)
        out[name] = json.loads(json.dumps(meta, default=str))
    return out


def _same_arrays(expected_store: Any, store: Any, zarr_format: int) -> None:
    expected, found = _array_metadata(expected_store, zarr_format), _array_metadata(store, zarr_format)
    if sorted(expected) != sorted(found):
        raise OutputError(
            f"expected the partial result to resume to hold the arrays {sorted(expected)}, found {sorted(found)}"
        )
    for name, meta in expected.items():
        if meta != found[name]:
            raise OutputError(
                f"expected array {name} of the partial result to resume stored as this job stores it ({meta}), "
                f"found {found[name]}"
            )


@dataclass(frozen=True)
class ZarrStore:
    """The Zarr writer (a :class:`~vdbflow.jobs.publish.writers.Writer`) with its store's options; the defaults
    (chunks stored as they are, format 2, local) are those of a file writer's staging store."""

    format = "zarr"
    compression: str = "none"  # of the chunks: lz4, zstd or none
    zarr_format: int = 2
    storage_options: dict[str, Any] | None = None  # of a URL
    shard: int | None = None  # points a shard (Zarr 3)

    @classmethod
    def of(cls, spec: Any) -> ZarrStore:
        """The writer of the config's ``output`` section (None: the defaults)."""
        if spec is None:
            return cls()
        return cls(spec.compression, spec.resolved_zarr_format, spec.storage_options, spec.shard)

    def prepare(self, client: Any) -> None:
        """Blosc on each worker encodes with the worker's spare cores (when the chunks are compressed)."""
        if self.compression != "none":
            logging.getLogger("vdbflow.jobs").debug("Blosc threads by worker: %s", spare_cores_for_blosc(client))

    def lazy_write(self, ds: xr.Dataset, target: Target, plan: UnitPlan | None = None) -> Any:
        """A Dask Delayed that writes ``ds`` to ``target`` (a path, or a URL with ``storage_options``) from
        the workers, one task a unit (:mod:`~vdbflow.jobs.publish.units`; ``plan``: the units written already,
        and the chunks' figures each unit records).  The store's metadata is written now, unless ``plan``
        resumes a store, whose metadata is checked against what this job writes instead."""
        return _lazy_write(self, ds, target, plan)

    def add_attrs(self, target: Target, attrs: dict[str, Any]) -> None:
        """Add global attrs to a written (not yet published) store, and consolidate its metadata."""
        store = zarr_store(target, self.storage_options)
        group = zarr.open_group(store, mode="r+", use_consolidated=False)
        group.attrs.update(plain_attrs(attrs))
        with warnings.catch_warnings():  # consolidated metadata is zarr-python's extension of format 3
            warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
            warnings.filterwarnings("ignore", message=".*not recognized as a component.*")  # the manifest
            zarr.consolidate_metadata(store, zarr_format=2 if group.metadata.zarr_format == 2 else 3)

    def manifest_target(self, target: Target) -> Target:
        """The store the workers write for ``target`` (and whose manifest says what was written): itself."""
        return target

    def discard(self, target: Target) -> None:
        """Remove what a failed attempt wrote."""
        remove(target, self.storage_options)


def staging_path(target: Path) -> Path:
    """The hidden Zarr store of a file ``target``'s chunks: ``.NAME.tmp-TAG`` beside ``.NAME.partial-TAG`` (a
    leftover ``vdbflow clean`` and the next job's tidy recognise)."""
    return target.parent / target.name.replace(".partial-", ".tmp-", 1)


def open_staged(staging: str) -> xr.Dataset:
    """The complete staging store of a file's chunks, lazily."""
    with warnings.catch_warnings():  # the staging store's manifest is not a Zarr node
        warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
        return xr.open_zarr(staging, consolidated=False)


@dataclass(frozen=True)
class StagedFile:
    """A writer of one file (NetCDF, VTKHDF): the workers write the chunks to a hidden Zarr store beside the
    target (:func:`staging_path`; resumable, unit by unit), then one task writes the whole file from it, in one
    process.  A subclass gives its ``format``, ``lazy_write`` (through :meth:`staged`) and ``add_attrs``."""

    format = ""
    staging: ZarrStore = ZarrStore()

    @classmethod
    def of(cls, spec: Any) -> StagedFile:
        """The writer (a local file, its staging store's defaults whatever the config)."""
        return cls()

    def prepare(self, client: Any) -> None:
        """Nothing: the staging store's chunks are not compressed."""

    def staged(self, ds: xr.Dataset, target: Path, plan: UnitPlan | None, write_file: Callable) -> Any:
        """A Dask Delayed that writes ``ds``'s chunks to the staging store from the workers (``plan``: as
        :meth:`ZarrStore.lazy_write`'s), then ``write_file(staged, staging, target)`` in one task."""
        staging = staging_path(target)
        staged = self.staging.lazy_write(ds, staging, plan)
        name = f"vdbflow-{self.format}-{dask.base.tokenize(str(target))}"
        return dask.delayed(write_file, pure=False)(staged, str(staging), str(target), dask_key_name=name)

    def manifest_target(self, target: Path) -> Path:
        """The store the workers write for ``target`` (and whose manifest says what was written): the staging
        store of its chunks."""
        return staging_path(Path(target))

    def discard(self, target: Path) -> None:
        """Remove what a failed attempt wrote: the file, and the store of its chunks."""
        remove_tree(target)
        remove_tree(staging_path(target))
