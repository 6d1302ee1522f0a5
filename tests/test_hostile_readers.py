"""Readers under a hostile user and a faulty network (issue 49, rows 2, 5, 6, 8, 15, 16, 18, 19): a volume
store at a URL naming a pickle codec, a file renamed over under an open Dataset, strided selections of the
xarray backend (against NumPy's own strided slice of the dense reference), bad backend arguments, https
objects versioned by Last-Modified (a local HTTP server with byte ranges), absurd reported sizes, remote
.npy points with negative shapes, and ``leaf_values`` of a volume without leaves."""

from __future__ import annotations

import contextlib
import email.utils
import http.server
import json
import os
import pickle
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow.errors import PointsError, StorageError, VolumeError
from vdbflow.io import box_reader, grid_ref
from vdbflow.io.location import RemoteFile, UnversionedWarning
from vdbflow.io.xarray_backend import VdbflowBackendEntrypoint

ENGINE = VdbflowBackendEntrypoint


# -- a local HTTP server: HEAD and ranged GET of objects held in a dict, with the headers a test chooses ----------


class Objects:
    """What the server serves: bytes by path, and per path the headers it sends (ETag, Last-Modified)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.headers: dict[str, dict[str, str]] = {}
        self.size_override: dict[str, str] = {}

    def put(self, path: str, data: bytes, **headers: str) -> None:
        self.data[path], self.headers[path] = data, {k.replace("_", "-"): v for k, v in headers.items()}


def _handler(objects: Objects) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _head(self, status: int, length: int, extra: dict[str, str]) -> None:
            self.send_response(status)
            size = objects.size_override.get(self.path, str(length))
            self.send_header("Content-Length", size)
            self.send_header("Accept-Ranges", "bytes")
            for key, value in {**objects.headers.get(self.path, {}), **extra}.items():
                self.send_header(key, value)
            self.end_headers()

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
            if self.path not in objects.data:
                self.send_error(404)
                return
            self._head(200, len(objects.data[self.path]), {})

        def do_GET(self) -> None:  # noqa: N802
            data = objects.data.get(self.path)
            if data is None:
                self.send_error(404)
                return
            ranged = self.headers.get("Range")
            if ranged:
                a, _, b = ranged.removeprefix("bytes=").partition("-")
                start, stop = int(a), min(int(b) + 1 if b else len(data), len(data))
                part = data[start:stop]
                self._head(206, len(part), {"Content-Range": f"bytes {start}-{stop - 1}/{len(data)}"})
                self.wfile.write(part)
                return
            self._head(200, len(data), {})
            self.wfile.write(data)

    return Handler


@pytest.fixture
def http_objects() -> Iterator[tuple[str, Objects]]:
    """A threaded HTTP server on 127.0.0.1 serving an :class:`Objects`; yields its base URL and the objects."""
    objects = Objects()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(objects))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", objects
    finally:
        server.shutdown()
        server.server_close()


def _stamp(seconds: float) -> str:
    return email.utils.formatdate(seconds, usegmt=True)


def _nvdb_bytes(tmp_path: Path, values: np.ndarray, name: str) -> bytes:
    vdbflow.Volume.from_dense(values).to_nvdb(tmp_path / name)
    return (tmp_path / name).read_bytes()


# -- row 6: Last-Modified is a version; no version at all is a warning -----------------------------------------


def test_an_https_object_without_etag_is_versioned_by_last_modified(http_objects, tmp_path):
    base, objects = http_objects
    first = _nvdb_bytes(tmp_path, np.arange(512, dtype=np.float32).reshape(8, 8, 8), "a.nvdb")
    second = _nvdb_bytes(tmp_path, -np.arange(512, dtype=np.float32).reshape(8, 8, 8), "b.nvdb")
    assert len(first) == len(second) and first != second
    objects.put("/v.nvdb", first, Last_Modified=_stamp(1_700_000_000))
    remote = RemoteFile.open(f"{base}/v.nvdb")
    assert remote.tag == _stamp(1_700_000_000)
    remote.check_unchanged()  # the same object: no error
    objects.put("/v.nvdb", second, Last_Modified=_stamp(1_700_000_060))  # replaced, same size, no ETag
    with pytest.raises(StorageError, match=r"v\.nvdb to stay the same object .* replaced meanwhile"):
        remote.check_unchanged()


def test_an_object_without_any_version_is_read_with_a_warning_saying_so(http_objects, tmp_path):
    base, objects = http_objects
    values = np.arange(1, 513, dtype=np.float32).reshape(8, 8, 8)
    objects.put("/plain.nvdb", _nvdb_bytes(tmp_path, values, "p.nvdb"))
    with pytest.warns(UnversionedWarning, match=r"plain\.nvdb.*no ETag or Last-Modified"):
        vol = vdbflow.open(f"{base}/plain.nvdb")
    np.testing.assert_array_equal(np.sort(vol.active_values()), np.sort(values.ravel()))
    objects.put("/tagged.nvdb", objects.data["/plain.nvdb"], ETag='"abc"')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vdbflow.open(f"{base}/tagged.nvdb")


# -- row 15: absurd reported sizes ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [2**50, 2**63, 2**70, -5])
def test_an_absurd_reported_size_is_a_storage_error_naming_the_url(http_objects, tmp_path, size):
    base, objects = http_objects
    objects.put("/huge.nvdb", _nvdb_bytes(tmp_path, np.ones((8, 8, 8), np.float32), "h.nvdb"), ETag='"x"')
    objects.size_override["/huge.nvdb"] = str(size)
    with pytest.raises(StorageError, match=r"huge\.nvdb"):
        vdbflow.open(f"{base}/huge.nvdb")


@pytest.mark.parametrize("size", ["1e3", "abc", 2**70, -5, 1.5, None])
def test_the_backend_refuses_a_misreported_size_naming_the_url(memory_fs, tmp_path, monkeypatch, size):
    """The campaign's find: the backend's file identity took ``int(size)`` of what the store's ``info``
    said (a raw ValueError for '1e3'); a store's own size field, whatever it holds, is checked."""
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    vdbflow.Volume.from_dense(np.ones((8, 8, 8), np.float32)).to_nvdb(tmp_path / "o.nvdb")
    fsspec.filesystem("memory").pipe(f"{memory_fs}/odd.nvdb"[len("memory://") :], (tmp_path / "o.nvdb").read_bytes())
    real = MemoryFileSystem.info

    def misreporting(self, path, **kwargs):
        info = real(self, path, **kwargs)
        return {**info, "size": size} if str(path).endswith("odd.nvdb") else info

    monkeypatch.setattr(MemoryFileSystem, "info", misreporting)
    if size is None:  # no size at all reads as 0 bytes: an empty object
        with pytest.raises(vdbflow.errors.VdbflowError, match=r"odd\.nvdb.*empty"):
            xr.open_dataset(f"{memory_fs}/odd.nvdb", engine=ENGINE)
        return
    with pytest.raises(StorageError, match=r"odd\.nvdb to report a size"):
        xr.open_dataset(f"{memory_fs}/odd.nvdb", engine=ENGINE)


# -- row 16: a remote .npy of points with a negative shape -------------------------------------------------------


def _npy_with_shape(shape_text: str) -> bytes:
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': " + shape_text + ", }"
    header = header.ljust(118) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(8 * 3 * 4)


@pytest.mark.parametrize("shape", ["(-4, 3)", "(4, -3)", "(-1,)", "(9223372036854775807, 3)"])
def test_remote_npy_points_with_impossible_shapes_are_refused_at_planning(memory_fs, tmp_path, shape):
    import fsspec

    from vdbflow.jobs.config.model import FilePoints
    from vdbflow.jobs.points import file_point_count

    fsspec.filesystem("memory").pipe(f"{memory_fs}/p.npy".removeprefix("memory://"), _npy_with_shape(shape))
    spec = FilePoints.model_validate({"kind": "file", "path": f"{memory_fs}/p.npy"})
    with pytest.raises(PointsError, match=r"points\.path.*p\.npy"):
        file_point_count(spec)
    (tmp_path / "p.npy").write_bytes(_npy_with_shape(shape))  # the local file: refused too
    with pytest.raises(PointsError, match=r"points\.path"):
        file_point_count(FilePoints.model_validate({"kind": "file", "path": str(tmp_path / "p.npy")}))


def test_a_remote_dense_npy_with_a_negative_shape_is_refused(memory_fs):
    import fsspec

    from vdbflow.io.dense import open_dense

    fsspec.filesystem("memory").pipe(f"{memory_fs}/d.npy".removeprefix("memory://"), _npy_with_shape("(-2, 4, 4)"))
    with pytest.raises(VolumeError, match=r"d\.npy"):
        open_dense(f"{memory_fs}/d.npy", [])


# -- row 19: leaf_values of a volume without leaves ------------------------------------------------------------


@pytest.mark.parametrize("components", [1, 3])
def test_leaf_values_of_a_volume_with_no_leaves_is_an_empty_array(tmp_path, components):
    empty = vdbflow.Volume.from_voxels(np.zeros((0, 3)), np.zeros((0, components), np.float32))
    empty.to_nvdb(tmp_path / "e.nvdb")
    for vol in (vdbflow.open(tmp_path / "e.nvdb"), vdbflow.open(tmp_path / "e.nvdb", bbox=((0, 0, 0), (9, 9, 9)))):
        assert vol.leaf_count == 0
        got = vol.leaf_values
        assert got.shape == (0, 512, components) and got.dtype == np.float32


# -- row 18: bad argument types of the backend -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"dim_order": ["x", "y", "z"]}, "dim_order 'xyz' or 'zyx', got list"),
        ({"dim_order": {"xyz": 1}}, "dim_order"),
        ({"drop_variables": 5}, "drop_variables .* got int"),
        ({"drop_variables": [5]}, "drop_variables .* names"),
        ({"drop_variables": b"value"}, "drop_variables"),
    ],
)
def test_bad_dim_order_and_drop_variables_are_volume_errors(tmp_path, kwargs, text):
    vdbflow.Volume.from_dense(np.ones((8, 8, 8), np.float32)).to_nvdb(tmp_path / "v.nvdb")
    with pytest.raises(VolumeError, match=text):
        xr.open_dataset(tmp_path / "v.nvdb", engine=ENGINE, **kwargs)


# -- row 2: a volume store at a URL naming a pickle codec -----------------------------------------------------------


class Payload:
    """Unpickles to a call that creates the marker file: proof that a store's pickle ran."""

    marker = ""

    def __reduce__(self) -> tuple:
        return (open, (self.marker, "w"))


@pytest.mark.parametrize(
    "array, edit",
    [
        ("values", {"filters": [{"id": "pickle", "protocol": 4}]}),
        ("values", {"compressor": {"id": "pickle"}}),
        ("channel", {"filters": [{"id": "pickle"}], "compressor": None}),
    ],
)
@pytest.mark.parametrize("consolidated", [True, False])
def test_a_volume_store_at_a_url_naming_pickle_is_refused_before_decoding(
    memory_fs, tmp_path, array, edit, consolidated
):
    import fsspec

    vol = vdbflow.Volume.from_dense(np.arange(1, 513, dtype=np.float32).reshape(8, 8, 8))
    store = tmp_path / "v.zarr"
    vol.to_zarr(store)
    meta = json.loads((store / array / ".zarray").read_text())
    meta.update(edit)
    (store / array / ".zarray").write_text(json.dumps(meta))
    whole = json.loads((store / ".zmetadata").read_text())
    whole["metadata"][f"{array}/.zarray"] = meta
    (store / ".zmetadata").write_text(json.dumps(whole))
    if not consolidated:
        (store / ".zmetadata").unlink()
    Payload.marker = str(tmp_path / "ran")
    chunk = next(p for p in (store / array).iterdir() if not p.name.startswith("."))
    chunk.write_bytes(pickle.dumps(np.array([Payload()], dtype=object)))
    fsspec.filesystem("memory").put(str(store), f"{memory_fs}/v.zarr".removeprefix("memory://"), recursive=True)
    with pytest.raises(VolumeError, match=r"v\.zarr.*\['pickle'\].*would run code"):
        vdbflow.open(f"{memory_fs}/v.zarr")
    assert not os.path.exists(Payload.marker)


def test_a_clean_volume_store_at_a_url_reads_as_the_local_one(memory_fs, tmp_path):
    import fsspec

    vol = vdbflow.Volume.from_dense(np.arange(1, 1 + 16**3, dtype=np.float32).reshape(16, 16, 16))
    vol.to_zarr(tmp_path / "v.zarr")
    fsspec.filesystem("memory").put(str(tmp_path / "v.zarr"), f"{memory_fs}/v.zarr"[len("memory://") :], recursive=True)
    got, want = vdbflow.open(f"{memory_fs}/v.zarr"), vdbflow.open(tmp_path / "v.zarr")
    np.testing.assert_array_equal(got.active_voxels(), want.active_voxels())
    np.testing.assert_array_equal(got.active_values(), want.active_values())


# -- row 5: a file renamed over under an open Dataset -------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".nvdb", ".zarr"])
def test_a_file_renamed_over_an_open_dataset_is_an_error_naming_it(tmp_path, suffix):
    first = np.arange(24**3, dtype=np.float32).reshape(24, 24, 24)
    path = tmp_path / f"v{suffix}"
    other = tmp_path / f"other{suffix}"
    for values, where in ((first, path), (first + 1000, other)):
        vol = vdbflow.Volume.from_dense(values)
        vol.to_nvdb(where) if suffix == ".nvdb" else vol.to_zarr(where)
    grid_ref.clear_cache()
    ds = xr.open_dataset(path, engine=ENGINE, leaf_chunks=8)
    np.testing.assert_array_equal(ds["value"][:8, :8, :8].values, first[:8, :8, :8])
    os.replace(other, path) if suffix == ".nvdb" else (os.rename(path, tmp_path / "gone"), os.rename(other, path))
    if suffix == ".nvdb":  # a box not read yet: the replaced file is named, never read as the opened one
        with pytest.raises(VolumeError, match=rf"v\{suffix}.*replaced"):
            ds["value"][16:, 16:, 16:].load()
    else:  # a store is read whole, once: every box comes from the store the Dataset opened
        np.testing.assert_array_equal(ds["value"][16:, 16:, 16:].values, first[16:, 16:, 16:])
    grid_ref.clear_cache()  # what this process kept is gone: the next read meets the new file
    with pytest.raises(VolumeError, match=rf"v\{suffix}.*replaced"):
        ds["value"][:8, :8, :8].load()


# -- row 8: strided selections read what they select -------------------------------------------------------------


@contextlib.contextmanager
def _largest_dense(limit: int) -> Iterator[list[int]]:
    """Records the voxels of every dense box made for a read; raises when one exceeds ``limit``."""
    sizes: list[int] = []
    real = box_reader.dense_box

    def counting(vol, lo, hi):
        n = int(np.prod(np.asarray(hi) - np.asarray(lo) + 1))
        sizes.append(n)
        assert n <= limit, f"a dense box of {n} voxels for a strided read"
        return real(vol, lo, hi)

    import vdbflow.io.xarray_backend as backend

    saved = backend.dense_box
    backend.dense_box = counting
    try:
        yield sizes
    finally:
        backend.dense_box = saved


def test_a_strided_selection_of_a_large_box_reads_only_what_it_selects(tmp_path, rng):
    ijk = np.array([[0, 0, 0], [2047, 2047, 2047], [512, 1024, 1536], [511, 3, 1024]])
    values = np.arange(1, 5, dtype=np.float32) * 10
    vdbflow.Volume.from_voxels(ijk, values, background=-1.0).to_nvdb(tmp_path / "big.nvdb")
    grid_ref.clear_cache()
    ds = xr.open_dataset(tmp_path / "big.nvdb", engine=ENGINE)
    assert ds["value"].shape == (2048, 2048, 2048)
    boxes = []
    real = grid_ref.open_volume

    def recording(path, grid=None, **kwargs):
        boxes.append(np.asarray(kwargs.get("bbox")))
        return real(path, grid, **kwargs)

    grid_ref.open_volume = recording
    try:
        with _largest_dense(64):
            got = ds["value"][::512, ::512, ::512].values
            mask = ds["value_active"][::512, ::512, ::512].values
    finally:
        grid_ref.open_volume = real
    # one-voxel boxes: 64 for the values, 64 again for the mask (more than the 32 boxes a process keeps)
    assert len(boxes) == 128 and all(np.array_equal(b[0], b[1]) for b in boxes)
    want = np.full((4, 4, 4), -1.0, np.float32)
    want[0, 0, 0], want[1, 2, 3] = 10, 30
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(mask, want != -1)


def _random_key(rng: np.random.Generator, n: int) -> slice | int:
    """An int, or a slice of any step (negative too; xarray cannot take an empty reversed one)."""
    if rng.random() < 0.2:
        return int(rng.integers(0, n))
    step = int(rng.choice([1, 2, 3, 7, 9, 16, -1, -4]))
    a, b = sorted(int(v) for v in rng.integers(-n, n + 1, 2))
    key = slice(b, a, step) if step < 0 else slice(a, b, step)
    return key if step > 0 or len(range(*key.indices(n))) else slice(None, None, step)


@pytest.mark.parametrize(
    "seed, kind",
    [(0, "nvdb"), (1, "nvdb"), (2, "vec3"), (3, "zarr"), (4, "merged"), (5, "merged"), (6, "vec3"), (7, "zarr")],
)
def test_strided_and_reversed_selections_equal_numpys_slices_of_the_dense_reference(tmp_path, seed, kind, monkeypatch):
    """Per-leaf (.nvdb), vec3, index-layout (a store, read whole) grids, and ("merged") boxes merged past
    the limit and cut at every leaf: 8 random keys each against NumPy's slice of the dense reference."""
    rng = np.random.default_rng(seed)
    shape = (40, 33, 29)
    C = 3 if kind == "vec3" else 1
    dense = rng.standard_normal((*shape, C)).astype(np.float32)
    keep = rng.random(shape) < 0.4
    keep[24:32, 0:8, 8:16] = False  # the tile's cube holds no voxel
    ijk = np.argwhere(keep)
    tiles = ([[24, 0, 8]], [8], [[5.0] * C])
    vol = vdbflow.Volume.from_voxels(ijk, dense[keep].squeeze(-1) if C == 1 else dense[keep], 0.5, tiles=tiles)
    path = tmp_path / ("v.zarr" if kind == "zarr" else "v.nvdb")
    vol.to_zarr(path) if kind == "zarr" else vol.to_nvdb(path)
    if kind == "merged":
        monkeypatch.setattr(box_reader, "MAX_PICKED_BOXES", 3)
        monkeypatch.setattr(box_reader, "RUN_LEAVES", 1)
    grid_ref.clear_cache()
    ds = xr.open_dataset(path, engine=ENGINE, bbox=((0, 0, 0), (39, 32, 28)))
    want = np.full((*shape, C), 0.5, np.float32)
    want[24:32, 0:8, 8:16] = 5.0
    want[keep] = dense[keep]
    want = want[..., 0] if C == 1 else want
    active = keep.copy()
    active[24:32, 0:8, 8:16] = True
    for _ in range(8):
        key = tuple(_random_key(rng, n) for n in shape)
        np.testing.assert_array_equal(ds["value"][key].values, want[key], err_msg=str(key))
        np.testing.assert_array_equal(ds["value_active"][key].values, active[key], err_msg=str(key))
        if C > 1:
            c = int(rng.integers(0, C))
            np.testing.assert_array_equal(ds["value"][(*key, c)].values, want[(*key, c)], err_msg=str(key))


# -- suspected: a same-size rewrite in place whose mtime is put back ---------------------------------------------


def _rewrite_keeping_size_and_mtime(path: Path, data: bytes) -> None:
    """Rewrite ``path`` in place (same inode) with ``data`` of its size, then put its mtime back (``touch -r``):
    what size and mtime alone cannot tell apart; the inode's ctime, which no user can set, moves."""
    before = os.stat(path)
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def test_an_input_rewritten_in_place_with_its_size_and_mtime_kept_is_caught(tmp_path):
    from vdbflow.io.identity import FileIdentity

    path = tmp_path / "input.bin"
    path.write_bytes(b"a" * 4096)
    identity = FileIdentity.of(path)
    identity.check("now")  # the same file: no error
    _rewrite_keeping_size_and_mtime(path, b"b" * 4096)
    with pytest.raises(VolumeError, match=r"input\.bin .* replaced or rewrote it"):
        identity.check("when it was read")


def test_a_file_rewritten_in_place_under_an_open_dataset_is_an_error(tmp_path):
    values = np.arange(1, 1 + 16**3, dtype=np.float32).reshape(16, 16, 16)
    vdbflow.Volume.from_dense(values).to_nvdb(tmp_path / "v.nvdb")
    vdbflow.Volume.from_dense(values + 1).to_nvdb(tmp_path / "w.nvdb")
    grid_ref.clear_cache()
    ds = xr.open_dataset(tmp_path / "v.nvdb", engine=ENGINE, leaf_chunks=8)
    np.testing.assert_array_equal(ds["value"][:8, :8, :8].values, values[:8, :8, :8])
    _rewrite_keeping_size_and_mtime(tmp_path / "v.nvdb", (tmp_path / "w.nvdb").read_bytes())
    with pytest.raises(VolumeError, match=r"v\.nvdb.*replaced or rewrote"):
        ds["value"][8:, 8:, 8:].load()


def test_an_empty_selection_of_a_huge_box_allocates_nothing(tmp_path):
    """The campaign's find: an empty selection made an array of the whole box's shape to learn its shape."""
    vdbflow.Volume.from_dense(np.ones((8, 8, 8), np.float32)).to_nvdb(tmp_path / "v.nvdb")
    side = 1 << 20  # 2^60 voxels: no array of that shape can be made
    ds = xr.open_dataset(tmp_path / "v.nvdb", engine=ENGINE, bbox=((0, 0, 0), (side - 1,) * 3), leaf_chunks=1 << 17)
    assert ds["value"][5:5, :3, 2].shape == (0, 3)
    assert ds["value"][5:5, :3, 2].values.shape == (0, 3)
    assert ds["value_active"][:2, 7:3, ::2].values.shape == (2, 0, side // 2)


# -- suspected: Zarr metadata read twice (checked, then read by Zarr) ---------------------------------------------


def test_a_dense_store_whose_metadata_turns_to_pickle_after_the_check_is_refused(tmp_path, monkeypatch):
    """A store that answers the check with clean metadata and Zarr with a pickle codec (swapped in between):
    Zarr reads through the checked store, so the codec is refused as Zarr reads it and nothing runs."""
    from vdbflow.io import dense, zarr_v2
    from vdbflow.io.dense import open_dense

    store = tmp_path / "dense.zarr"
    xr.Dataset({"v": (("x", "y", "z"), np.zeros((8, 8, 8), np.float32))}).to_zarr(store, zarr_format=2)
    (store / ".zmetadata").unlink()
    marker = tmp_path / "ran"
    Payload.marker = str(marker)
    real = zarr_v2.refuse_code_codecs

    def check_then_swap(path):
        real(path)  # the check sees clean metadata; then the store changes under it
        meta = json.loads((store / "v" / ".zarray").read_text())
        meta.update(dtype="|O", compressor=None, filters=[{"id": "pickle"}])
        (store / "v" / ".zarray").write_text(json.dumps(meta))
        (store / "v" / "0.0.0").write_bytes(pickle.dumps(np.array([Payload()], dtype=object)))

    monkeypatch.setattr(dense, "refuse_code_codecs", check_then_swap)  # as open_dense calls it
    with pytest.raises(VolumeError, match=r"\['pickle'\] in v/\.zarray: decoding them would run code"):
        open_dense(store, ["v"])
    assert not marker.exists()


def test_the_zarr2_checked_mapping_checks_metadata_and_is_read_only(memory_fs):
    """What Zarr 2 is given (a mutable mapping, as its stores must be): metadata naming pickle raises as it is
    read, chunks pass through, writes are refused."""
    import fsspec

    from vdbflow.io.zarr_url import CheckedMapping

    fs = fsspec.filesystem("memory")
    root = f"{memory_fs}/m.zarr"[len("memory://") :]
    fs.pipe(f"{root}/.zgroup", json.dumps({"zarr_format": 2}).encode())
    fs.pipe(f"{root}/a/.zarray", json.dumps({"filters": [{"id": "pickle"}]}).encode())
    fs.pipe(f"{root}/a/0", b"\x00" * 8)
    mapping = CheckedMapping(fs.get_mapper(root), "memory://m.zarr")
    assert json.loads(mapping[".zgroup"]) == {"zarr_format": 2} and mapping["a/0"] == b"\x00" * 8
    assert sorted(mapping) == [".zgroup", "a/.zarray", "a/0"] and len(mapping) == 3 and "a/0" in mapping
    with pytest.raises(VolumeError, match=r"\['pickle'\] in a/\.zarray"):
        mapping["a/.zarray"]
    with pytest.raises(PermissionError):
        mapping["b"] = b""
    with pytest.raises(PermissionError):
        del mapping["a/0"]
