"""The sparse volume model: a leaf topology (:mod:`vdbflow.core.topology`) and values stored per
leaf (512 per leaf) or per active voxel (NanoVDB OnIndex layout)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from vdbflow.core import tree
from vdbflow.core import units as _units
from vdbflow.core.kernel import KernelArrays
from vdbflow.core.periodic import Periodicity, resolve_periodic
from vdbflow.core.topology import (
    Topology,
    TransformLike,
    active_topology,
    as_coordinates,
    dense_leaves,
    same_topology,
    split_tiles,
    voxel_leaves,
)
from vdbflow.core.transform import Transform
from vdbflow.core.value_types import ValueType, cast_values, value_type_for
from vdbflow.errors import VolumeError

if TYPE_CHECKING:
    import xarray as xr

DEFAULT_COMPONENT_NAMES = ("x", "y", "z", "w")


# Volume and Topology methods carried out by higher layers (sampling in vdbflow.ops, files in
# vdbflow.io) import their function when called, as xarray's Dataset.to_zarr does: thin facades, the
# only imports upwards (tests/test_layout.py FACADES lists them).

__all__ = ["Topology", "TransformLike", "same_topology"]  # importable from here too


class Volume:
    """A sparse volume of values: a :class:`Topology` plus values, tile values and a background.

    Use the constructors :meth:`from_dense`, :meth:`from_voxels`, :meth:`from_active` (then
    ``Topology.with_data``).  Sampling: :meth:`sample`, :meth:`sample_grad`.
    """

    def __init__(
        self,
        topology: Topology,
        data: np.ndarray,
        background: np.ndarray,
        tile_values: np.ndarray,
        value_type: ValueType,
        index_layout: bool,
        name: str = "value",
        component_names: Sequence[str] | None = None,
        leaf_values_at: np.ndarray | None = None,
    ):
        """``data`` is (rows, C), or - with ``leaf_values_at`` (L,) - a flat array in which leaf l's 512
        values start at element ``leaf_values_at[l]`` (values left in place inside a mapped file)."""
        self.topology = topology
        self.value_type = value_type
        self.index_layout = bool(index_layout)
        self.name = name
        C = value_type.components
        default = DEFAULT_COMPONENT_NAMES[:C] if C <= 4 else tuple(f"c{c}" for c in range(C))
        names = tuple(component_names) if component_names is not None else default
        if len(names) != C or len(set(names)) != C:
            raise VolumeError(f"expected {C} distinct component names, got {list(names)}")
        self.component_names = names
        self.units: str | None = topology.units  # of the values, e.g. "m/s" (Dataset attrs, plots)
        self.length_units: str | None = topology.length_units  # of world space, e.g. "m"
        data = data.view()  # a read-only view: the caller's own array keeps its flags
        data.setflags(write=False)
        self._data = data
        self._leaf_values_at = None if leaf_values_at is None else np.ascontiguousarray(leaf_values_at, np.int64)
        if self._leaf_values_at is not None:
            if index_layout or self._leaf_values_at.shape != (topology.leaf_count,):
                raise VolumeError("expected one value offset per leaf of a per-leaf layout volume")
            if len(self._leaf_values_at) and (
                self._leaf_values_at.min() < 0 or self._leaf_values_at.max() > data.size - tree.LEAF_VOXELS * C
            ):
                raise VolumeError(
                    f"expected leaf value offsets inside the value array of {data.size} elements, "
                    f"got [{self._leaf_values_at.min()}, {self._leaf_values_at.max()}] "
                    f"+ {tree.LEAF_VOXELS * C}"
                )
        elif data.ndim != 2 or data.shape[1] != C:
            raise VolumeError(f"expected values of shape (rows, {C}), got {data.shape}")
        elif index_layout and len(data) < topology.value_count:
            raise VolumeError(
                f"expected at least {topology.value_count} value rows for the index layout, got {len(data)}"
            )
        elif not index_layout and len(data) != tree.LEAF_VOXELS * topology.leaf_count:
            raise VolumeError(
                f"expected {tree.LEAF_VOXELS * topology.leaf_count} value rows "
                f"({tree.LEAF_VOXELS} per leaf), got {len(data)}"
            )
        if tile_values.shape != (topology.tile_count, C) or background.shape != (C,):
            raise VolumeError(
                f"expected tile values ({topology.tile_count}, {C}) and a background ({C},), "
                f"got {tile_values.shape} and {background.shape}"
            )
        self._contiguous_cache: np.ndarray | None = None
        self._background = background
        self._tile_values = tile_values
        for arr in (background, tile_values, self._leaf_values_at):
            if arr is not None and arr.flags.writeable:
                arr.setflags(write=False)
        self.device_cache: dict[Any, Any] = {}
        self.grid_class = "unknown"  # NanoVDB grid class, kept for .nvdb round trips
        self.blind_data: tuple = ()  # NanoVDB blind data records, kept for .nvdb round trips

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_parts(
        cls,
        topology: Topology,
        data: np.ndarray,
        background: Any,
        tile_values: Any,
        index_layout: bool,
        name: str,
        component_names: Sequence[str] | None,
    ) -> Volume:
        """A volume of ``topology`` and its parts, checked: values ``data`` (rows of C, per leaf or, with
        ``index_layout``, per active voxel), background (C,) and tile values (T, C)."""
        C = 1 if data.ndim == 1 else data.shape[1]
        vt = value_type_for(data.dtype, C)
        data2 = np.ascontiguousarray(data.reshape(len(data), C))
        bg = cast_values(background, vt, "background", (C,))
        if tile_values is None:
            tiles = np.broadcast_to(bg, (topology.tile_count, C)).copy()
        else:
            tiles = cast_values(tile_values, vt, "tile values", (topology.tile_count, C))
        return cls(topology, data2, bg, np.ascontiguousarray(tiles), vt, index_layout, name, component_names)

    @classmethod
    def from_voxels(
        cls,
        ijk: Any,
        values: Any,
        background: Any = 0,
        transform: TransformLike = None,
        *,
        voxel_size: float | Sequence[float] | None = None,
        origin: Sequence[float] | None = None,
        tiles: tuple | None = None,
        name: str = "value",
        component_names: Sequence[str] | None = None,
        units: str | None = None,
        length_units: str | None = None,
        periodic: Any = None,
    ) -> Volume:
        """A volume holding values at a list of voxels.

        The result has the per-leaf layout (512 values per 8 x 8 x 8 leaf).  The given voxels are
        active; other voxels of their leaves, and everything else outside tiles, read
        ``background``.

        Parameters
        ----------
        ijk : array_like, shape (n, 3)
            Integer index coordinates of the voxels (floats holding whole numbers are accepted),
            inside the int32 range; each voxel at most once.
        values : array_like, shape (n,) or (n, C)
            One value, or one row of C components, per voxel: int32, int64, uint32, float32 or
            float64; the dtype and C make the volume's value type.
        background : scalar or array_like of shape (C,), default 0
            The value everywhere nothing else is stored; must be representable in the values' dtype.
        transform : Transform or array_like of shape (4, 4), optional
            The index-to-world matrix (world space in the volume's length units).  Give either this
            or ``voxel_size``/``origin``; with neither, index and world space coincide.
        voxel_size : float or sequence of 3 floats, optional
            Positive voxel edge lengths in world units (default 1).
        origin : sequence of 3 floats, optional
            World position of voxel (0, 0, 0) (default the origin).
        tiles : tuple, optional
            ``(origins (T, 3), sizes (T,), values (T,) or (T, C))``: constant cubes of 8, 128 or 4096
            voxels per side (the sizes of NanoVDB's leaf, lower and upper nodes).
        name : str, default ``"value"``
            The volume's name: the variable name of its sampled Datasets.
        component_names : sequence of str, optional
            C distinct names of the components (default ``x, y, z, w`` for up to 4, else ``c0, c1, ...``).
        units, length_units : str, optional
            Units of the values (``"m/s"``) and of world space (``"m"``): the ``units`` and
            ``length_units`` of the volume and of what is sampled from it.
        periodic : bool, str or sequence of 3, optional
            Periodic axes (see :meth:`with_periodic`): True, axis names (``"xz"``), or per axis a bool or
            a period in voxels; by default the extent of the active bounding box.

        Returns
        -------
        Volume
            A per-leaf layout volume with the given ``units`` and ``length_units``.

        Raises
        ------
        VolumeError
            ``ijk`` or ``values`` of the wrong shape or dtype, a voxel given twice, coordinates
            outside int32, a background or tile values the dtype cannot hold, tiles of another size,
            both ``transform`` and ``voxel_size``/``origin``, or a bad voxel size or origin.

        See Also
        --------
        from_dense : a volume from a dense array.
        from_active : an index-layout topology, for values attached later.

        Examples
        --------
        Three voxels, two of them in the leaf at the origin and one in the next leaf along i,
        with voxels 0.5 units wide:

        >>> import numpy as np
        >>> import vdbflow
        >>> ijk = np.array([[0, 0, 0], [1, 0, 0], [9, 0, 0]])
        >>> vol = vdbflow.Volume.from_voxels(ijk, np.array([1.0, 2.0, 5.0], np.float32), voxel_size=0.5)
        >>> vol
        <vdbflow.Volume 'value': float32, per-leaf layout, 2 leaves, 3 active voxels, 0 tiles, ...>
        >>> vol.voxel_size.tolist()
        [0.5, 0.5, 0.5]
        >>> vol.sample([[0.25, 0.0, 0.0]])["value"].values.tolist()  # world x = 0.25: halfway from voxel 0 to 1
        [1.5]
        """
        coords = as_coordinates(ijk)
        vals = np.asarray(values)
        if vals.ndim not in (1, 2) or vals.shape[0] != len(coords):
            raise VolumeError(f"expected values of shape ({len(coords)},) or ({len(coords)}, C), got {vals.shape}")
        C = 1 if vals.ndim == 1 else vals.shape[1]
        vt = value_type_for(vals.dtype, C)
        bg = cast_values(background, vt, "background", (C,))
        leaf_origins, masks, data = voxel_leaves(coords, vals, bg)
        t_origins, t_sizes, t_values = split_tiles(tiles, with_values=True)
        topo = Topology(leaf_origins, masks, Transform.coerce(transform, voxel_size, origin), t_origins, t_sizes)
        vol = cls.from_parts(topo, data, bg, t_values, False, name, component_names).with_units(units, length_units)
        return vol.with_periodic(periodic)

    @classmethod
    def from_dense(
        cls,
        array: Any,
        voxel_size: float | Sequence[float] = 1.0,
        origin: Sequence[float] = (0.0, 0.0, 0.0),
        background: Any = 0,
        active: Any = None,
        *,
        name: str = "value",
        component_names: Sequence[str] | None = None,
        units: str | None = None,
        length_units: str | None = None,
        periodic: Any = None,
    ) -> Volume:
        """A volume from a dense array.

        The result has the per-leaf layout.  Voxel (i, j, k) of the array is voxel (i, j, k) of the
        volume, at ``origin + (i, j, k) * voxel_size`` in world space.  Leaves without an active
        voxel are dropped; sampling is unaffected, as inactive voxels hold their values.  Works one
        slab of 8 x-planes at a time.

        Parameters
        ----------
        array : array_like, shape (X, Y, Z) or (X, Y, Z, C)
            Non-empty values indexed ``[i, j, k]`` or ``[i, j, k, component]``: int32, int64, uint32,
            float32 or float64.
        voxel_size : float or sequence of 3 floats, default 1.0
            Positive voxel edge lengths in world units (the volume's length units).
        origin : sequence of 3 floats, default (0, 0, 0)
            World position of voxel (0, 0, 0).
        background : scalar or array_like of shape (C,), default 0
            The value outside the leaves; must be representable in the array's dtype.
        active : array_like of bool, shape (X, Y, Z), optional
            Which voxels are active; by default those whose value differs from ``background`` (in
            any component).
        name : str, default ``"value"``
            The volume's name: the variable name of its sampled Datasets.
        component_names : sequence of str, optional
            C distinct names of the components (default ``x, y, z, w`` for up to 4, else ``c0, c1, ...``).
        units, length_units : str, optional
            Units of the values (``"m/s"``) and of world space (``"m"``): the ``units`` and
            ``length_units`` of the volume and of what is sampled from it.
        periodic : bool, str or sequence of 3, optional
            Periodic axes (see :meth:`with_periodic`): ``True`` makes the array one period of a periodic
            field along every axis (voxel X is voxel 0 again, whatever is active), ``"xz"`` along those.

        Returns
        -------
        Volume
            A per-leaf layout volume with the given ``units`` and ``length_units``.

        Raises
        ------
        VolumeError
            An empty array or one of another rank or dtype, an ``active`` mask of another shape or a
            non-boolean one, a background the dtype cannot hold, or a bad voxel size or origin.

        See Also
        --------
        from_voxels : a volume from a list of voxels.

        Examples
        --------
        >>> import numpy as np
        >>> import vdbflow
        >>> i, j, k = np.meshgrid(np.arange(8), np.arange(8), np.arange(8), indexing="ij")
        >>> vol = vdbflow.Volume.from_dense(1.0 + 2.0 * i + 3.0 * j, voxel_size=0.5, origin=(10.0, 0.0, 0.0))
        >>> vol.leaf_count, vol.active_voxel_count, vol.dtype
        (1, 512, dtype('float64'))
        >>> vol.sample([[10.5, 0.5, 0.0]])["value"].values.tolist()  # voxel (1, 1, 0): 1 + 2 + 3
        [6.0]
        """
        arr = np.asarray(array)
        if arr.ndim not in (3, 4) or 0 in arr.shape:
            raise VolumeError(f"expected a non-empty dense array of shape (X, Y, Z) or (X, Y, Z, C), got {arr.shape}")
        C = 1 if arr.ndim == 3 else arr.shape[3]
        vt = value_type_for(arr.dtype, C)
        arr4 = arr.reshape(arr.shape[:3] + (C,))
        bg = cast_values(background, vt, "background", (C,))
        if active is not None:
            active = np.asarray(active)
            if active.shape != arr.shape[:3] or active.dtype != bool:
                raise VolumeError(
                    f"expected a boolean active mask of shape {arr.shape[:3]}, got {active.dtype} {active.shape}"
                )
        transform = Transform.from_voxel_size(voxel_size, origin)
        leaf_origins, mask_arr, data = dense_leaves(arr4, active, bg)
        topo = Topology(leaf_origins, mask_arr, transform)  # periods: the array's shape, whatever is active
        topo = topo.with_periodic(resolve_periodic(periodic, np.array([[0, 0, 0], np.subtract(arr.shape[:3], 1)])))
        return cls.from_parts(topo, data, bg, None, False, name, component_names).with_units(units, length_units)

    @staticmethod
    def from_active(
        ijk: Any,
        transform: TransformLike = None,
        *,
        voxel_size: float | Sequence[float] | None = None,
        origin: Sequence[float] | None = None,
        tiles: tuple | None = None,
        periodic: Any = None,
    ) -> Topology:
        """An index-layout topology whose active voxels are ``ijk`` (n, 3) (repeats allowed).

        Attach values with ``topology.with_data(voxel_data, background)``; ``voxel_data`` follows
        ``topology.active_voxels()`` order (leaves in tree order, voxels by mask bit).
        ``tiles`` is ``(origins (T, 3), sizes (T,))``; ``periodic`` as :meth:`with_periodic`."""
        topology = active_topology(ijk, Transform.coerce(transform, voxel_size, origin), tiles)
        return topology.with_periodic(periodic)

    # -- properties ---------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        """NumPy dtype of one value component."""
        return self.value_type.dtype

    @property
    def components(self) -> int:
        return self.value_type.components

    @property
    def leaf_count(self) -> int:
        return self.topology.leaf_count

    @property
    def tile_count(self) -> int:
        return self.topology.tile_count

    @property
    def active_voxel_count(self) -> int:
        return self.topology.active_voxel_count

    @property
    def background(self) -> np.ndarray | np.generic:
        """The background: a scalar for one component, else a (C,) array."""
        return self._background[0] if self.components == 1 else self._background.copy()

    @property
    def background_values(self) -> np.ndarray:
        """(C,) the background, read-only, whatever the component count (:attr:`background` is a scalar for one)."""
        return self._background

    @property
    def tile_values(self) -> np.ndarray:
        """(T, C) the values of the tiles, read-only, in the topology's tile order."""
        return self._tile_values

    @property
    def transform(self) -> Transform:
        return self.topology.transform

    @property
    def periodic(self) -> Periodicity | None:
        """The periodic axes (index space: first voxel and period of each), None when no axis wraps."""
        return self.topology.periodic

    def with_periodic(self, periodic: Any) -> Volume:
        """This volume with periodic axes: stencils wrap across the faces and a point any whole number of
        periods away samples what its image in the box samples (the same bits).  ``periodic``: True (every
        axis), axis names (``"xz"``), 3 entries each a bool or a period in voxels (default: the extent of the
        active bounding box along the axis, from its first voxel), a :class:`~vdbflow.core.periodic.Periodicity`,
        or None/False for none.  Shares this volume's arrays."""
        topology = self.topology.with_periodic(periodic)
        return self if topology is self.topology else self._with_parts(topology, self._data, self._leaf_values_at)

    @property
    def index_to_world(self) -> np.ndarray:
        return self.topology.index_to_world

    @property
    def voxel_size(self) -> np.ndarray:
        return self.topology.voxel_size

    @property
    def index_bbox(self) -> np.ndarray | None:
        return self.topology.index_bbox

    @property
    def world_bbox(self) -> np.ndarray | None:
        return self.topology.world_bbox

    def data_bounds(self, space: str = "world", inner: bool = False) -> np.ndarray | None:
        return self.topology.data_bounds(space, inner)  # the voxel centres' box: Topology.data_bounds

    def value_rows(self) -> np.ndarray:
        """Values as (rows, C): the stored array, or a copy gathered from values left in a mapped file."""
        if self._leaf_values_at is None:
            return self._data
        if self._contiguous_cache is None:
            flat = self._data.reshape(-1)
            self._contiguous_cache = tree.gather_leaf_values(flat, self._leaf_values_at, self.components)
        return self._contiguous_cache

    @property
    def voxel_data(self) -> np.ndarray:
        """Stored values: (n_active,) / (n_active, C) for the index layout, (L*512, ...) per leaf
        (gathered into memory on first use when the values live in a mapped .nvdb file)."""
        data = self.value_rows()
        return data[:, 0] if self.components == 1 else data

    @property
    def leaf_values(self) -> np.ndarray:
        """(L, 512, C) per-leaf values without copying (a strided view into a mapped file when the
        volume was opened from one); per-leaf layout only."""
        if self.index_layout:
            raise VolumeError("expected a per-leaf layout volume for leaf_values, got the index layout")
        if self._leaf_values_at is None:
            return self._data.reshape(self.leaf_count, tree.LEAF_VOXELS, self.components)
        view = tree.strided_leaf_values(self._data.reshape(-1), self._leaf_values_at, self.components)
        return view if view is not None else self.value_rows().reshape(-1, tree.LEAF_VOXELS, self.components)

    def active_voxels(self) -> np.ndarray:
        return self.topology.active_voxels()

    def active_values(self) -> np.ndarray:
        """Values of ``active_voxels()``, (n,) or (n, C)."""
        if self.index_layout:
            return self.voxel_data.copy()
        bits = tree.bits_from_masks(self.topology.masks).ravel()
        vals = self.value_rows()[np.nonzero(bits)[0]]
        return vals[:, 0] if self.components == 1 else vals

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays this volume holds: its values (the whole mapped block for values left in
        a file), tile values, background and its topology's masks, counts and hash tables."""
        k = self.kernel_arrays()
        arrays = (*k.tables, k.masks, k.prefix, k.leaf_offset, k.values, k.tile_values, k.background)
        return int(sum(a.nbytes for a in arrays)) + int(self.topology.leaf_origins.nbytes)

    def kernel_arrays(self) -> KernelArrays:
        """What the kernels read of this volume (made once, then kept: its ``device_cache`` holds each
        device's kernel record)."""
        k = self.device_cache.get("kernel_arrays")
        if k is None:
            t = self.topology
            k = self.device_cache["kernel_arrays"] = KernelArrays(
                t.tables,
                t.masks,
                t.prefix,
                t.leaf_offset,
                self._data,
                self._tile_values,
                self._background,
                self.components,
                self.index_layout,
                self._leaf_values_at,
                t.transform.kernel_parameters(),
                None if t.periodic is None else t.periodic.kernel_parameters(),
            )
        return k

    def select_leaves(self, leaves: Any) -> Volume:
        """A volume with only the given leaves (indices in tree order), all tiles and the same
        transform and background; values are copied (``(L', 512, C)`` or the leaves' active rows)."""
        raw = np.asarray(leaves)
        if raw.size and raw.dtype.kind not in "iu":
            raise VolumeError(f"expected integer leaf indices, got dtype {raw.dtype}")
        if raw.ndim > 1:
            raise VolumeError(f"expected a 1-D array of leaf indices, got shape {raw.shape}")
        idx = np.unique(raw.astype(np.int64))
        t = self.topology
        if len(idx) and (idx[0] < 0 or idx[-1] >= t.leaf_count):
            raise VolumeError(f"expected leaf indices in [0, {t.leaf_count}), got {idx[0]}..{idx[-1]}")
        topo = t.with_leaves(t.leaf_origins[idx], t.masks[idx])
        C = self.components
        if not self.index_layout:
            data = np.ascontiguousarray(self.leaf_values[idx]).reshape(-1, C)
        else:
            data = self._data[t.leaf_rows(idx, True)]
        return self._with_parts(topo, data)

    def contiguous(self) -> Volume:
        """This volume with its values in one contiguous in-memory array (itself when they already are)."""
        if self._leaf_values_at is None:
            return self
        return self._with_parts(self.topology, self.value_rows())

    def with_units(self, units: str | None, length_units: str | None = None) -> Volume:
        """This volume, its ``units`` and ``length_units`` set to those given (not None)."""
        self.units = _units.given(units, "units") or self.units
        self.length_units = _units.given(length_units, "length_units") or self.length_units
        return self

    def _with_parts(self, topology: Topology, data: np.ndarray, leaf_values_at: np.ndarray | None = None) -> Volume:
        """This volume's grid with another topology and values; its metadata carried over."""
        args = (self._background, self._tile_values, self.value_type, self.index_layout, self.name)
        vol = Volume(topology, data, *args, self.component_names, leaf_values_at)
        vol.grid_class, vol.blind_data = self.grid_class, self.blind_data
        vol.units, vol.length_units = self.units, self.length_units
        return vol

    # -- sampling -----------------------------------------------------------------------------
    def sample(
        self, points: Any, mode: str = "linear", space: str = "world", *, device: str = "cpu", dims: Any = None
    ) -> xr.Dataset:
        """Values of this volume at points, as an xarray Dataset; the same as :func:`vdbflow.sample`.

        Parameters
        ----------
        points : array_like, shape (N, 3) or (..., 3)
            NumPy, CuPy or Dask (a lazy result) points: world space (length units) by default, index
            space (voxels, voxel centres at integers) with ``space="index"``.
        mode : str, default ``"linear"``
            The interpolation scheme (``"closest"`` for integer data).
        space : {"world", "index"}, default ``"world"``
            The space of ``points``.
        device : {"cpu", "cuda", "auto"}, default ``"cpu"``
            Where the kernels run.
        dims : str or sequence of str, optional
            Names of the points' leading dims.

        Returns
        -------
        xarray.Dataset
            Variable ``self.name`` with the points' leading dims (``point`` for (N, 3) points), plus
            ``component`` for multi-component data; the point positions as coordinates.

        See Also
        --------
        vdbflow.sample : the full description; it raises PointsError, SamplingError, DeviceError.
        """
        from vdbflow.ops.sampling import sample

        return sample(self, points, mode=mode, space=space, device=device, dims=dims)

    def sample_grad(
        self,
        points: Any,
        mode: str = "linear",
        space: str = "world",
        jacobian_space: str | None = None,
        *,
        device: str = "cpu",
        dims: Any = None,
        outputs: Sequence[str] = ("value", "jacobian"),
    ) -> xr.Dataset:
        """Values and Jacobians of this volume at points, as an xarray Dataset; the same as
        :func:`vdbflow.sample_grad`.

        Parameters
        ----------
        points : array_like, shape (N, 3) or (..., 3)
            NumPy, CuPy or Dask (a lazy result) points: world space (length units) by default, index
            space (voxels, voxel centres at integers) with ``space="index"``.
        mode : str, default ``"linear"``
            The interpolation scheme (``"closest"`` for integer data, whose Jacobian is 0).
        space : {"world", "index"}, default ``"world"``
            The space of ``points``.
        jacobian_space : {"index", "world"}, optional
            The axes of the derivative, per voxel or per length unit; default ``space``.
        device : {"cpu", "cuda", "auto"}, default ``"cpu"``
            Where the kernels run.
        dims : str or sequence of str, optional
            Names of the points' leading dims.
        outputs : sequence of str, default ``("value", "jacobian")``
            Also derived quantities of vec3 float data (``q_criterion``, ...; see :func:`vdbflow.sample_grad`).

        Returns
        -------
        xarray.Dataset
            Variables ``self.name`` and ``self.name + "_jacobian"`` (leading dims, then
            ``component`` for multi-component data, then ``axis``), with
            ``jacobian[c, a] = d value[c] / d axis[a]`` in units of ``self.units`` per voxel or per
            length unit.

        See Also
        --------
        vdbflow.sample_grad : the full description, with an example, and what it raises.
        """
        from vdbflow.ops.sampling import sample_grad

        return sample_grad(self, points, mode, space, jacobian_space, device=device, dims=dims, outputs=outputs)

    def sample_hessian(
        self,
        points: Any,
        mode: str = "lag4",
        space: str = "world",
        jacobian_space: str | None = None,
        hessian_space: str | None = None,
        *,
        device: str = "cpu",
        dims: Any = None,
    ) -> xr.Dataset:
        """Values, Jacobians and Hessians of this volume at points, as an xarray Dataset; the same as
        :func:`vdbflow.sample_hessian`.

        Parameters
        ----------
        points : array_like, shape (N, 3) or (..., 3)
            NumPy, CuPy or Dask points, in ``space``.
        mode : str, default ``"lag4"``
            Any interpolation scheme but ``"closest"``.
        space : {"world", "index"}, default ``"world"``
            The space of ``points``.
        jacobian_space : {"index", "world"}, optional
            The axes of the Jacobian; default ``space``.
        hessian_space : {"index", "world"}, optional
            The axes of the Hessian, per voxel² or per length unit²; default ``jacobian_space``.
        device : {"cpu", "cuda", "auto"}, default ``"cpu"``
            Where the kernels run.
        dims : str or sequence of str, optional
            Names of the points' leading dims.

        Returns
        -------
        xarray.Dataset
            The variables of :meth:`sample_grad` plus ``self.name + "_hessian"`` (dims ``+ (axis, axis2)``).

        See Also
        --------
        vdbflow.sample_hessian : the full description, with an example, and what it raises.
        """
        from vdbflow.ops.hessian import sample_hessian

        return sample_hessian(self, points, mode, space, jacobian_space, hessian_space, device=device, dims=dims)

    def sample_arrays(self, request: Any, points: Any) -> dict[str, Any]:
        """Each output of a :class:`~vdbflow.ops.request.SampleRequest` at points (N, 3), as arrays
        on the request's device: the array-level door every volume-like object has."""
        from vdbflow.ops.sampling import sample_arrays

        return sample_arrays(self, request, points)

    def stencil_inside(self, points: Any, mode: str = "linear", space: str = "world", tiles: Any = None) -> np.ndarray:
        """(N,) bool: points whose ``mode`` stencil reads only active voxels (or ``tiles``, by default unless a
        level set's), mixing in no background; see :func:`vdbflow.ops.coverage.stencil_inside`."""
        from vdbflow.ops.coverage import stencil_inside

        return stencil_inside(self, points, mode, space, tiles)

    def to_dataset(self) -> xr.Dataset:
        """This volume as an xarray Dataset: leaves, active-voxel values with i, j, k coordinates,
        tiles; see :func:`vdbflow.io.volumes.to_dataset`."""
        from vdbflow.io.volumes import to_dataset

        return to_dataset(self)

    def to_zarr(self, path: str, *, overwrite: bool = False) -> None:
        """Write this volume to a Zarr store (read back with :func:`vdbflow.open_zarr`)."""
        from vdbflow.io.volumes import to_zarr

        to_zarr(self, path, overwrite=overwrite)

    def to_nvdb(self, path: str, name: str | None = None, codec: str = "none", version: str | None = None) -> None:
        """Write this volume as a NanoVDB value grid (``codec``: none, zip or blosc; ``version``: see
        :func:`vdbflow.save`); index-layout volumes are written with their values spread over whole leaves."""
        from vdbflow.io.nanovdb import save

        save(path, {name or self.name: self}, codec=codec, version=version)

    def __repr__(self) -> str:
        layout = "index" if self.index_layout else "per-leaf"
        return (
            f"<vdbflow.Volume {self.name!r}: {self.value_type.name}, {layout} layout, {self.leaf_count} leaves, "
            f"{self.active_voxel_count} active voxels, {self.topology.tiles_described}, voxel size "
            f"{np.round(self.voxel_size, 6).tolist()}>"
        )
