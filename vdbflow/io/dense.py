"""Dense arrays (.npy, NetCDF, Zarr) to sparse .nvdb volumes, one block of 8-aligned slabs at a time.

Only the active voxels accumulate; at most one ``block`` of the dense array is in memory at once.
Axis order: the first three dims are i, j, k (x, y, z); xarray variables with dims named x, y, z
(in any order) are transposed to (x, y, z). A fourth dim holds components (vec3 / vec4). Several
``variables`` of equal shape are stacked as components (u, v, w -> vec3).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vdbflow.core.units import same
from vdbflow.core.volume import Volume
from vdbflow.errors import VolumeError
from vdbflow.io.location import RemoteFile, filesystem, is_url, npy_header
from vdbflow.io.zarr_url import checked
from vdbflow.io.zarr_v2 import refuse_code_codecs

log = logging.getLogger("vdbflow.convert")

_XYZ = ("x", "y", "z")
MAX_BLOCK_BYTES = 1 << 30  # dense bytes read at once: a slab is cut to fewer X-planes, a larger plane refused


def _real(dtype: Any, what: str) -> None:
    """Refuse a dtype that is not of real numbers (or booleans): strings, bytes, complex, objects, dates."""
    dt = np.dtype(dtype)
    if dt.kind not in "biuf":
        raise VolumeError(f"expected {what} of real numbers, found dtype {dt} ({dt.kind!r}: not a real number)")


def _regular_axis(coord: np.ndarray, name: str) -> tuple[float, float] | None:
    """(origin, spacing) of an evenly spaced 1-D coordinate, or None."""
    _real(np.asarray(coord).dtype, f"coordinate {name!r} to place voxels, as numbers")
    c = np.asarray(coord, np.float64)
    if c.ndim != 1 or len(c) < 2:
        return None
    step = np.diff(c)
    if not np.allclose(step, step[0], rtol=1e-6, atol=0) or step[0] == 0:
        raise VolumeError(
            f"expected an evenly spaced coordinate {name!r} to place voxels, got spacings from "
            f"{step.min():.6g} to {step.max():.6g}"
        )
    return float(c[0]), float(step[0])


class DenseSource:
    """A dense (X, Y, Z) or (X, Y, Z, C) array read block by block along X."""

    def __init__(
        self,
        shape: tuple[int, ...],
        read: Callable[[int, int], np.ndarray],
        dtype: np.dtype,
        origin: tuple[float, float, float] | None = None,
        voxel_size: tuple[float, float, float] | None = None,
        names: Sequence[str] | None = None,
        mask: Callable[[int, int], np.ndarray] | None = None,
        units: str | None = None,
        length_units: str | None = None,
    ):
        if len(shape) not in (3, 4):
            raise VolumeError(f"expected a dense array of shape (X, Y, Z) or (X, Y, Z, C), got {tuple(shape)}")
        self.shape, self.read, self.dtype = tuple(shape), read, np.dtype(dtype)
        self.origin, self.voxel_size, self.names, self.mask, self.units = origin, voxel_size, names, mask, units
        self.length_units = length_units
        self.variables: tuple[str, ...] = ()  # the dataset variables read (NetCDF / Zarr)
        self.others: tuple[str, ...] = ()  # its other variables of 3 or more dims, not read

    @property
    def components(self) -> int:
        return 1 if len(self.shape) == 3 else self.shape[3]

    def blocks(self, slab: int) -> Iterator[tuple[int, np.ndarray, np.ndarray | None]]:
        for x0 in range(0, self.shape[0], slab):
            x1 = min(x0 + slab, self.shape[0])
            yield x0, self.read(x0, x1), (self.mask(x0, x1) if self.mask is not None else None)


def open_dense(
    path: str | Path,
    variables: Sequence[str] = (),
    mask_variable: str | None = None,
    units: str | None = None,
    length_units: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> DenseSource:
    """A :class:`DenseSource` over an .npy file, or variables of a NetCDF / Zarr dataset (via xarray).
    The values' and the coordinates' units are ``units`` and ``length_units`` where given, else those the
    variables and coordinates state in CF ``units`` attrs (refused when they differ).  ``path`` may be a
    URL (``s3://...``, read with ``storage_options``): an .npy file slab by slab by byte ranges, a Zarr
    store or NetCDF file through fsspec."""
    if is_url(path):
        opened = _url_dataset(str(path), variables, mask_variable, units, length_units, storage_options)
        if isinstance(opened, DenseSource):  # an .npy file
            return opened
        return _dataset_source(opened, str(path), variables, mask_variable, units, length_units)
    path = Path(path)
    if not path.exists():
        raise VolumeError(f"expected a dense input file, found nothing at {path}")
    if path.suffix.lower() == ".npy":
        if variables or mask_variable:
            raise VolumeError("--variable and --mask-variable select variables of NetCDF / Zarr inputs, not .npy")
        try:
            arr = np.load(path, mmap_mode="r")
        except (ValueError, OSError) as err:
            raise VolumeError(f"cannot read {path} as a .npy array: {err}") from None
        _real(arr.dtype, f"the array of {path}")
        return DenseSource(
            arr.shape, lambda a, b: np.asarray(arr[a:b]), arr.dtype, units=units, length_units=length_units
        )
    import xarray as xr

    zarr = path.suffix.lower() == ".zarr" or path.is_dir()
    if zarr:
        import fsspec

        refuse_code_codecs(path)  # every metadata file, before Zarr; and what Zarr reads, checked as it reads it
    try:
        if zarr:
            ds = xr.open_zarr(checked(fsspec.get_mapper(str(path)), str(path)))
        else:
            ds = xr.open_dataset(path, chunks={})
    except VolumeError:
        raise
    except Exception as err:  # the backends raise many kinds for unreadable files
        raise VolumeError(f"cannot open {path} as a NetCDF or Zarr dataset: {err}") from None
    return _dataset_source(ds, path, variables, mask_variable, units, length_units)


def _url_dataset(
    url: str,
    variables: Sequence[str],
    mask_variable: str | None,
    units: str | None,
    length_units: str | None,
    storage_options: dict[str, Any] | None,
) -> Any:
    """A dense input at a URL: an .npy file as a DenseSource read slab by slab by byte ranges, else the
    xarray Dataset of a Zarr store (checked for code codecs first) or a NetCDF file (fsspec file object)."""
    import xarray as xr

    fs, where = filesystem(url, storage_options)
    if url.lower().endswith(".npy"):
        if variables or mask_variable:
            raise VolumeError("--variable and --mask-variable select variables of NetCDF / Zarr inputs, not .npy")
        return _npy_url_source(RemoteFile.open(url, storage_options), units, length_units)
    zarr = url.rstrip("/").lower().endswith(".zarr") or fs.isdir(where)
    try:
        if zarr:
            return xr.open_zarr(checked(fs.get_mapper(where), url))  # metadata checked as Zarr reads it
        return xr.open_dataset(fs.open(where, "rb"), engine="h5netcdf", chunks={})
    except VolumeError:
        raise
    except Exception as err:  # the backends and the store raise many kinds
        raise VolumeError(f"cannot open {url} as a NetCDF or Zarr dataset: {err}") from None


def _npy_url_source(remote: Any, units: str | None, length_units: str | None) -> DenseSource:
    """An .npy file at a URL: its header by one range, each slab ``[a, b)`` by another."""
    shape, dtype, offset = npy_header(remote, VolumeError)
    _real(dtype, f"the array of {remote.url}")
    row = math.prod(shape[1:]) * dtype.itemsize

    def slab(a: int, b: int) -> np.ndarray:
        ((_, data),) = remote.read_ranges([(offset + a * row, offset + b * row)])
        return np.frombuffer(data, dtype).reshape((b - a, *shape[1:]))

    return DenseSource(tuple(shape), slab, dtype, units=units, length_units=length_units)


def _dataset_source(
    ds: Any,
    path: Any,
    variables: Sequence[str],
    mask_variable: str | None,
    units: str | None,
    length_units: str | None,
) -> DenseSource:
    """The DenseSource of variables of an opened NetCDF / Zarr Dataset."""
    names = list(variables) or [v for v in ds.data_vars if ds[v].ndim >= 3][:1]
    if not names:
        raise VolumeError(f"expected a variable with 3 dims in {path}, found {list(ds.data_vars)}")
    missing = [v for v in names if v not in ds.data_vars]
    if missing:
        raise VolumeError(f"variables {missing} are not in {path} (it has {list(ds.data_vars)})")
    arrays = [_spatial(ds[v]) for v in names]
    for v, a in zip(names, arrays, strict=True):
        _real(a.dtype, f"variable {v!r} of {path}")
    dims = arrays[0].dims
    for v, a in zip(names, arrays, strict=True):
        if a.dims != dims or a.shape != arrays[0].shape:
            raise VolumeError(
                f"expected variables of equal dims and shape, got {names[0]} {dict(arrays[0].sizes)} "
                f"and {v} {dict(a.sizes)}"
            )
    if len(arrays) > 1 and len(dims) != 3:
        raise VolumeError(f"expected 3-dim variables to stack as components, got dims {dims}")
    origin, size = [], []
    for d in dims[:3]:
        reg = _regular_axis(ds[d].values, d) if d in ds.coords else None
        origin.append(reg[0] if reg else 0.0)
        size.append(reg[1] if reg else 1.0)
    value_units = units or _cf_units([ds[v] for v in names], "variables", "--units")
    length_units = length_units or _cf_units(
        [ds[d] for d in dims[:3] if d in ds.coords], "coordinates", "--length-units"
    )
    shape = arrays[0].shape + ((len(arrays),) if len(arrays) > 1 else ())

    def read(a: int, b: int) -> np.ndarray:
        blocks = [np.asarray(arr.isel({dims[0]: slice(a, b)}).values) for arr in arrays]
        return blocks[0] if len(blocks) == 1 else np.stack(blocks, axis=-1)

    mask = None
    if mask_variable is not None:
        if mask_variable not in ds.data_vars:
            raise VolumeError(f"mask variable {mask_variable!r} is not in {path} (it has {list(ds.data_vars)})")
        m = _spatial(ds[mask_variable])
        _real(m.dtype, f"mask variable {mask_variable!r} of {path}")
        if m.dims != dims[:3]:
            raise VolumeError(f"expected the mask on dims {dims[:3]}, got {m.dims}")

        def mask(a: int, b: int) -> np.ndarray:
            return np.asarray(m.isel({dims[0]: slice(a, b)}).values).astype(bool)

    source = DenseSource(
        shape,
        read,
        np.result_type(*[a.dtype for a in arrays]),
        tuple(origin),
        tuple(size),
        names if len(names) > 1 else None,
        mask,
        value_units,
        length_units,
    )
    source.variables = tuple(names)
    source.others = tuple(str(v) for v in ds.data_vars if v not in names and ds[v].ndim >= 3)
    return source


def _cf_units(variables: list[Any], what: str, option: str) -> str | None:
    """The CF ``units`` attr the ``variables`` share (None where none states one); refuses differing ones."""
    stated = {}
    for v in variables:
        text = v.attrs.get("units")
        if text is None or (isinstance(text, str) and not text):
            continue
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if not isinstance(text, str):
            raise VolumeError(
                f"expected the CF units of {v.name!r} as text, found {type(text).__name__} {str(text)[:60]} "
                f"({option} states the units to use)"
            )
        stated[str(v.name)] = text
    if not stated:
        return None
    first = next(iter(stated.values()))
    if not all(same(first, u) for u in stated.values()):
        raise VolumeError(f"expected the {what} to share their units, got {stated} ({option} states the units to use)")
    return first


def _spatial(var: Any) -> Any:
    """``var`` with x, y, z dims first in that order when it has them."""
    if all(d in var.dims for d in _XYZ):
        rest = [d for d in var.dims if d not in _XYZ]
        var = var.transpose(*_XYZ, *rest)
    if var.ndim not in (3, 4):
        raise VolumeError(
            f"expected a variable with 3 dims (or 4 with components), got {var.name!r} with dims {var.dims}"
        )
    return var


def default_name(source: DenseSource, variables: Sequence[str] = ()) -> str:
    """The grid name ``vdbflow convert`` gives without ``--name``: the name of the one variable read,
    else ``velocity`` for a vec3 grid and ``density`` for any other."""
    chosen = tuple(variables) or source.variables
    if len(chosen) == 1:
        return chosen[0]
    return "velocity" if source.components == 3 else "density"


def convert(
    source: DenseSource,
    threshold: float | None = None,
    background: float = 0.0,
    dtype: str | None = None,
    voxel_size: Sequence[float] | None = None,
    origin: Sequence[float] | None = None,
    slab: int = 64,
    name: str = "density",
    progress: Callable[[int, int], None] | None = None,
    units: str | None = None,
    length_units: str | None = None,
) -> Volume:
    """A sparse Volume of the voxels of ``source`` that are active: where the mask is set, else where
    ``|value|`` (vector norm) exceeds ``threshold``, else where the value differs from ``background``.

    ``slab`` (a multiple of 8) X-planes are dense at a time.  ``units`` and ``length_units`` (the values'
    and the coordinates') replace those the source states in CF ``units`` attrs.
    """
    if slab < 8 or slab % 8:
        raise VolumeError(f"expected a slab of a positive multiple of 8 planes, got {slab}")
    C = source.components
    slab = _bounded_slab(source, slab)
    out_dtype = (
        np.dtype(dtype) if dtype else (np.dtype(np.float64) if source.dtype == np.float64 else np.dtype(np.float32))
    )
    if C not in (1, 3, 4):
        raise VolumeError(f"expected 1, 3 or 4 components to write a value grid, got {C}")
    coords, values = [], []
    for x0, block, mask in source.blocks(slab):
        block = np.asarray(block)
        if block.shape[1:] != source.shape[1:]:
            raise VolumeError(f"expected blocks of shape (n,) + {source.shape[1:]}, got {block.shape}")
        if mask is not None:
            active = mask
        else:
            finite = np.isfinite(block) if C == 1 else np.isfinite(block).all(axis=-1)
            if threshold is not None:
                mag = np.abs(block) if C == 1 else np.linalg.norm(block, axis=-1)
                active = finite & (mag > threshold)
            else:
                differs = block != background if C == 1 else (block != background).any(axis=-1)
                active = finite & differs
        idx = np.argwhere(active)
        if len(idx):
            values.append(block[tuple(idx.T)].astype(out_dtype))
            idx[:, 0] += x0
            coords.append(idx.astype(np.int32))
        if progress is not None:
            progress(min(x0 + slab, source.shape[0]), source.shape[0])
    ijk = np.concatenate(coords) if coords else np.zeros((0, 3), np.int32)
    vals = np.concatenate(values) if values else np.zeros((0,) if C == 1 else (0, C), out_dtype)
    size = tuple(voxel_size) if voxel_size is not None else (source.voxel_size or (1.0, 1.0, 1.0))
    org = tuple(origin) if origin is not None else (source.origin or (0.0, 0.0, 0.0))
    vol = Volume.from_voxels(
        ijk, vals, background=background, transform=_transform(size, org), name=name, component_names=source.names
    )
    vol.units = units or source.units
    vol.length_units = length_units or source.length_units
    return vol


def _bounded_slab(source: DenseSource, slab: int) -> int:
    """``slab``, or fewer X-planes where that many would take more than ``MAX_BLOCK_BYTES`` dense; refuses
    (:class:`VolumeError`, with the sizes) a source one of whose planes alone would."""
    plane = int(np.prod(source.shape[1:], dtype=object)) * max(source.dtype.itemsize, 1)
    if plane > MAX_BLOCK_BYTES:
        raise VolumeError(
            f"expected one X-plane of the dense input to take at most {MAX_BLOCK_BYTES:,} bytes (read at once), "
            f"found {plane:,} bytes: shape {source.shape} of {source.dtype}; cut the input into smaller "
            "pieces first"
        )
    return max(1, min(slab, MAX_BLOCK_BYTES // max(plane, 1)))


def _transform(voxel_size: Sequence[float], origin: Sequence[float]) -> np.ndarray:
    if len(voxel_size) == 1:
        voxel_size = tuple(voxel_size) * 3
    if len(voxel_size) != 3 or len(origin) != 3:
        raise VolumeError(f"expected 3 voxel sizes and 3 origin coordinates, got {list(voxel_size)} and {list(origin)}")
    M = np.eye(4)
    M[:3, :3] = np.diag(np.asarray(voxel_size, np.float64))
    M[:3, 3] = origin
    return M
