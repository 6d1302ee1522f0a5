"""xarray's door, ``xr.open_dataset(path, engine="vdbflow")``: the dense arrays against references built
here from the voxels a volume was made of (or, for files made elsewhere, from the voxels and tiles
``vdbflow.open`` reads whole), the mask against the active set, the coordinates against the transform,
leaf-aligned chunks, laziness (the reads counted), guess_can_open by magic, and bad input."""

from __future__ import annotations

import importlib.metadata
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow.errors import NanoVDBError, OpenVDBError, VolumeError
from vdbflow.io import grid_ref
from vdbflow.io.xarray_backend import VdbflowBackendEntrypoint, aligned_chunks, can_open, leaf_chunk_sizes

ENGINE = VdbflowBackendEntrypoint  # xarray takes the class itself; the entry point is tested below
REPO = Path(__file__).resolve().parents[1]
OPENVDB = REPO / "tests" / "data" / "openvdb"


def reference(ijk, values, background, lo, hi, tiles=None):
    """Dense values (X, Y, Z[, C]) and mask of the box [lo, hi]: the background, the tiles' values over
    their cubes, the voxels' own values, placed from the lists a volume was made of."""
    lo, hi = np.asarray(lo), np.asarray(hi)
    values = np.asarray(values)
    C = 1 if values.ndim == 1 else values.shape[1]
    dense = np.empty((*(hi - lo + 1), C), values.dtype)
    dense[...] = np.asarray(background).reshape(-1)
    mask = np.zeros(tuple(hi - lo + 1), bool)
    for origin, size, value in zip(*(tiles or ((), (), ())), strict=True):
        a = np.maximum(origin, lo)
        b = np.minimum(np.asarray(origin) + size - 1, hi)
        if np.all(a <= b):
            cut = tuple(slice(a[d] - lo[d], b[d] - lo[d] + 1) for d in range(3))
            dense[cut] = value
            mask[cut] = True
    ijk = np.asarray(ijk).reshape(-1, 3)
    inside = np.all((ijk >= lo) & (ijk <= hi), axis=1)
    at = tuple((ijk[inside] - lo).T)
    dense[at] = values.reshape(len(ijk), C)[inside]
    mask[at] = True
    return (dense[..., 0] if C == 1 else dense), mask


def sparse(rng, C=1, dtype=np.float32, shift=(-13, 5, -40), tiles=None, **kwargs):
    """A per-leaf volume of random voxels (a third of a 30 x 20 x 25 box, moved by ``shift``)."""
    ijk = np.argwhere(rng.random((30, 20, 25)) < 0.3) + np.array(shift)
    vals = (rng.standard_normal((len(ijk), C)) * 10).astype(dtype)
    vals = vals[:, 0] if C == 1 else vals
    vol = vdbflow.Volume.from_voxels(ijk, vals, background=kwargs.pop("background", 0.25), tiles=tiles, **kwargs)
    return vol, ijk, vals


def box_of(ds):
    return np.asarray(ds.attrs["index_bbox"]).reshape(2, 3)


@pytest.fixture
def reads(monkeypatch):
    """Every read of the grids' boxes through vdbflow.open: (bbox, leaves given, leaves read)."""
    seen = []
    real = grid_ref.open_volume

    def counting(path, grid=None, **kwargs):
        vol = real(path, grid, **kwargs)
        seen.append((kwargs.get("bbox"), kwargs.get("leaves"), vol.leaf_count if hasattr(vol, "leaf_count") else 0))
        return vol

    monkeypatch.setattr(grid_ref, "open_volume", counting)
    return seen


def test_a_float_grid_equals_its_voxels_with_the_background_where_inactive(tmp_path, rng):
    vol, ijk, vals = sparse(rng, voxel_size=(0.5, 0.25, 2.0), origin=(1.0, -3.0, 7.5), name="density", units="kg/m^3")
    vol.length_units = "m"
    vol.to_nvdb(tmp_path / "d.nvdb")
    ds = xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE)
    lo, hi = ijk.min(axis=0), ijk.max(axis=0)
    np.testing.assert_array_equal(box_of(ds), [lo, hi])  # the box of the active voxels
    want, mask = reference(ijk, vals, 0.25, lo, hi)
    assert ds["density"].dims == ("x", "y", "z") and ds["density"].dtype == np.float32
    np.testing.assert_array_equal(ds["density"].values, want)
    np.testing.assert_array_equal(ds["density_active"].values, mask)
    assert ds["density_active"].values.sum() == len(ijk)
    # coordinates: the transform applied to the index of each voxel centre, along each axis
    for dim, index, axis in (("x", "i", 0), ("y", "j", 1), ("z", "k", 2)):
        np.testing.assert_array_equal(ds[index].values, np.arange(lo[axis], hi[axis] + 1))
        ijk_axis = np.zeros((hi[axis] - lo[axis] + 1, 3))
        ijk_axis[:, axis] = ds[index].values
        np.testing.assert_array_equal(ds[dim].values, vol.transform.apply(ijk_axis)[:, axis])
        assert ds[dim].attrs["units"] == "m"
    assert ds["density"].attrs["units"] == "kg/m^3" and ds["density"].attrs["background"] == 0.25
    assert ds.attrs["value_type"] == "float32" and ds.attrs["index_to_world"] == vol.index_to_world.ravel().tolist()


def test_chunks_are_whole_leaves_and_dask_computes_the_same(tmp_path, rng):
    vol, ijk, vals = sparse(rng, shift=(-13, 5, -40))
    vol.to_nvdb(tmp_path / "d.nvdb")
    ds = xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, chunks={}, leaf_chunks={"x": 16, "y": 20})
    lo, hi = box_of(ds)
    assert ds["value"].chunks is not None
    for axis, (dim, size) in enumerate((("x", 16), ("y", 24), ("z", 64))):  # 20 -> 24; z: the default 64
        sizes = ds.chunksizes[dim]
        assert sum(sizes) == hi[axis] - lo[axis] + 1
        inner = lo[axis] + np.cumsum(sizes)[:-1]  # each chunk boundary in index space
        assert np.all(inner % size == 0) and np.all(inner % 8 == 0), (dim, sizes)
        assert max(sizes) <= size
    want, mask = reference(ijk, vals, 0.25, lo, hi)
    np.testing.assert_array_equal(ds["value"].values, want)
    np.testing.assert_array_equal(ds["value_active"].values, mask)
    shipped = pickle.loads(pickle.dumps(ds))  # as the tasks go to a distributed worker
    np.testing.assert_array_equal(shipped["value"].values, want)


def test_leaf_chunk_sizes_round_up_to_whole_leaves():
    assert leaf_chunk_sizes(20, "xyz") == {"x": 24, "y": 24, "z": 24}
    assert leaf_chunk_sizes({"z": 1}, "zyx") == {"z": 8, "y": 64, "x": 64}
    assert aligned_chunks(-13, 30, 16) == (13, 16, 1)
    assert aligned_chunks(16, 32, 16) == (16, 16)
    assert aligned_chunks(3, 2, 64) == (2,)
    for bad in (0, -8, 2.5, True, {"w": 8}):
        with pytest.raises(VolumeError, match="leaf_chunks"):
            leaf_chunk_sizes(bad, "xyz")


def test_a_vec3_grid_has_a_component_dim_named_by_the_volume_and_the_zyx_order(tmp_path, rng):
    vol, ijk, vals = sparse(rng, C=3, name="velocity", component_names=("u", "v", "w"), units="m/s")
    vol.to_nvdb(tmp_path / "v.nvdb")
    xyz = xr.open_dataset(tmp_path / "v.nvdb", engine=ENGINE, chunks={})
    zyx = xr.open_dataset(tmp_path / "v.nvdb", engine=ENGINE, chunks={}, dim_order="zyx")
    lo, hi = box_of(xyz)
    want, mask = reference(ijk, vals, 0.25, lo, hi)
    assert xyz["velocity"].dims == ("x", "y", "z", "component")
    assert zyx["velocity"].dims == ("z", "y", "x", "component") and zyx["velocity_active"].dims == ("z", "y", "x")
    assert list(xyz["component"].values) == ["u", "v", "w"] and xyz["velocity"].attrs["units"] == "m/s"
    np.testing.assert_array_equal(xyz["velocity"].values, want)
    np.testing.assert_array_equal(zyx["velocity"].values, want.transpose(2, 1, 0, 3))
    np.testing.assert_array_equal(zyx["velocity_active"].values, mask.transpose(2, 1, 0))
    np.testing.assert_array_equal(zyx["x"].values, xyz["x"].values)
    assert xyz["velocity"].attrs["background"] == [0.25, 0.25, 0.25]
    # label-based selection, one component, a strided and a reversed slice: xarray's indexing, read lazily
    got = zyx["velocity"].sel(component="v").isel(z=slice(None, None, -3), y=4, x=slice(2, 20, 5)).values
    np.testing.assert_array_equal(got, want[2:20:5, 4, ::-3, 1].T)


def test_a_subset_bbox_reaches_past_the_data_into_the_background(tmp_path, rng):
    vol, ijk, vals = sparse(rng, dtype=np.int32, background=-7, voxel_size=2.0)
    vol.to_nvdb(tmp_path / "i.nvdb")
    lo, hi = np.array([-20, 10, -30]), np.array([-2, 40, -25])  # past the data's low x and high y faces
    ds = xr.open_dataset(tmp_path / "i.nvdb", engine=ENGINE, bbox=(lo, hi), chunks={}, leaf_chunks=8)
    want, mask = reference(ijk, vals, -7, lo, hi)
    assert ds["value"].dtype == np.int32 and ds["value"].shape == tuple(hi - lo + 1)
    np.testing.assert_array_equal(ds["value"].values, want)
    np.testing.assert_array_equal(ds["value_active"].values, mask)
    assert (~mask).any() and mask.any()
    np.testing.assert_array_equal(ds["x"].values, 2.0 * np.arange(lo[0], hi[0] + 1))


def test_tiles_fill_their_cubes_in_values_and_mask(tmp_path, rng):
    tiles = (np.array([[16, 8, -48], [-128, -128, 0]]), np.array([8, 128]), np.array([3.5, -1.5], np.float32))
    vol, ijk, vals = sparse(rng, tiles=tiles)
    vol.to_nvdb(tmp_path / "t.nvdb")
    lo, hi = np.array([-20, -5, -50]), np.array([30, 30, 10])
    ds = xr.open_dataset(tmp_path / "t.nvdb", engine=ENGINE, bbox=(lo, hi), chunks={}, leaf_chunks=16)
    want, mask = reference(ijk, vals, 0.25, lo, hi, tiles)
    np.testing.assert_array_equal(ds["value"].values, want)
    np.testing.assert_array_equal(ds["value_active"].values, mask)
    whole = xr.open_dataset(tmp_path / "t.nvdb", engine=ENGINE)  # the default box takes in the tiles
    np.testing.assert_array_equal(box_of(whole), vol.index_bbox)


def test_an_index_layout_store_and_an_onindex_grid(tmp_path, rng):
    ijk = np.argwhere(rng.random((20, 12, 30)) < 0.2) - 9
    vals = rng.standard_normal(len(ijk))
    topo = vdbflow.Volume.from_active(ijk, voxel_size=0.1)
    order = np.lexsort(ijk.T[::-1])  # the values follow active_voxels(): match them by coordinate
    by_voxel = dict(zip(map(tuple, ijk[order]), vals[order], strict=True))
    vol = topo.with_data(np.array([by_voxel[tuple(p)] for p in topo.active_voxels()]), 1.0, name="phi")
    assert vol.index_layout
    vol.to_zarr(tmp_path / "phi.zarr")
    ds = xr.open_dataset(tmp_path / "phi.zarr", engine=ENGINE, chunks={}, leaf_chunks=8)
    lo, hi = box_of(ds)
    want, mask = reference(ijk, vals, 1.0, lo, hi)
    np.testing.assert_array_equal(ds["phi"].values, want)
    np.testing.assert_array_equal(ds["phi_active"].values, mask)
    topo.to_nvdb(tmp_path / "index.nvdb")  # an OnIndex grid: no values of its own, the mask alone
    onindex = xr.open_dataset(tmp_path / "index.nvdb", engine=ENGINE, chunks={}, leaf_chunks=8)
    assert list(onindex.data_vars) == ["index_active"]
    np.testing.assert_array_equal(onindex["index_active"].values, mask)


def test_opening_reads_no_leaf_and_a_chunk_reads_only_its_leaves(tmp_path, rng, reads):
    vol, ijk, vals = sparse(rng, shift=(0, 0, 0))
    vol.to_nvdb(tmp_path / "d.nvdb")
    ds = xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, chunks={}, leaf_chunks=16)
    assert reads and all(leaves_read == 0 for _, _, leaves_read in reads)  # headers and tiles only
    opened = len(reads)
    part = ds["value"].isel(x=slice(0, 10)).values  # in the chunks of x in [0, 16) (Dask reads x 0..9)
    boxes = [(np.asarray(b), n) for b, _, n in reads[opened:]]
    assert len(boxes) == 4  # the chunks of y in [0, 16), [16, 20) and z in [0, 16), [16, 25)
    assert all(b[0][0] == 0 and b[1][0] <= 15 for b, _ in boxes)
    origins = vol.topology.leaf_origins
    assert sum(n for _, n in boxes) == int(np.sum(origins[:, 0] <= 9))  # each leaf they meet, once
    lo, hi = box_of(ds)
    np.testing.assert_array_equal(part, reference(ijk, vals, 0.25, lo, hi)[0][:10])


def test_the_boxes_of_a_grid_read_whole_come_from_one_read(tmp_path, rng, reads):
    vol, ijk, vals = sparse(rng)
    vol.to_nvdb(tmp_path / "z.nvdb", codec="zip")  # vdbflow decompresses a zip grid whole
    ds = xr.open_dataset(tmp_path / "z.nvdb", engine=ENGINE, chunks={}, leaf_chunks=8)
    lo, hi = box_of(ds)
    np.testing.assert_array_equal(ds["value"].values, reference(ijk, vals, 0.25, lo, hi)[0])
    assert [bbox for bbox, _, _ in reads] == [None]  # one read of the whole grid for every chunk


def whole_reference(vol, lo, hi):
    """The dense box of a volume (or topology) read whole by ``vdbflow.open``, from its voxels and tiles."""
    topo = vol.topology if isinstance(vol, vdbflow.Volume) else vol
    ijk = topo.active_voxels()
    if not isinstance(vol, vdbflow.Volume):
        return None, reference(
            ijk, np.zeros(len(ijk)), 0.0, lo, hi, (topo.tile_origins, topo.tile_sizes, [0] * topo.tile_count)
        )[1]
    tiles = (topo.tile_origins.astype(np.int64), topo.tile_sizes, vol.tile_values)
    return reference(ijk, vol.active_values(), vol.background_values, lo, hi, tiles)


@pytest.mark.parametrize(
    ("name", "grid", "bbox"),
    [
        ("active.vdb", "density", None),  # tiles, units
        ("active.vdb", "sphere", ((6, 3, 5), (12, 13, 20))),
        ("grids.vdb", "half", None),  # blosc, half floats
        ("grids.vdb", "mask", None),  # a bool grid: the mask alone
    ],
)
def test_openvdb_files_read_by_boxes(name, grid, bbox):
    path = OPENVDB / name
    vol = vdbflow.open(path, grid)
    ds = xr.open_dataset(path, engine=ENGINE, grid=grid, bbox=bbox, chunks={}, leaf_chunks=32)
    lo, hi = box_of(ds)
    np.testing.assert_array_equal([lo, hi], vol.index_bbox if bbox is None else bbox)
    want, mask = whole_reference(vol, lo, hi)
    if want is None:
        assert list(ds.data_vars) == [f"{grid}_active"]
    else:
        np.testing.assert_array_equal(ds[grid].values, want)
    np.testing.assert_array_equal(ds[f"{grid}_active"].values, mask)
    if grid == "density":
        assert vol.tile_count and ds["density"].attrs["units"] == "kg/m^3"


def warp_asset(name):
    warp = pytest.importorskip("warp")
    return os.path.join(os.path.dirname(warp.__file__), name)


def test_warp_assets_rocks_subset_and_a_vec_grid():
    rocks = warp_asset("examples/assets/rocks.nvdb")  # a level set with tiles inside
    vol = vdbflow.open(rocks)
    assert vol.tile_count
    box = ((-40, -5, -30), (20, 30, 40))
    ds = xr.open_dataset(rocks, engine=ENGINE, bbox=box, chunks={})
    want, mask = whole_reference(vol, *np.array(box))
    np.testing.assert_array_equal(ds["surface"].values, want)
    np.testing.assert_array_equal(ds["surface_active"].values, mask)
    vec = warp_asset("tests/assets/test_vec_grid.nvdb")  # a vec3f grid without a name
    vvol = vdbflow.open(vec)
    vds = xr.open_dataset(vec, engine=ENGINE, chunks={}, leaf_chunks=8)
    want, mask = whole_reference(vvol, *vvol.index_bbox)
    assert list(vds.data_vars) == ["value", "value_active"] and vds["value"].shape[-1] == 3
    np.testing.assert_array_equal(vds["value"].values, want)
    np.testing.assert_array_equal(vds["value_active"].values, mask)


def test_a_rotated_transform_is_refused_naming_it(tmp_path, rng):
    c, s = np.cos(0.3), np.sin(0.3)
    matrix = np.array([[c, -s, 0, 1], [s, c, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    vol, _, _ = sparse(rng, transform=matrix)
    vol.to_nvdb(tmp_path / "r.nvdb")
    with pytest.raises(VolumeError, match=r"axis-aligned.*Transform\(\[\["):
        xr.open_dataset(tmp_path / "r.nvdb", engine=ENGINE)
    with pytest.raises(VolumeError, match=r"grid 'vel' in .*active\.vdb, got Transform"):  # OpenVDB's shear
        xr.open_dataset(OPENVDB / "active.vdb", engine=ENGINE, grid="vel")
    torus = warp_asset("tests/assets/torus.nvdb")
    with pytest.raises(VolumeError, match="axis-aligned"):
        xr.open_dataset(torus, engine=ENGINE)


def test_bad_input_gets_vdbflows_errors(tmp_path, rng):
    vol, _, _ = sparse(rng, name="density")
    vol.to_nvdb(tmp_path / "d.nvdb")
    with pytest.raises(NanoVDBError, match="density"):
        xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, grid="pressure")
    with pytest.raises(NanoVDBError, match=r"grid index in \[0, 1\)"):
        xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, grid=3)
    with pytest.raises(OpenVDBError, match="sphere"):
        xr.open_dataset(OPENVDB / "active.vdb", engine=ENGINE, grid="nope")
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(tmp_path / "a.nc")
    with pytest.raises(NanoVDBError, match="NanoVDB file header"):
        xr.open_dataset(tmp_path / "a.nc", engine=ENGINE)
    (tmp_path / "folder").mkdir()
    with pytest.raises(VolumeError, match="without Zarr metadata"):
        xr.open_dataset(tmp_path / "folder", engine=ENGINE)
    for bbox, what in (
        (((0, 0), (1, 1)), "shape"),
        (((5, 0, 0), (1, 9, 9)), "lower bound"),
        (((0, 0, 0), (2**40,) * 3), "int32"),
    ):
        with pytest.raises(VolumeError, match=what):
            xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, bbox=bbox)
    with pytest.raises(VolumeError, match="voxels a side"):  # coordinates of 2**31 voxels are refused
        xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, bbox=((0, 0, -(2**30)), (9, 9, 2**30)))
    with pytest.raises(VolumeError, match="larger leaf_chunks"):  # 2**24 chunks of 64**3 voxels
        xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, bbox=((0, 0, 0), (2**14 - 1,) * 3))
    with pytest.raises(VolumeError, match="dim_order"):
        xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, dim_order="yxz")
    empty = vdbflow.Volume.from_voxels(np.zeros((0, 3)), np.zeros(0, np.float32))
    empty.to_nvdb(tmp_path / "empty.nvdb")
    with pytest.raises(VolumeError, match="empty grid: give its bbox"):
        xr.open_dataset(tmp_path / "empty.nvdb", engine=ENGINE)
    blank = xr.open_dataset(tmp_path / "empty.nvdb", engine=ENGINE, bbox=((0, 0, 0), (3, 3, 3)))
    assert not blank["value_active"].values.any() and np.all(blank["value"].values == 0)


def test_drop_variables_leaves_out_values_mask_and_coordinates(tmp_path, rng):
    vol, _, _ = sparse(rng, name="density")
    vol.to_nvdb(tmp_path / "d.nvdb")
    ds = xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, drop_variables=["density_active", "i", "j"])
    assert list(ds.data_vars) == ["density"] and "i" not in ds.coords and "k" in ds.coords
    only_mask = xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, drop_variables="density")
    assert list(only_mask.data_vars) == ["density_active"]
    named_k, _, _ = sparse(rng, name="k")  # a grid named as a coordinate: its values are "k_values"
    named_k.to_nvdb(tmp_path / "k.nvdb")
    k = xr.open_dataset(tmp_path / "k.nvdb", engine=ENGINE)
    assert list(k.data_vars) == ["k_values", "k_active"] and k.attrs["grid"] == "k" and k["k"].dims == ("z",)


def test_guess_can_open_by_magic_and_extension(tmp_path, rng):
    vol, _, _ = sparse(rng)
    vol.to_nvdb(tmp_path / "d.nvdb")
    (tmp_path / "d.nvdb").rename(tmp_path / "renamed.bin")  # the magic, whatever the suffix
    vol.to_zarr(tmp_path / "v.zarr")
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(tmp_path / "a.nc")
    (tmp_path / "fake.nvdb").write_bytes(b"not a NanoVDB file at all")
    backend = VdbflowBackendEntrypoint()
    assert backend.guess_can_open(tmp_path / "renamed.bin")
    assert backend.guess_can_open(str(OPENVDB / "grids.vdb"))
    assert backend.guess_can_open(tmp_path / "v.zarr")
    assert backend.guess_can_open("s3://bucket/volumes/smoke.nvdb")
    assert not backend.guess_can_open(tmp_path / "a.nc")
    assert not backend.guess_can_open(tmp_path / "fake.nvdb")
    assert not backend.guess_can_open(tmp_path)  # a directory that is no store
    assert not backend.guess_can_open(b"NanoVDB0")
    assert not can_open("s3://bucket/data.nc")
    # xarray itself picks the engine by guess_can_open (no engine= given): the netCDF engines take a.nc
    assert xr.open_dataset(tmp_path / "a.nc")["a"].values.tolist() == [0.0, 1.0, 2.0]
    assert "NanoVDB" in backend.description and "xarray.md" in backend.url
    assert {"grid", "bbox", "leaf_chunks", "dim_order", "storage_options"} <= set(backend.open_dataset_parameters)


def test_storage_options_are_passed_on_only_when_given(tmp_path, rng, monkeypatch, memory_fs):
    """A URL's storage_options reach every read of it (its Url carries them); none given, none passed."""
    import fsspec

    vol, _, _ = sparse(rng)
    vol.to_nvdb(tmp_path / "d.nvdb")
    url = f"{memory_fs}/d.nvdb"
    fsspec.filesystem("memory").pipe_file(url, (tmp_path / "d.nvdb").read_bytes())
    given = []
    real_open, real_list = grid_ref.open_volume, grid_ref.list_grids

    def open_with(path, grid=None, storage_options=None, **kwargs):
        given.append(storage_options)
        return real_open(path, grid, storage_options=storage_options, **kwargs)

    def list_with(path, storage_options=None):
        given.append(storage_options)
        return real_list(path, storage_options=storage_options)

    monkeypatch.setattr(grid_ref, "open_volume", open_with)
    monkeypatch.setattr(grid_ref, "list_grids", list_with)
    options = {"anon": True, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}  # memory:// ignores them
    ds = xr.open_dataset(url, engine=ENGINE, storage_options=options, chunks={})
    ds.load()
    assert given and all(o == options for o in given)
    given.clear()
    grid_ref.clear_cache()
    xr.open_dataset(url, engine=ENGINE).load()
    assert given and all(o is None for o in given)
    with pytest.raises(VolumeError, match="storage_options as a dict"):
        xr.open_dataset(tmp_path / "d.nvdb", engine=ENGINE, storage_options="anon")


def test_the_entry_point_makes_engine_vdbflow(tmp_path, rng, monkeypatch):
    """pyproject.toml declares the entry point; xarray finds it through importlib.metadata (in a checkout
    whose editable install predates it, through a dist-info made here from that declaration)."""
    text = (REPO / "pyproject.toml").read_text()
    section = re.search(r'^\[project\.entry-points\."xarray\.backends"\][^\n]*\n(.*?)(?:^\[|\Z)', text, re.S | re.M)
    assert section is not None
    declared = dict(re.findall(r'^(\w+) = "([^"]+)"', section.group(1), re.M))
    assert declared == {"vdbflow": "vdbflow.io.xarray_backend:VdbflowBackendEntrypoint"}
    if not [e for e in importlib.metadata.entry_points(group="xarray.backends") if e.name == "vdbflow"]:
        info = tmp_path / "vdbflow_entry_point_check-0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vdbflow-entry-point-check\nVersion: 0\n")
        (info / "entry_points.txt").write_text(f"[xarray.backends]\nvdbflow = {declared['vdbflow']}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
    xr.backends.plugins.list_engines.cache_clear()
    try:
        assert isinstance(xr.backends.list_engines()["vdbflow"], VdbflowBackendEntrypoint)
        vol, ijk, vals = sparse(rng)
        vol.to_nvdb(tmp_path / "d.nvdb")
        ds = xr.open_dataset(tmp_path / "d.nvdb", engine="vdbflow", chunks={})
        lo, hi = box_of(ds)
        np.testing.assert_array_equal(ds["value"].values, reference(ijk, vals, 0.25, lo, hi)[0])
        (tmp_path / "d.nvdb").rename(tmp_path / "grid.bin")
        guessed = xr.open_dataset(tmp_path / "grid.bin")  # no engine: xarray asks each one (the magic here)
        xr.testing.assert_identical(guessed.load(), ds.load())
    finally:
        xr.backends.plugins.list_engines.cache_clear()


def test_a_memory_url_reads_by_boxes_as_the_local_file(tmp_path, rng, memory_fs, reads):
    import fsspec

    vol, ijk, vals = sparse(rng, C=3, name="velocity", length_units="m")
    vol.to_nvdb(tmp_path / "v.nvdb")
    url = f"{memory_fs}/v.nvdb"
    fsspec.filesystem("memory").pipe_file(url, (tmp_path / "v.nvdb").read_bytes())
    remote = xr.open_dataset(url, engine=ENGINE, chunks={}, leaf_chunks=16)
    local = xr.open_dataset(tmp_path / "v.nvdb", engine=ENGINE, chunks={}, leaf_chunks=16)
    assert remote.chunks == local.chunks
    xr.testing.assert_identical(remote.load(), local.load())
    lo, hi = box_of(remote)
    np.testing.assert_array_equal(remote["velocity"].values, reference(ijk, vals, 0.25, lo, hi)[0])
    box_reads = [bbox for bbox, _, _ in reads if bbox is not None]
    assert len(box_reads) == 2 * len({tuple(map(tuple, b)) for b in box_reads})  # each box: the URL, the file


@pytest.mark.slow  # moto's S3 server, its credentials checked
def test_storage_options_reach_the_object_store(tmp_path, rng, s3):
    from vdbflow.errors import StorageError

    vol, ijk, vals = sparse(rng, name="density")
    vol.to_nvdb(tmp_path / "d.nvdb")
    url = f"s3://{s3.bucket()}/volumes/d.nvdb"
    s3.put(url, (tmp_path / "d.nvdb").read_bytes())
    with s3.checked_credentials() as options:  # the server checks every request's key from here on
        ds = xr.open_dataset(url, engine=ENGINE, storage_options=options, chunks={}, leaf_chunks=16)
        lo, hi = box_of(ds)
        np.testing.assert_array_equal(ds["density"].values, reference(ijk, vals, 0.25, lo, hi)[0])
        with pytest.raises(StorageError, match="volumes/d.nvdb"):  # the environment's key is refused
            xr.open_dataset(url, engine=ENGINE)


def test_a_box_opened_by_two_threads_at_once_is_read_once(tmp_path, rng, monkeypatch):
    """A Dataset's values and mask chunks of one box, computed at once by two threads, both missed the per-process
    cache and read the box twice (a fresh-clone .ci/run saw 37 box reads for 18 boxes of two files): the open
    is one thread's at a time, and the other gets what it read."""
    import threading
    import time

    vol, _, _ = sparse(rng)
    vol.to_nvdb(tmp_path / "d.nvdb")
    grid_ref.clear_cache()
    real, reads = grid_ref.open_volume, []

    def slow(path, grid=None, **kwargs):
        reads.append(kwargs.get("bbox"))
        time.sleep(0.2)  # both threads are inside the open before either finishes it
        return real(path, grid, **kwargs)

    monkeypatch.setattr(grid_ref, "open_volume", slow)
    box = grid_ref.GridRef.to(str(tmp_path / "d.nvdb"), None).box((0, 0, 0), (7, 7, 7))
    start, got = threading.Barrier(2), []

    def open_it():
        start.wait()
        got.append(box.open())

    threads = [threading.Thread(target=open_it) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    grid_ref.clear_cache()
    assert len(reads) == 1 and got[0] is got[1]
