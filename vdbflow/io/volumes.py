"""Volumes as xarray Datasets and Zarr stores, and multi-channel volumes split into vec3 grids.

A stored volume keeps its tree, not a dense box: dims ``leaf`` (origins and 8 words of active
bits), ``voxel`` (values of the active voxels in ``active_voxels()`` order, with their i, j, k as
coordinates), ``tile`` and ``channel``; the transform, names and units go in the attrs.
:func:`from_dataset` rebuilds the same volume (in the index layout).
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vdbflow.core import tree
from vdbflow.core.atomic import atomic_directory
from vdbflow.core.periodic import Periodicity
from vdbflow.core.transform import Transform
from vdbflow.core.units import normalize
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import OpenVDBError, StorageError, VolumeError, WriteError
from vdbflow.io import bounded_json, zarr_v2
from vdbflow.io import sparse as sparse_file
from vdbflow.io.location import ReadStats, RemoteFile, filesystem, is_url, local_path, stat_url, storage_error
from vdbflow.io.nanovdb import list_grids as list_nvdb
from vdbflow.io.nanovdb import open_grid
from vdbflow.io.nanovdb.read import named
from vdbflow.io.nanovdb.remote import list_grids_remote, open_grid_remote
from vdbflow.io.openvdb import is_openvdb, list_vdb, open_vdb
from vdbflow.io.openvdb.remote import list_vdb_remote, open_vdb_remote
from vdbflow.io.zarr_url import checked

if TYPE_CHECKING:
    import xarray as xr

FORMAT = "vdbflow-sparse-volume-1"


def to_dataset(vol: Volume) -> xr.Dataset:
    """``vol`` as a Dataset (see the module docstring); values are those of the active voxels."""
    import xarray as xr

    t = vol.topology
    ijk = vol.active_voxels()
    values = np.asarray(vol.active_values()).reshape(len(ijk), vol.components)
    channels = list(vol.component_names)
    ds = xr.Dataset(
        {
            "values": (("voxel", "channel"), values, {"long_name": f"{vol.name} at the active voxels", **_units(vol)}),
            "leaf_origins": (("leaf", "xyz"), t.leaf_origins),
            "masks": (("leaf", "word"), t.masks),
            "tile_origins": (("tile", "xyz"), t.tile_origins),
            "tile_sizes": (("tile",), t.tile_sizes),
            "tile_active": (
                ("tile",),
                t.tile_active.astype(np.uint8),
                {"long_name": "1: the tile's voxels are active"},
            ),
            "tile_values": (("tile", "channel"), np.asarray(vol.tile_values).reshape(t.tile_count, vol.components)),
            "background": (("channel",), np.asarray(vol.background_values).reshape(-1)),
        },
        coords={
            **{
                c: ("voxel", ijk[:, a], {"long_name": f"{c} index of the voxel", "units": "voxel"})
                for a, c in enumerate("ijk")
            },
            # variable-length strings: a type Zarr v3 specifies, unlike fixed-width unicode
            "channel": np.array(channels, dtype=object),
            "xyz": np.array(["x", "y", "z"], dtype=object),
        },
        # index_to_world: the 4x4 matrix as 16 numbers, row by row - as in sampled results
        attrs={
            "format": FORMAT,
            "name": vol.name,
            "index_to_world": np.asarray(vol.index_to_world, np.float64).ravel(),
            "value_type": vol.value_type.name,
            **{f"volume_{k}": v for k, v in _units(vol).items()},
        },
    )
    if vol.length_units:
        ds.attrs["length_units"] = vol.length_units
    if vol.periodic is not None:  # JSON text, as a provenance attr: {"axes", "lo", "size"}
        ds.attrs["periodic"] = json.dumps(vol.periodic.to_json())
    return ds


def _units(vol: Volume) -> dict[str, str]:
    units = normalize(getattr(vol, "units", None))
    return {"units": units} if units else {}


def _index_to_world(attrs: Any) -> np.ndarray:
    """The 4x4 matrix of a store's ``index_to_world`` attr: 16 numbers, or JSON text of the matrix (what
    earlier vdbflow versions wrote)."""
    raw = attrs.get("index_to_world")
    try:
        if isinstance(raw, (str, bytes)):
            raw = bounded_json.loads(raw)
        matrix = np.asarray(raw, np.float64)
    except (ValueError, TypeError, OverflowError) as err:
        raise VolumeError(f"expected an index_to_world attr holding a 4x4 matrix, got {raw!r:.80} ({err})") from None
    if matrix.shape not in ((16,), (4, 4)):
        raise VolumeError(f"expected an index_to_world attr holding a 4x4 matrix, got shape {matrix.shape}")
    return matrix.reshape(4, 4)


_VARIABLES = ("values", "leaf_origins", "masks", "tile_origins", "tile_sizes", "tile_values", "background", "channel")


def _check_declared(attrs: Any, shapes: dict[str, tuple[int, ...]]) -> None:
    """A stored volume's attrs and its arrays' shapes agree with one another (nothing is read)."""
    if not isinstance(attrs, dict) or attrs.get("format") != FORMAT:
        found = attrs.get("format") if isinstance(attrs, dict) else f"attrs of type {type(attrs).__name__}"
        raise VolumeError(f"expected a Dataset written by vdbflow (attrs format={FORMAT!r}), got format={found!r}")
    missing = [v for v in _VARIABLES if v not in shapes]
    if missing:
        raise VolumeError(f"expected variables {list(_VARIABLES)} in a stored volume, missing {missing}")
    if len(shapes["values"]) != 2 or shapes["values"][1] < 1:
        raise VolumeError(f"expected values of shape (voxels, channels), got {shapes['values']}")
    (n, c), leaves, tiles = shapes["values"], shapes["masks"][:1], shapes["tile_origins"][:1]
    expected = {
        "leaf_origins": (*leaves, 3),
        "masks": (*leaves, 8),
        "tile_sizes": tiles,
        **({"tile_active": tiles} if "tile_active" in shapes else {}),  # optional: stores before it were all active
        "tile_values": (*tiles, c),
        "tile_origins": (*tiles, 3),
        "background": (c,),
        "channel": (c,),
        **{axis: (n,) for axis in "ijk" if axis in shapes},
    }
    wrong = {name: shapes[name] for name, shape in expected.items() if tuple(shapes[name]) != shape}
    if wrong:
        raise VolumeError(
            f"expected arrays of shapes {expected} for values of shape {shapes['values']}, "
            f"{shapes['masks']} masks and {shapes['tile_origins']} tile origins, got {wrong}"
        )
    if n > tree.LEAF_VOXELS * (leaves or (0,))[0]:
        raise VolumeError(f"expected at most {tree.LEAF_VOXELS} value rows per leaf, got {n} for {leaves} leaves")


def _text_attr(attrs: dict, key: str) -> str | None:
    value = attrs.get(key)
    if value is not None and not isinstance(value, str):
        raise VolumeError(f"expected the {key} attr to be a string, got {type(value).__name__} {value!r:.80}")
    return value


def _volume(attrs: dict, shapes: dict[str, tuple[int, ...]], read: Callable[[str], np.ndarray]) -> Volume:
    """The stored volume whose attrs and arrays (by name, ``read`` on demand) these are; the masks are
    read (and must set one bit per value row) before the values."""
    _check_declared(attrs, shapes)
    matrix = _index_to_world(attrs)
    rows = shapes["values"][0]
    masks = read("masks")
    if masks.dtype.kind not in "ui":
        raise VolumeError(f"expected integer leaf masks, got dtype {masks.dtype}")
    active = int(np.bitwise_count(masks.astype(np.uint64)).sum())
    if active != rows:
        raise VolumeError(f"expected one value row per active voxel ({active}, set in the masks), got {rows}")
    active = read("tile_active").astype(bool) if "tile_active" in shapes else None
    topology = Topology(
        read("leaf_origins"),
        masks.astype(np.uint64),
        Transform(matrix),
        read("tile_origins"),
        read("tile_sizes"),
        tile_active=active,
    )
    values = read("values")
    squeeze = (lambda a: a[..., 0]) if values.shape[1] == 1 else (lambda a: a)
    vol = topology.with_data(
        squeeze(values),
        squeeze(read("background")),
        squeeze(read("tile_values")),
        name=str(attrs.get("name", "value")),
        component_names=[str(c) for c in read("channel")],
    )
    vol.units, vol.length_units = _text_attr(attrs, "volume_units"), _text_attr(attrs, "length_units")
    periodic = _text_attr(attrs, "periodic")
    if periodic is not None:
        try:
            vol = vol.with_periodic(Periodicity.from_json(bounded_json.loads(periodic)))
        except ValueError as err:  # VolumeError is one
            raise VolumeError(f"expected the periodic attr as JSON {{'lo': [...], 'size': [...]}}, got {err}") from None
    return vol


def from_dataset(ds: xr.Dataset) -> Volume:
    """The volume a :func:`to_dataset` Dataset (or a Zarr store of one) holds, in the index layout."""
    shapes = {str(name): tuple(ds[name].shape) for name in ds.variables}
    return _volume(dict(ds.attrs), shapes, lambda name: np.asarray(ds[name].values))


def to_zarr(vol: Volume, path: str | os.PathLike, *, overwrite: bool = False, chunk: int = 1 << 20) -> None:
    """Write ``vol`` to a Zarr store (format 2), ``chunk`` voxels per chunk, every chunk written.

    The store is written by :func:`~vdbflow.core.atomic.atomic_directory`: in a private directory beside
    ``path``, renamed into place once complete, so a failed write (a full disk: a
    :class:`~vdbflow.errors.WriteError`) leaves nothing at ``path``, and ``overwrite=True`` replaces
    an earlier Zarr store there only then.  Raises :class:`~vdbflow.errors.WriteError` when ``path``
    exists and ``overwrite`` is False, or when it is something other than a Zarr store (a file, a
    link, a directory of other files)."""
    target = Path(path)
    _check_text(vol)
    _check_replaceable(target, overwrite)
    ds = to_dataset(vol)  # imports xarray
    ds = ds.chunk({"voxel": chunk, "leaf": chunk, "tile": chunk})
    target.parent.mkdir(parents=True, exist_ok=True)
    # what is at the path is checked again once it is out (a directory that appeared during the write)
    with atomic_directory(target, replace=overwrite, replaceable=_not_replaceable) as new:
        ds.to_zarr(new, mode="w-", zarr_format=2, consolidated=True, write_empty_chunks=True)


def _check_text(vol: Volume) -> None:
    """The volume's name, units and component names as text a store can hold (a :class:`VolumeError`)."""
    texts = {"name": vol.name, "units": vol.units, "length_units": vol.length_units}
    texts.update({f"component name {n}": c for n, c in enumerate(vol.component_names)})
    for key, value in texts.items():
        problem = None if value is None else bounded_json.not_text(value)
        if problem is not None:
            raise VolumeError(f"expected the volume's {key} as text a store can hold, got {problem}")


def _check_replaceable(target: Path, overwrite: bool) -> None:
    """Nothing at ``target``, or (with ``overwrite``) a Zarr store or an empty directory to replace."""
    if not os.path.lexists(target):
        return
    found = _not_replaceable(target) if overwrite else "a file or directory (overwrite=True replaces a Zarr store)"
    if found is not None:
        raise WriteError(errno.EEXIST, f"expected no file at {target} or a store to replace, found {found}")


def _not_replaceable(path: Path) -> str | None:
    """None when ``path`` is a Zarr store or an empty directory (what ``overwrite=True`` may replace);
    else what it is."""
    if path.is_symlink() or not path.is_dir():
        return "a file or link, not a Zarr store"
    entries = {e.name for e in os.scandir(path)}
    if not entries or entries & {".zgroup", ".zattrs", "zarr.json"}:
        return None
    return "a directory of other files, not a Zarr store"


def open_zarr(path: str | os.PathLike) -> Volume:
    """Read a volume that :func:`to_zarr` (or ``Volume.to_zarr``) wrote.

    The store keeps the tree, not a dense box (module docstring); it is read whole, by
    :mod:`~vdbflow.io.zarr_v2`, after its attrs, the arrays' shapes and every chunk file are checked.

    Parameters
    ----------
    path : str or os.PathLike
        The Zarr store (a directory).

    Returns
    -------
    Volume
        The stored volume in the index layout: values of the active voxels, tiles, background,
        the index-to-world transform, name, component names, ``units`` and ``length_units``.

    Raises
    ------
    VolumeError
        A path that cannot be opened as a Zarr store, a format 3 store, or a store that is not a
        vdbflow volume (other ``format`` attr, missing variables, a bad ``index_to_world``, array
        shapes that disagree, a value count that does not match the active voxels); a missing,
        oversized or corrupt chunk, or one that is not a regular file (a link, FIFO or device).

    See Also
    --------
    vdbflow.open : opens .nvdb files and Zarr stores alike.
    """
    root = Path(path)
    if not root.is_dir():
        raise VolumeError(
            f"expected a Zarr store (a directory) at {root}, found {'a file' if root.exists() else 'nothing'}"
        )
    if (root / "zarr.json").exists() and not (root / ".zgroup").exists():
        raise VolumeError(
            f"expected a Zarr format 2 store (what Volume.to_zarr writes) at {root}, found a format 3 store "
            "(zarr.json): vdbflow reads volumes from format 2 stores only"
        )
    opened = os.stat(root)
    attrs = zarr_v2.read_json(root / ".zattrs", "the store's attrs (.zattrs)")
    optional = ("i", "j", "k", "tile_active")  # tile_active: since 2026-12 (before it every tile was active)
    names = [*_VARIABLES, *(name for name in optional if (root / name / ".zarray").exists())]
    arrays = {name: zarr_v2.Array.open(root / name) for name in names if (root / name).exists()}
    _check_declared(attrs, {name: a.shape for name, a in arrays.items()})
    for a in arrays.values():
        a.check_stored()  # every chunk there, before anything is read
    vol = _volume(attrs, {name: a.shape for name, a in arrays.items()}, lambda name: arrays[name].read())
    now = os.stat(root)
    if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):  # files are read by path: one store whole
        raise VolumeError(
            f"expected the store at {root} to stay the same directory while it was read (inode {opened.st_ino}), "
            f"found another (inode {now.st_ino}): it was replaced meanwhile, and what was read may mix the two; "
            "open it again"
        )
    return vol


def _zarr_kind(path: Path) -> str | None:
    """What the Zarr store at ``path`` holds when it is not a stored volume (None when it is one)."""
    attrs: Any = {}
    for meta in (".zattrs", "zarr.json"):
        if not os.path.lexists(path / meta):
            continue
        try:
            loaded = zarr_v2.read_json(path / meta, "Zarr metadata")
        except VolumeError as err:
            return f"a Zarr store whose {meta} cannot be read: {err}"
        attrs = loaded.get("attributes", {}) if meta == "zarr.json" and isinstance(loaded, dict) else loaded
        break
    else:
        if not (path / ".zgroup").is_file():
            return f"a directory without Zarr metadata (no .zattrs, .zgroup or zarr.json in {path})"
    if not isinstance(attrs, dict):
        return f"a Zarr store whose attrs are a JSON {type(attrs).__name__}, not an object"
    if attrs.get("format") == FORMAT:
        return None
    if attrs.get("title") == "vdbflow run result":
        return (
            "a vdbflow run result (values sampled at points), not a volume: read it with "
            f"xarray.open_zarr({str(path)!r})"
        )
    return f"a Zarr store without the attrs of a stored volume (format={attrs.get('format')!r}, expected {FORMAT!r})"


def open_volume(
    data: str | os.PathLike | bytes | np.ndarray,
    grid: int | str | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Volume | Topology:
    """Open a volume: ``vdbflow.open``, a grid of a .nvdb or OpenVDB .vdb file or buffer, or a Zarr store.

    A .nvdb file is memory-mapped: for an uncompressed one, the values stay in the mapped file and
    are read from disk when touched.  An OpenVDB .vdb file (recognised by its magic number, whatever
    its suffix) is read by :mod:`vdbflow.io.openvdb` into a per-leaf layout volume (bool and mask
    grids: a Topology); see docs/openvdb.md.  A Zarr store written by :func:`to_zarr` (a ``.zarr`` path or any
    directory) is read whole.

    Parameters
    ----------
    data : str, os.PathLike, bytes or numpy.ndarray
        A .nvdb or OpenVDB .vdb file path, a Zarr store path, or the bytes of a .nvdb file, grid
        buffer or .vdb file.
        Or a URL fsspec opens (``s3://``, ``gs://``, ``https://``, ``memory://``): a .nvdb file is
        read by byte ranges (headers and tree first, then only the leaves asked for), a .vdb file
        and a Zarr store whole; ``read_stats`` on the result says how many bytes were read
        (docs/storage.md).
    grid : int or str, optional
        Which grid of a .nvdb or .vdb file (index or name; default the first; for .vdb files also
        the unique name OpenVDB gives a repeated name, ``"density\\x1e1"``).  For a Zarr store only
        None, 0 or the name of its one volume.
    storage_options : dict, optional
        For a URL: fsspec's options (credentials, ``endpoint_url``, ``anon``, ...), as xarray and
        zarr take them.  Refused for a local path.
    **kwargs
        ``periodic``: periodic axes (True, ``"xz"``, 3 bools or periods in voxels; False: none; None: as
        the file records), over the periods the file records (:meth:`vdbflow.Volume.with_periodic`).
        For .nvdb data, passed to :func:`vdbflow.io.nanovdb.open_grid`: ``bbox`` (inclusive index
        coordinates ``((i0, j0, k0), (i1, j1, k1))``) or ``leaves`` (leaf indices in tree order) to
        load part of the grid, and ``checksum`` (True, the default: a checksum that matches no rule of
        the grid's NanoVDB version is a :class:`~vdbflow.ChecksumWarning`; ``"strict"``: an error;
        ``"head"``: the head half only, which reads no values; False: not checked).  For .vdb data,
        ``bbox`` and ``leaves`` alike (only those leaves'
        buffers are decompressed; see docs/openvdb.md); ``checksum`` is ignored.

    Returns
    -------
    Volume or Topology
        A :class:`~vdbflow.Volume` for value grids and Zarr stores (index layout; per-leaf layout for
        .vdb grids), a :class:`~vdbflow.Topology` for .vdb bool and mask grids, an index-layout
        :class:`~vdbflow.Topology` for NanoVDB Index / OnIndex grids (attach values with
        ``with_data``).  Units, length units and component names come back when the file or
        store records them.

    Raises
    ------
    NanoVDBError
        A malformed, truncated or unsupported .nvdb file, a ``grid`` it lacks, a ``bbox`` of
        another shape, or (with ``checksum="strict"``) a checksum that does not match.
    OpenVDBError
        A malformed, truncated or unsupported OpenVDB .vdb file (naming the byte offset), a
        ``grid`` it lacks, a ``bbox`` of another shape, or another keyword argument.
    VolumeError
        A directory that is not a stored volume (saying what it is), a missing ``.zarr`` path, or
        ``bbox``/``leaves``/``checksum`` or another ``grid`` given for a Zarr store.
    StorageError
        A local path where nothing is, or a URL that cannot be read (no such object or bucket, no
        permission, an unknown protocol), named in the message; ``storage_options`` with a local path.

    See Also
    --------
    vdbflow.list_grids : the grids of a file, from the headers.
    vdbflow.save : write .nvdb files.
    vdbflow.open_zarr : read a Zarr store.
    """
    if "periodic" in kwargs:  # the periods asked for, over what the file records (None: those)
        periodic = kwargs.pop("periodic")
        opened = open_volume(data, grid, storage_options=storage_options, **kwargs)
        return opened if periodic is None else opened.with_periodic(periodic)
    if is_url(data):
        return open_url(os.fspath(data), grid, storage_options, kwargs)
    if storage_options:
        raise StorageError(f"expected a URL with storage_options, got {type(data).__name__} {str(data)[:80]!r}")
    if isinstance(data, (str, os.PathLike)):
        data = local_path(data)
        path = Path(data)
        if path.is_dir() or (path.suffix.lower() == ".zarr" and not path.is_file()):
            if not path.exists():
                raise VolumeError(f"expected a Zarr store of a volume, found nothing at {path}")
            what = _zarr_kind(path)
            if what is not None:
                raise VolumeError(
                    f"expected a volume store written by vdbflow (Volume.to_zarr) at {path}, found {what}"
                )
            if kwargs:
                raise VolumeError(f"{sorted(kwargs)} apply to .nvdb files; a Zarr store is read whole")
            vol = open_zarr(path)
            if grid not in (None, 0, vol.name):
                raise VolumeError(f"expected grid None, 0 or {vol.name!r} (the one volume of {path}), got {grid!r}")
            return vol
        if not path.exists():
            raise StorageError(f"expected a .nvdb or .vdb file (or a Zarr store) at {path}, found nothing there")
    if is_openvdb(data):
        return _open_openvdb(data, grid, kwargs)
    return open_grid(data, grid, **kwargs)


def open_url(url: str, grid: int | str | None, storage_options: dict[str, Any] | None, kwargs: dict) -> Any:
    """A volume at a URL (:func:`open_volume`): a Zarr store (a ``.zarr`` URL or a prefix) through xarray,
    a .vdb file read whole, a .nvdb file by byte ranges; ``read_stats`` set on files' volumes."""
    fs, path = filesystem(url, storage_options)
    if url.rstrip("/").lower().endswith(".zarr") or stat_url(fs, path, url).get("type") == "directory":
        return _open_zarr_url(url, fs, path, grid, kwargs)
    remote = RemoteFile.open(url, storage_options)
    sparse, head = _head(remote)
    if is_openvdb(head):  # the header, descriptors and the grid asked for
        unknown = sorted(set(kwargs) - {"bbox", "leaves", "checksum"})
        if unknown:
            raise OpenVDBError(f"expected only bbox=, leaves= or checksum= for an OpenVDB file, got {unknown}")
        box, leaves = kwargs.get("bbox"), kwargs.get("leaves")
        return _named_vdb(url, lambda: open_vdb_remote(remote, grid, leaves, box, sparse))
    unknown = sorted(set(kwargs) - {"bbox", "leaves", "checksum"})
    if unknown:
        raise TypeError(f"open() got unexpected keyword arguments {unknown} for the .nvdb file {url}")
    bbox, leaves, checksum = kwargs.get("bbox"), kwargs.get("leaves"), kwargs.get("checksum", True)
    return named(url, lambda: open_grid_remote(remote, grid, bbox, leaves, checksum, sparse))


def _named_vdb(url: str, read: Callable[[], Any]) -> Any:
    """``read()``, an OpenVDBError from it naming ``url``."""
    try:
        return read()
    except OpenVDBError as err:
        if url in str(err):
            raise
        raise OpenVDBError(f"{url}: {err}") from None


def _open_zarr_url(url: str, fs: Any, path: str, grid: int | str | None, kwargs: dict) -> Volume:
    """A volume store at a URL, read whole through xarray's Zarr backend."""
    import xarray as xr

    if kwargs:
        raise VolumeError(f"{sorted(kwargs)} apply to .nvdb files; a Zarr store is read whole")
    try:  # each metadata document checked for code codecs as Zarr reads it (issue 49)
        ds = xr.open_zarr(checked(fs.get_mapper(path), url), consolidated=None)
    except VolumeError:
        raise
    except (FileNotFoundError, KeyError) as err:
        raise VolumeError(f"expected a Zarr store of a volume at {url}, found none ({err})") from None
    except Exception as err:  # noqa: BLE001 - the store's own error types vary (botocore, aiohttp)
        raise storage_error(url, err) from None
    if ds.attrs.get("format") != FORMAT:
        raise VolumeError(
            f"expected a volume store written by vdbflow (Volume.to_zarr) at {url}, found a Zarr store with "
            f"format={ds.attrs.get('format')!r}"
        )
    vol = from_dataset(ds)
    if grid not in (None, 0, vol.name):
        raise VolumeError(f"expected grid None, 0 or {vol.name!r} (the one volume of {url}), got {grid!r}")
    return vol


def _open_openvdb(data: Any, grid: int | str | None, kwargs: dict[str, Any]) -> Volume | Topology:
    """A grid of a .vdb file; ``leaves`` (tree-order indices) keeps only those leaves (and every tile),
    ``bbox`` (inclusive index box) only the leaves and tiles that meet it (the other leaves' buffers
    are not decompressed); ``checksum`` is accepted and ignored (.vdb files have none)."""
    unknown = sorted(set(kwargs) - {"bbox", "leaves", "checksum"})
    if unknown:
        raise OpenVDBError(f"expected only bbox=, leaves= or checksum= for an OpenVDB file, got {unknown}")
    return open_vdb(data, grid, kwargs.get("leaves"), kwargs.get("bbox"))


def list_grids(
    data: str | os.PathLike | bytes | np.ndarray, storage_options: dict[str, Any] | None = None
) -> list[Any]:
    """What each grid of a .nvdb or .vdb file (or buffer) is: ``vdbflow.list_grids``.

    Parameters
    ----------
    data : str, os.PathLike, bytes or numpy.ndarray
        A .nvdb or OpenVDB .vdb file path or URL (``s3://...``: a .nvdb file's headers, roots and
        blind data are read by byte ranges, a .vdb file whole), or the bytes of one.
    storage_options : dict, optional
        For a URL: fsspec's options (credentials, ``endpoint_url``, ...).

    Returns
    -------
    list of GridInfo
        One :class:`~vdbflow.GridInfo` per grid, in file order (see
        :func:`vdbflow.io.nanovdb.list_grids`).  For .vdb files they come from the grids' heads
        and topologies (leaf buffers are not read); ``name`` is the grid's unique name (OpenVDB
        appends ``"\\x1e"`` and a number to a repeated name) and ``checksum`` is 0.

    Raises
    ------
    NanoVDBError
        A malformed, truncated, empty or unsupported .nvdb file.
    OpenVDBError
        A malformed, truncated or unsupported .vdb file.
    OSError
        A path that cannot be read; for a URL a :class:`~vdbflow.StorageError` naming it.
    """
    return list_grids_read(data, storage_options)[0]


def list_grids_read(
    data: str | os.PathLike | bytes | np.ndarray, storage_options: dict[str, Any] | None = None
) -> tuple[list[Any], ReadStats | None]:
    """:func:`list_grids`, and for a URL what was read of it (None for a local file or a buffer)."""
    if is_url(data):
        remote = RemoteFile.open(os.fspath(data), storage_options)
        sparse, head = _head(remote)
        if is_openvdb(head):  # heads and topologies by ranges, no leaf buffer
            return _named_vdb(remote.url, lambda: list_vdb_remote(remote, sparse)), remote.stats
        return named(remote.url, lambda: list_grids_remote(remote, sparse)), remote.stats
    if storage_options:
        raise StorageError(f"expected a URL with storage_options, got {type(data).__name__} {str(data)[:80]!r}")
    if isinstance(data, (str, os.PathLike)):
        data = local_path(data)
    return (list_vdb(data) if is_openvdb(data) else list_nvdb(data)), None


def _head(remote: RemoteFile) -> tuple[Any, bytes]:
    """A remote file's buffer (None for an empty object) with its first 64 KiB fetched (the headers of most
    files), and its first 8 bytes (the magic number that says .nvdb or .vdb)."""
    if remote.size == 0:
        return None, b""
    sparse = sparse_file.SparseFile(remote)
    sparse.fetch([(0, min(remote.size, sparse_file.HEAD))])
    return sparse, bytes(sparse.array[:8])


def split_channels(vol: Volume, size: int = 3) -> dict[str, Volume]:
    """Split a many-channel volume into volumes of ``size`` channels each, on the same voxels.

    A vec3 field's 9-channel gradient (:func:`vdbflow.gradient_field`) becomes the gradients of
    u, v and w as three vec3 volumes - what .nvdb files can hold:
    ``vdbflow.save(path, split_channels(grad))``.

    Parameters
    ----------
    vol : Volume
        A volume whose channel count is a multiple of ``size``.
    size : int, default 3
        Channels per part.

    Returns
    -------
    dict of str to Volume
        Index-layout volumes in channel order, each named ``vol.name + "_" + stem`` - the stem the
        text before ``/`` of the group's channel names when they all have one (``"du"`` of
        ``du/dx``), else the group's number - with the group's component names and ``vol``'s
        ``units`` and ``length_units``.

    Raises
    ------
    VolumeError
        A channel count that ``size`` does not divide.
    """
    C = vol.components
    if C % size:
        raise VolumeError(f"expected a channel count divisible by {size}, got {C}")
    values = np.asarray(vol.active_values()).reshape(vol.active_voxel_count, C)
    out = {}
    names = list(vol.component_names)
    for g in range(C // size):
        cols = slice(g * size, (g + 1) * size)
        group = names[cols]
        stem = group[0].split("/")[0] if all("/" in n for n in group) else f"{g}"
        name = f"{vol.name}_{stem}"
        part = (
            vol.topology.with_data(
                values[:, cols],
                np.asarray(vol.background_values).reshape(-1)[cols],
                np.asarray(vol.tile_values).reshape(vol.tile_count, C)[:, cols],
                name=name,
                component_names=group,
            )
            if vol.topology.value_count == vol.active_voxel_count
            else Volume.from_active(vol.active_voxels(), vol.transform).with_data(
                values[:, cols], name=name, component_names=group
            )
        )
        part.units, part.length_units = vol.units, vol.length_units
        out[name] = part
    return out
