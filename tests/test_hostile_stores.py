"""Hostile and broken Zarr volume stores, metadata and time records: a vdbflow error (or the record
ignored), never a fill value standing in, a hang, a raw exception or memory for what is not there."""

import errno
import json
import os
import shutil
import tracemalloc

import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow import VolumeError
from vdbflow.io import nanovdb
from vdbflow.io.nanovdb import metadata
from vdbflow.io.time_record import TIME_RECORD, record_time


@pytest.fixture
def vol(rng):
    ijk = np.argwhere(rng.random((12, 12, 12)) < 0.4) - 3
    tiles = (np.array([[64, 0, 0]]), np.array([8]), rng.standard_normal((1, 3)))
    v = vdbflow.Volume.from_voxels(
        ijk, rng.standard_normal((len(ijk), 3)).astype(np.float32), background=-1.0, tiles=tiles, name="velocity"
    )
    v.units, v.length_units = "m/s", "m"
    return v


@pytest.fixture
def store(vol, tmp_path):
    path = tmp_path / "v.zarr"
    vol.to_zarr(path)
    return path


def edit_zarray(store, array, **changes):
    meta = json.loads((store / array / ".zarray").read_text())
    meta.update(changes)
    (store / array / ".zarray").write_text(json.dumps(meta))


def edit_attrs(store, **changes):
    attrs = json.loads((store / ".zattrs").read_text())
    attrs.update(changes)
    (store / ".zattrs").write_text(json.dumps(attrs))


def refused(store, match):
    with pytest.raises(VolumeError, match=match):
        vdbflow.open_zarr(store)
    with pytest.raises(VolumeError, match=match):
        vdbflow.open(store)


def test_an_intact_store_still_opens(vol, store):
    back = vdbflow.open(store)
    np.testing.assert_array_equal(back.active_values(), vol.active_values())
    np.testing.assert_array_equal(back.background_values, vol.background_values)
    np.testing.assert_array_equal(back.tile_values, vol.tile_values)
    assert (back.units, back.length_units, back.component_names) == ("m/s", "m", ("x", "y", "z"))


@pytest.mark.parametrize("array, key", [("values", "0.0"), ("background", "0"), ("masks", "0.0"), ("channel", "0")])
def test_a_missing_chunk_is_refused_not_filled(store, array, key):
    (store / array / key).unlink()
    refused(store, f"expected chunk {key} of array {array} at .*, found none")


def test_a_volume_of_fill_values_keeps_every_chunk(vol, tmp_path):
    """Zarr skips chunks equal to the fill value (NaN): to_zarr writes them, so that they can be required."""
    nan = vol.topology.with_data(np.full((vol.active_voxel_count, 3), np.nan, np.float32), np.nan)
    nan.to_zarr(tmp_path / "nan.zarr")
    assert (tmp_path / "nan.zarr" / "values" / "0.0").is_file()
    assert np.isnan(vdbflow.open_zarr(tmp_path / "nan.zarr").active_values()).all()


def declare_voxels(store, n, leaves, chunk=1 << 20):
    """Declare ``n`` voxels on ``leaves`` leaves, all in the store's existing chunk files' sizes."""
    edit_zarray(store, "values", shape=[n, 3], chunks=[chunk, 3])
    for axis in "ijk":
        edit_zarray(store, axis, shape=[n], chunks=[chunk])
    edit_zarray(store, "masks", shape=[leaves, 8], chunks=[chunk, 8])
    edit_zarray(store, "leaf_origins", shape=[leaves, 3], chunks=[chunk, 3])


def refused_without_memory(store, match):
    tracemalloc.start()
    try:
        refused(store, match)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20  # a declared 600 MB of values is never allocated


def test_declared_shapes_that_disagree_are_refused_before_reading(store):
    edit_zarray(store, "values", shape=[50_000_000, 3], chunks=[1 << 20, 3])
    refused_without_memory(store, r"expected arrays of shapes .* for values of shape \(50000000, 3\)")


def test_declared_voxels_beyond_the_chunks_present_are_refused_before_reading(store):
    declare_voxels(store, 50_000_000, 97_657)
    refused_without_memory(store, "expected chunk 1.0 of array values at .*, found none")


def test_declared_voxels_beyond_what_the_bytes_can_hold_are_refused_before_reading(store):
    declare_voxels(store, 50_000_000, 97_657)
    for array, width in (("values", ".0"), ("masks", ".0"), ("leaf_origins", ".0"), ("i", ""), ("j", ""), ("k", "")):
        for c in range(1, 48):
            (store / array / f"{c}{width}").write_bytes(b"x")
    refused_without_memory(store, "decoded bytes per stored byte")


def test_values_that_do_not_match_the_masks_are_refused_before_the_values_are_read(vol, store):
    n = vol.active_voxel_count - 1
    edit_zarray(store, "values", shape=[n, 3], chunks=[n, 3])
    for axis in "ijk":
        edit_zarray(store, axis, shape=[n], chunks=[n])
    refused(store, rf"expected one value row per active voxel \({n + 1}, set in the masks\), got {n}")


@pytest.mark.parametrize(
    "array, shape, chunks",
    [("background", [4], [4]), ("tile_values", [1, 2], [1, 2]), ("channel", [2], [2]), ("tile_sizes", [2], [2])],
)
def test_arrays_of_mismatched_shapes_are_refused(store, array, shape, chunks):
    edit_zarray(store, array, shape=shape, chunks=chunks)
    refused(store, f"expected arrays of shapes .* got {{'{array}': \\({shape[0]}")


def test_a_chunk_linked_to_dev_zero_is_refused(store):
    key = store / "values" / "0.0"
    key.unlink()
    key.symlink_to("/dev/zero")
    refused(store, "expected chunk .*0.0 as a regular file, found a symbolic link")


def test_a_fifo_chunk_is_refused_without_blocking(store):
    key = store / "values" / "0.0"
    key.unlink()
    os.mkfifo(key)
    refused(store, "expected chunk .*0.0 as a regular file, found a FIFO")


def test_a_directory_where_a_chunk_should_be_is_refused(store):
    key = store / "background" / "0"
    key.unlink()
    key.mkdir()
    refused(store, "expected chunk .*0 as a regular file, found a directory")


def test_a_chunk_larger_than_its_chunk_can_encode_to_is_refused(store):
    with open(store / "values" / "0.0", "r+b") as f:
        f.truncate(1 << 30)  # sparse: no disk used
    refused(store, r"expected chunk .*0.0 of at most \d+ bytes .*, found 1073741824")


def test_a_linked_array_directory_is_refused(store, tmp_path):
    shutil.move(store / "masks", tmp_path / "masks")
    (store / "masks").symlink_to(tmp_path / "masks")
    refused(store, "expected array masks as a directory at .*, found a symbolic link")


def test_corrupt_chunks_are_volume_errors(store):
    key = store / "values" / "0.0"
    raw = bytearray(key.read_bytes())
    raw[16:] = np.random.default_rng(0).integers(0, 256, len(raw) - 16, np.uint8).tobytes()
    key.write_bytes(bytes(raw))
    refused(store, "expected chunk .*0.0 to decode to .* found error during blosc decompression")
    key.write_bytes(bytes(raw[:100]))
    refused(store, "expected chunk .*0.0 to decode to .* found a blosc header of")
    key.write_bytes(b"")
    refused(store, "found 0 bytes, less than a blosc header")


def test_a_chunk_of_another_dtype_or_shape_is_a_volume_error(store):
    edit_zarray(store, "values", dtype="<f8")
    refused(store, r"expected chunk .*0.0 to decode to .* float64 .* found a blosc header of")


def test_corrupt_string_chunks_are_volume_errors(store):
    key = store / "channel" / "0"
    edit_zarray(store, "channel", compressor=None)
    key.write_bytes(b"\xff\xff\xff\x7f")  # 2^31 strings claimed
    refused(store, "expected chunk .*channel/0 to decode to .* found a string count other than the chunk's 3")
    key.write_bytes(b"\x03\x00\x00\x00\x01\x00\x00\x00\xff")
    refused(store, "expected chunk .*channel/0 to decode to")


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"chunks": [0, 3]}, r"expected the chunks in .* of integers in \[1, 2\^53\), found \[0, 3\]"),
        ({"chunks": [3]}, "expected chunks of 2 dimensions"),
        ({"shape": [-1, 3]}, "expected the shape in .* of integers"),
        ({"shape": "big"}, "expected the shape in .* as a list"),
        ({"dtype": "V8"}, "expected a numeric dtype or '|O'"),
        ({"dtype": [["a", "<f4"]]}, "expected a numeric dtype or '|O'"),
        ({"filters": [{"id": "pickle"}]}, "expected filters none for dtype <f4"),
        ({"compressor": {"id": "zlib"}}, "expected compressor blosc or none"),
        ({"order": "Z"}, "expected order C or F"),
        ({"zarr_format": 3}, "zarr_format 2"),
        ({"chunks": [1 << 40, 3]}, "expected chunks of at most"),
    ],
)
def test_bad_array_metadata_is_a_volume_error(store, changes, match):
    edit_zarray(store, "values", **changes)
    refused(store, match)


def test_a_pickle_filter_on_strings_never_runs(store):
    edit_zarray(store, "channel", filters=[{"id": "pickle"}])
    refused(store, r"expected filters \[vlen-utf8\] for dtype \|O")


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"a": ' * 5000 + "1" + "}" * 5000, "[1, 2, 3]", "\xff"],
    ids=["list", "obj", "array", "utf8"],
)
def test_hostile_store_attrs_are_volume_errors(store, text):
    (store / ".zattrs").write_bytes(text.encode("latin-1"))
    with pytest.raises(VolumeError):
        vdbflow.open_zarr(store)
    with pytest.raises(VolumeError):
        vdbflow.open(store)


def test_store_attrs_behind_a_fifo_are_refused(store):
    (store / ".zattrs").unlink()
    os.mkfifo(store / ".zattrs")
    refused(store, r"\.zattrs as a regular file, found a FIFO")


@pytest.mark.parametrize(
    "matrix",
    [
        "[" * 10_000 + "]" * 10_000,
        [[[[[[1.0]]]]]] * 16,
        [10**400] * 16,
        {"a": 1},
        None,
        [1.0] * 15 + ["x"],
        [[1.0, 2.0], [3.0]],
        json.dumps([1.0] * 16)[:-1],
    ],
    ids=["deep-text", "nested", "overflow", "dict", "none", "string", "ragged", "truncated"],
)
def test_a_hostile_index_to_world_is_a_volume_error(store, matrix):
    attrs = json.loads((store / ".zattrs").read_text())
    attrs["index_to_world"] = "__M__"
    (store / ".zattrs").write_text(json.dumps(attrs).replace('"__M__"', json.dumps(matrix)))
    refused(store, "expected an index_to_world attr holding a 4x4 matrix")


@pytest.mark.parametrize("key", ["volume_units", "length_units"])
def test_units_attrs_that_are_not_strings_are_volume_errors(store, key):
    edit_attrs(store, **{key: {"a": [1]}})
    refused(store, f"expected the {key} attr to be a string, got dict")


def test_a_format_3_store_is_refused_clearly(vol, tmp_path):
    vol.to_dataset().to_zarr(tmp_path / "v3.zarr", zarr_format=3, consolidated=False)
    refused(tmp_path / "v3.zarr", "expected a Zarr format 2 store .* found a format 3 store")


def test_a_failed_to_zarr_leaves_nothing_and_keeps_the_earlier_store(vol, store, tmp_path, monkeypatch):
    real = xr.Dataset.to_zarr

    def full_disk(self, path, *args, **kwargs):
        real(self.isel(voxel=slice(0, 5)), path, *args, **kwargs)  # half a store, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(xr.Dataset, "to_zarr", full_disk)
    with pytest.raises(vdbflow.errors.WriteError, match="No space left"):
        vol.to_zarr(tmp_path / "new.zarr")
    assert not (tmp_path / "new.zarr").exists()
    with pytest.raises(vdbflow.errors.WriteError, match="No space left"):
        vol.to_zarr(store, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == ["v.zarr"]  # no temporary directory left either
    np.testing.assert_array_equal(vdbflow.open_zarr(store).active_values(), vol.active_values())


def test_to_zarr_replaces_only_stores(vol, store, tmp_path):
    other = vol.topology.with_data(np.zeros((vol.active_voxel_count, 3), np.float32))
    other.to_zarr(store, overwrite=True)
    assert not vdbflow.open_zarr(store).active_values().any()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("x")
    with pytest.raises(vdbflow.WriteError, match="a directory of other files, not a Zarr store"):
        vol.to_zarr(tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "x"
    (tmp_path / "link.zarr").symlink_to(store)
    with pytest.raises(vdbflow.WriteError, match="a file or link"):
        vol.to_zarr(tmp_path / "link.zarr", overwrite=True)
    with pytest.raises(vdbflow.WriteError, match="overwrite=True replaces"):
        vol.to_zarr(store)
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []


@pytest.mark.parametrize(
    "data",
    [b"[" * 100_000, b'{"units": ' * 3000 + b'"m"' + b"}" * 3000, b"\xff" * 64],
    ids=["deep-list", "deep-object", "not-utf8"],
)
def test_a_hostile_metadata_record_is_ignored_with_a_warning(vol, tmp_path, data):
    path = tmp_path / "v.nvdb"
    vol.units = "m" * len(data)  # a record as long as the hostile one, to overwrite in place
    vdbflow.save(path, {"velocity": vol})
    raw = bytearray(path.read_bytes())
    record = metadata.metadata_record(vol).data
    at = raw.find(record)
    raw[at : at + len(record)] = data.ljust(len(record), b" ")[: len(record)]
    with pytest.warns(UserWarning, match="vdbflow.metadata blind data of the grid at byte .* ignored"):
        back = vdbflow.open(bytes(raw), checksum=False)
    assert back.units is None
    np.testing.assert_array_equal(back.active_values(), vol.active_values())


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 100_000,
        b'{"time": ' + b"[" * 5000 + b"1" + b"]" * 5000 + b"}",
        b'{"time": 1' + b"0" * 400 + b"}",
        b'{"time": 1e400}',
        b'{"time": NaN}',
        b'{"time": "soon"}',
        b"[1]",
        b'{"time": 1' + b"0" * 5000 + b"}",
    ],
    ids=["deep", "deep-time", "overflow", "inf", "nan", "text", "list", "digits"],
)
def test_a_hostile_time_record_is_no_time(data):
    assert record_time([nanovdb.BlindData(TIME_RECORD, 0, 0, 0, 1, data)]) is None
    assert record_time([nanovdb.BlindData(TIME_RECORD, 0, 0, 0, 1, b'{"time": 2.5}')]) == 2.5


# -- issue 40 (its campaign): a store renamed over while it is read -------------------------------------


def test_a_store_replaced_while_it_is_read_is_refused_never_mixed(tmp_path, monkeypatch):
    """A writer that replaces the whole store (as to_zarr does) between two chunk reads: the reader
    refuses (its files are read by path), and then reads the new store whole."""
    from vdbflow.io import zarr_v2
    from vdbflow.io.volumes import to_zarr

    ijk = np.argwhere(np.ones((12, 10, 9), bool))
    old = vdbflow.Volume.from_voxels(ijk, ijk[:, 0].astype(np.float32), background=-1.0)
    new = vdbflow.Volume.from_voxels(ijk, -ijk[:, 0].astype(np.float32) - 5, background=-1.0)
    path, other = tmp_path / "v.zarr", tmp_path / "new.zarr"
    to_zarr(old, path, chunk=64)
    to_zarr(new, other, chunk=64)
    real, calls = zarr_v2.read_regular, []

    def replaced_on_the_fourth_read(p, limit, what):
        calls.append(p)
        if len(calls) == 4:
            os.rename(path, tmp_path / "old-store")
            os.rename(other, path)
        return real(p, limit, what)

    monkeypatch.setattr(zarr_v2, "read_regular", replaced_on_the_fourth_read)
    with pytest.raises(vdbflow.VolumeError, match="replaced meanwhile"):
        vdbflow.open_zarr(path)
    monkeypatch.setattr(zarr_v2, "read_regular", real)
    np.testing.assert_array_equal(vdbflow.open_zarr(path).active_values(), new.active_values())
