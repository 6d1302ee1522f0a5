"""Fault-campaign kinds for the readers of issue 49 (round five), registered in scripts/fault_campaign.py:

- ``urlfaults``: inputs read through a fault-injecting fsspec store (``faulty://``, an in-memory store
  whose ``info`` misreports sizes (2^50, 2^63, negative, text, off by some bytes) or gives no version,
  whose reads fail (OSError, ConnectionError, TimeoutError) or come back short at a random request, or
  whose object is replaced (a new version) at a random request), read as a .nvdb volume (whole, by box,
  by leaves), a volume store (clean, or naming a ``pickle`` codec in a random place, consolidated or
  not), remote .npy points with hostile shapes, and the xarray backend over the URL: the values of the
  local file, bit for bit (``same``; ``warned`` when the store gives no version), or a vdbflow error;
  never a pickle payload run, never another object's values;
- ``strided``: strided, reversed and integer selections of the xarray backend over random grids (per-leaf
  .nvdb, vec3, index-layout stores, tiles) against NumPy's slice of the dense reference, and hostile
  ``dim_order`` / ``drop_variables`` / ``leaf_chunks`` values (``refused`` with a vdbflow error).
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np

FAULTS: dict[str, Any] = {}  # the current case's faults (each case runs in its own process)


class Wrong(Exception):
    """The oracle found a wrong result (fault_campaign's Wrong is raised in its place by the caller)."""


def _faulty_fs() -> Any:
    """The ``faulty://`` filesystem class (registered once per process)."""
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    class FaultyFileSystem(MemoryFileSystem):
        """An in-memory store that misreports, fails or replaces objects as :data:`FAULTS` says."""

        protocol = ("faulty",)
        store: dict[str, Any] = {}  # noqa: RUF012 - fsspec's own class-level store
        pseudo_dirs = [""]  # noqa: RUF012
        reads = 0

        @classmethod
        def _strip_protocol(cls, path: Any) -> str:
            text = str(path)
            return MemoryFileSystem._strip_protocol(text[len("faulty://") :] if text.startswith("faulty://") else text)

        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            info = dict(super().info(path, **kwargs))
            if info.get("type") == "file" and str(info["name"]).endswith(FAULTS.get("suffix", "\0")):
                if "size" in FAULTS:
                    info["size"] = FAULTS["size"](info["size"])
                if FAULTS.get("unversioned"):
                    info.pop("created", None)
            return info

        def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> bytes:
            data = super().cat_file(path, start, end, **kwargs)
            if not str(path).endswith(FAULTS.get("suffix", "\0")):
                return data
            cls = type(self)
            cls.reads += 1
            if cls.reads == FAULTS.get("fail_at"):
                raise FAULTS["error"]("injected: the connection was reset")
            if cls.reads == FAULTS.get("short_at") and len(data) > 1:
                return data[: len(data) // 2]
            if cls.reads == FAULTS.get("replace_at"):
                self.pipe_file(path, FAULTS["replacement"])  # a new object: a new 'created' (its version)
            return data

    fsspec.register_implementation("faulty", FaultyFileSystem, clobber=True)
    return FaultyFileSystem


def _volume(rng: np.random.Generator, components: int, leaves: int = 12, span: int = 64) -> Any:
    """Random voxels in ``leaves`` leaves of a box ``span`` leaves a side."""
    import vdbflow

    origins = rng.choice(span, size=(leaves, 3)) * 8
    origins = np.unique(origins, axis=0)
    ijk = (origins[:, None, :] + rng.integers(0, 8, size=(len(origins), 40, 3))).reshape(-1, 3)
    ijk = np.unique(ijk, axis=0)
    values = rng.standard_normal((len(ijk), components)).astype(np.float32)
    return vdbflow.Volume.from_voxels(ijk, values[:, 0] if components == 1 else values)


def _same(a: Any, b: Any) -> bool:
    return (
        np.array_equal(a.active_voxels(), b.active_voxels())
        and np.array_equal(np.asarray(a.active_values()), np.asarray(b.active_values()))
        and np.array_equal(np.asarray(a.background_values), np.asarray(b.background_values))
    )


def _choose_faults(rng: np.random.Generator, suffix: str, size: int, replacement: bytes) -> str:
    """Set :data:`FAULTS` for this case; returns its description."""
    FAULTS.clear()
    FAULTS["suffix"] = suffix
    kind = str(rng.choice(["none", "size", "unversioned", "fail", "short", "replace"]))
    if kind == "size":
        reported = rng.choice(
            [2**50, 2**63, 2**70, -5, -(2**63), "abc", "1e3", 1.5, float("nan"), size + 4096, size - 100, 0]
        )
        FAULTS["size"] = lambda _real, r=reported: r
        return f"size reported as {reported!r}"
    if kind == "unversioned":
        FAULTS["unversioned"] = True
        return "no version"
    if kind in ("fail", "short", "replace"):
        at = int(rng.integers(1, 5))
        FAULTS[f"{kind}_at"] = at
        FAULTS["error"] = [OSError, ConnectionError, TimeoutError][int(rng.integers(0, 3))]
        FAULTS["replacement"] = replacement
        return f"{kind} at read {at}"
    return "no fault"


def _outcome(got_same: bool, caught: list[Any], what: str) -> tuple[str, str]:
    from vdbflow.io.location import UnversionedWarning

    if not got_same:
        raise Wrong(f"{what}: read other values than the local file's, without an error")
    if any(issubclass(w.category, UnversionedWarning) for w in caught):
        return "warned", what
    if FAULTS.get("unversioned"):
        raise Wrong(f"{what}: a store that gives no version was read without an UnversionedWarning")
    return "same", what


def case_urlfaults(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """One input read through the ``faulty://`` store (module docstring)."""
    target = str(rng.choice(["nvdb", "nvdb", "store", "points", "backend"]))
    fs = _faulty_fs()(skip_instance_cache=True)
    try:
        return {"nvdb": _nvdb, "store": _store, "points": _points, "backend": _backend}[target](rng, work, fs)
    except Wrong:
        raise
    except Exception as err:
        from vdbflow.errors import VdbflowError

        if isinstance(err, VdbflowError):
            return "refused", f"{target} {FAULTS_DESCRIPTION[0]}: {type(err).__name__}: {str(err)[:160]}"
        raise


FAULTS_DESCRIPTION = [""]


def _nvdb(rng: np.random.Generator, work: Path, fs: Any) -> tuple[str, str]:
    import vdbflow

    vol = _volume(rng, int(rng.choice([1, 3])))
    vol.to_nvdb(work / "v.nvdb")
    other = vdbflow.Volume.from_voxels(vol.active_voxels(), np.asarray(vol.active_values()) + 1)
    other.to_nvdb(work / "w.nvdb")  # the same size: only its version tells it apart
    fs.pipe_file("/c/v.nvdb", (work / "v.nvdb").read_bytes())
    size = (work / "v.nvdb").stat().st_size
    what = _choose_faults(rng, "v.nvdb", size, (work / "w.nvdb").read_bytes())
    FAULTS_DESCRIPTION[0] = what
    selection: dict[str, Any] = {}
    pick = int(rng.integers(0, 3))
    if pick == 1:
        lo = rng.integers(0, 256, 3)
        selection["bbox"] = (lo.tolist(), (lo + rng.integers(0, 256, 3)).tolist())
    elif pick == 2:
        selection["leaves"] = np.unique(rng.integers(0, vol.leaf_count, 4)).tolist()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = vdbflow.open("faulty://c/v.nvdb", **selection)
    want = vdbflow.open(work / "v.nvdb", **selection)
    return _outcome(_same(got, want), caught, f"nvdb {selection or 'whole'} {what}")


def _pickled_store(rng: np.random.Generator, store: Path, marker: Path) -> str:
    """Name a pickle codec in a random array's metadata (filters, compressor, nested) and write a chunk
    that unpickles to a call creating ``marker``."""
    import json
    import os

    arrays = [p.name for p in store.iterdir() if (p / ".zarray").exists()]
    array = str(rng.choice(sorted(arrays)))
    meta = json.loads((store / array / ".zarray").read_text())
    where = str(rng.choice(["filters", "compressor", "nested", "name"]))
    codec = {"id": str(rng.choice(["pickle", "Pickle", "x-pickle"]))}
    if where == "filters":
        meta["filters"] = [codec]
    elif where == "compressor":
        meta["compressor"] = codec
    elif where == "nested":
        meta["filters"] = [{"id": "zlib", "inner": [codec]}]
    else:
        meta["compressor"] = {"name": codec["id"]}
    (store / array / ".zarray").write_text(json.dumps(meta))
    consolidated = store / ".zmetadata"
    if rng.random() < 0.5:
        whole = json.loads(consolidated.read_text())
        whole["metadata"][f"{array}/.zarray"] = meta
        consolidated.write_text(json.dumps(whole))
    else:
        consolidated.unlink()

    class Payload:
        def __reduce__(self) -> tuple:
            return (os.makedirs, (str(marker),))

    for chunk in (store / array).iterdir():
        if not chunk.name.startswith("."):
            chunk.write_bytes(pickle.dumps(np.array([Payload()], dtype=object)))
    return f"pickle in {array} {where}"


def _store(rng: np.random.Generator, work: Path, fs: Any) -> tuple[str, str]:
    import vdbflow

    vol = _volume(rng, int(rng.choice([1, 3])))
    store = work / "v.zarr"
    vol.to_zarr(store)
    marker = work / "ran"
    what = _pickled_store(rng, store, marker) if rng.random() < 0.6 else "clean store"
    FAULTS.clear()
    FAULTS_DESCRIPTION[0] = what
    fs.put(str(store), "/c/v.zarr", recursive=True)
    try:
        got = vdbflow.open("faulty://c/v.zarr")
    finally:
        if marker.exists():
            raise Wrong(f"store {what}: the store's pickle payload ran")
    if what != "clean store":
        raise Wrong(f"store {what}: opened without refusing the pickle codec")
    if not _same(got, vol):
        raise Wrong(f"store {what}: read other values than were written")
    return "same", what


def _points(rng: np.random.Generator, work: Path, fs: Any) -> tuple[str, str]:
    from vdbflow.jobs.config.model import FilePoints
    from vdbflow.jobs.points import file_point_count

    n = int(rng.integers(0, 50))
    shape = str(
        rng.choice([f"({n}, 3)", f"(-{n + 1}, 3)", f"({n}, -3)", "(-1,)", f"({2**63 - 1}, 3)", f"({n}, 3, 1)", "()"])
    )
    header = ("{'descr': '<f8', 'fortran_order': False, 'shape': " + shape + ", }").ljust(118) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(8 * 3 * n)
    fs.pipe_file("/c/p.npy", data)
    FAULTS.clear()
    FAULTS_DESCRIPTION[0] = f"shape {shape}"
    count = file_point_count(FilePoints.model_validate({"kind": "file", "path": "faulty://c/p.npy"}))
    if shape != f"({n}, 3)" or count != n:
        raise Wrong(f"points of shape {shape} ({n} rows stored) planned as {count} points")
    return "same", f"points shape {shape}"


def _backend(rng: np.random.Generator, work: Path, fs: Any) -> tuple[str, str]:
    import xarray as xr

    from vdbflow.io import grid_ref

    vol = _volume(rng, 1)
    vol.to_nvdb(work / "v.nvdb")
    fs.pipe_file("/c/b.nvdb", (work / "v.nvdb").read_bytes())
    what = _choose_faults(rng, "b.nvdb", (work / "v.nvdb").stat().st_size, (work / "v.nvdb").read_bytes()[::-1])
    FAULTS_DESCRIPTION[0] = what
    grid_ref.clear_cache()
    box = np.stack([vol.index_bbox[0], vol.index_bbox[1]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = xr.open_dataset("faulty://c/b.nvdb", engine="vdbflow", bbox=box)
        key = tuple(_random_key(rng, int(n)) for n in box[1] - box[0] + 1)
        got = ds["value"][key].values
    local = xr.open_dataset(work / "v.nvdb", engine="vdbflow", bbox=box)["value"][key].values
    return _outcome(np.array_equal(got, local), caught, f"backend {key} {what}")


def _random_key(rng: np.random.Generator, n: int) -> slice | int:
    """An int, or a slice of any step (xarray cannot take an empty reversed one)."""
    if rng.random() < 0.15:
        return int(rng.integers(0, n))
    step = int(rng.choice([1, 2, 3, 5, 8, 9, 17, 64, -1, -3, -8]))
    a, b = sorted(int(v) for v in rng.integers(-n, n + 1, 2))
    key = slice(b, a, step) if step < 0 else slice(a, b, step)
    return key if step > 0 or len(range(*key.indices(n))) else slice(None, None, step)


def _dense_reference(vol: Any, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values and mask of the box [lo, hi] from the lists the volume was made of (active voxels, tiles)."""
    C = vol.components
    shape = tuple(int(v) for v in hi - lo + 1)
    dense = np.empty((*shape, C), vol.dtype)
    dense[...] = np.asarray(vol.background_values).reshape(-1)
    mask = np.zeros(shape, bool)
    t = vol.topology
    for origin, size, value in zip(
        t.tile_origins, t.tile_sizes, np.asarray(vol.tile_values).reshape(-1, C), strict=True
    ):
        a, b = np.maximum(origin, lo), np.minimum(origin + int(size) - 1, hi)
        if np.all(a <= b):
            cut = tuple(slice(int(a[d] - lo[d]), int(b[d] - lo[d] + 1)) for d in range(3))
            dense[cut], mask[cut] = value, True
    ijk = vol.active_voxels()
    inside = np.all((ijk >= lo) & (ijk <= hi), axis=1)
    at = tuple((ijk[inside] - lo).T)
    dense[at] = np.asarray(vol.active_values()).reshape(len(ijk), C)[inside]
    mask[at] = True
    return (dense[..., 0] if C == 1 else dense), mask


def case_strided(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """Strided selections of the backend against the dense reference, or hostile backend arguments."""
    import xarray as xr

    import vdbflow
    from vdbflow.io import grid_ref

    C = int(rng.choice([1, 3]))
    vol = _volume(rng, C, leaves=int(rng.integers(1, 30)), span=16)  # a dense reference of at most 136^3
    if rng.random() < 0.3:  # a tile where no leaf is
        tile = np.array([[128, 128, 128]])
        vol = vdbflow.Volume.from_voxels(
            vol.active_voxels(), vol.active_values(), tiles=(tile, [8], [np.full(C, 2.5, np.float32)])
        )
    kind = str(rng.choice(["nvdb", "nvdb", "store"]))
    path = work / ("v.zarr" if kind == "store" else "v.nvdb")
    vol.to_zarr(path) if kind == "store" else vol.to_nvdb(path)
    grid_ref.clear_cache()
    if rng.random() < 0.15:
        bad = {
            "dim_order": [["x", "y", "z"], 5, None, "xzy", {"xyz"}, b"xyz"],
            "drop_variables": [5, [5], b"value", 1.5, {"a": 1}, [None]],
            "leaf_chunks": [0, -8, 1.5, "64", {"q": 8}, True],
        }
        arg = str(rng.choice(sorted(bad)))
        value = bad[arg][int(rng.integers(0, len(bad[arg])))]
        try:
            xr.open_dataset(path, engine="vdbflow", **{arg: value})
        except Exception as err:
            from vdbflow.errors import VdbflowError

            if isinstance(err, VdbflowError):
                return "refused", f"{arg}={value!r}: {type(err).__name__}"
            raise
        raise Wrong(f"{arg}={value!r} was accepted")
    lo = np.asarray(vol.index_bbox[0]) - rng.integers(0, 9, 3)
    hi = np.asarray(vol.index_bbox[1]) + rng.integers(0, 9, 3)
    ds = xr.open_dataset(path, engine="vdbflow", bbox=(lo, hi), leaf_chunks=int(rng.choice([8, 16, 64])))
    want, mask = _dense_reference(vol, lo, hi)
    keys = []
    for _ in range(4):
        key = tuple(_random_key(rng, int(n)) for n in hi - lo + 1)
        keys.append(key)
        if not np.array_equal(ds["value"][key].values, want[key]):
            raise Wrong(f"{kind} C={C}: values of {key} differ from the dense reference's")
        if not np.array_equal(ds["value_active"][key].values, mask[key]):
            raise Wrong(f"{kind} C={C}: the mask of {key} differs from the dense reference's")
    return "same", f"{kind} C={C} {keys[0]}"
