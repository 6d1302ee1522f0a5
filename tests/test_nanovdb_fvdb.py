"""fVDB's files open by default, as NanoVDB's reader and Warp open them: a checksum that matches no rule
of its version is a ChecksumWarning (naming grid, version and spans tried), ``checksum="strict"`` raises,
``checksum=False`` does not check; the values read equal Warp's (``Volume.load_from_nvdb``,
``volume_lookup_f`` / ``volume_sample_f`` in a ``wp.kernel``)."""

from __future__ import annotations

import hashlib
import os
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import vdbflow

wo = pytest.importorskip("warp_oracle")
wp = wo.wp

# fVDB's unit_tests/io/batch.nvdb (github.com/voxel-foundation/fvdb-test-data, 60,165 bytes): four Float
# level-set grids named 'z' in one blosc payload of NanoVDB 32.5.0, whose head checksums match no span
# (fVDB edits headers after computing them).  The repository states no license, so the file is not
# committed (tests/data/fvdb/README.md): the test reads it from VDBFLOW_FVDB_BATCH_NVDB or
# tests/data/fvdb/batch.nvdb.
BATCH_SHA256 = "aa3a75bb1247d9a52261bd216e352a2b684cf550bb728b8407d767161306c8d7"
BATCH = Path(os.environ.get("VDBFLOW_FVDB_BATCH_NVDB", Path(__file__).parent / "data" / "fvdb" / "batch.nvdb"))


@wp.kernel(module="unique")
def _lookup_f(vid: wp.uint64, ijk: wp.array(dtype=wp.vec3i), out: wp.array(dtype=wp.float32)):
    t = wp.tid()
    out[t] = wp.volume_lookup_f(vid, ijk[t][0], ijk[t][1], ijk[t][2])


@wp.kernel(module="unique")
def _sample_f(vid: wp.uint64, pts: wp.array(dtype=wp.vec3), mode: int, out: wp.array(dtype=wp.float32)):
    t = wp.tid()
    out[t] = wp.volume_sample_f(vid, pts[t], mode)


def warp_grids(data: bytes) -> list:
    """Every grid Warp finds in a file: load_from_nvdb, then load_next_grid."""
    grids = [wp.Volume.load_from_nvdb(data, device="cpu")]
    while (nxt := grids[-1].load_next_grid()) is not None:
        grids.append(nxt)
    return grids


def warp_lookup(wvol, ijk: np.ndarray) -> np.ndarray:
    out = wp.zeros(len(ijk), dtype=wp.float32, device="cpu")
    wp.launch(_lookup_f, dim=len(ijk), inputs=[wvol.id, wp.array(ijk.astype(np.int32), dtype=wp.vec3i)], outputs=[out])
    return out.numpy()


def warp_sample_f(wvol, points: np.ndarray, mode: int) -> np.ndarray:
    out = wp.zeros(len(points), dtype=wp.float32, device="cpu")
    pts = wp.array(points.astype(np.float32), dtype=wp.vec3, device="cpu")
    wp.launch(_sample_f, dim=len(points), inputs=[wvol.id, pts, mode], outputs=[out])
    return out.numpy()


def assert_reads_like_warp(data: bytes, vols: list) -> None:
    """vdbflow's grids equal Warp's: every active voxel (volume_lookup_f), and closest and linear samples
    at points near and between them (volume_sample_f, index space)."""
    wgrids = warp_grids(data)
    assert len(wgrids) == len(vols)
    rng = np.random.default_rng(5)
    for vol, wvol in zip(vols, wgrids, strict=True):
        ijk = vol.active_voxels()
        np.testing.assert_array_equal(vol.active_values().ravel(), warp_lookup(wvol, ijk))
        pts = np.concatenate(
            [ijk + rng.uniform(-0.9, 0.9, ijk.shape), rng.uniform(ijk.min(0) - 3, ijk.max(0) + 3, (500, 3))]
        )
        for mode, warp_mode in (("closest", wp.Volume.CLOSEST), ("linear", wp.Volume.LINEAR)):
            got, _ = vdbflow.sample_grad_arrays(vol, pts, mode, jacobian=False)
            want = warp_sample_f(wvol, pts, warp_mode)
            tol = 0 if mode == "closest" else 32 * np.finfo(np.float32).eps * max(1.0, float(np.abs(want).max()))
            np.testing.assert_allclose(got.ravel(), want, atol=tol, rtol=0)


def open_all(data: bytes, **kwargs) -> list:
    return [vdbflow.open(data, k, **kwargs) for k in range(len(vdbflow.list_grids(data)))]


@pytest.mark.skipif(not BATCH.is_file(), reason=f"fVDB's batch.nvdb is not at {BATCH} (see the module docstring)")
def test_fvdb_batch_file_opens_with_a_checksum_warning_and_reads_like_warp():
    data = BATCH.read_bytes()
    assert hashlib.sha256(data).hexdigest() == BATCH_SHA256, f"{BATCH} is not fVDB's batch.nvdb"
    infos = vdbflow.list_grids(data)
    assert [(i.name, i.grid_type, i.codec, i.version) for i in infos] == [("z", "Float", "blosc", "32.5.0")] * 4
    with pytest.warns(vdbflow.ChecksumWarning) as record:
        vols = open_all(data)
    messages = [str(w.message) for w in record if w.category is vdbflow.ChecksumWarning]
    assert len(messages) == 4
    for m in messages:
        assert "grid 'z' (NanoVDB 32.5.0)" in m and "head half" in m and "tried bytes [" in m and "as grid 0 of 1" in m
    with pytest.raises(vdbflow.NanoVDBError, match=r"checksum mismatch in grid 'z' \(NanoVDB 32\.5\.0\)"):
        vdbflow.open(data, checksum="strict")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet = open_all(data, checksum=False)
    for a, b in zip(vols, quiet, strict=True):
        np.testing.assert_array_equal(a.active_values(), b.active_values())
    assert [v.active_voxel_count for v in vols] == [i.active_voxel_count for i in infos]
    assert_reads_like_warp(data, vols)


def test_an_fvdb_like_payload_with_edited_headers_reads_like_warp(tmp_path):
    """The same situation built here: a 32.5 multi-grid payload (as fVDB writes a batch) whose grids had a
    header field edited after their checksum was computed (fVDB rewrites names, maps and voxel sizes)."""
    rng = np.random.default_rng(3)
    grids = []
    vols = []
    for k in range(3):
        ijk = np.unique(rng.integers(-20, 20, (400, 3)), axis=0)
        vol = vdbflow.Volume.from_voxels(ijk, rng.standard_normal(len(ijk)).astype(np.float32), 0.0, name="z")
        vol.to_nvdb(str(tmp_path / f"{k}.nvdb"), version="32.4")
        raw = (tmp_path / f"{k}.nvdb").read_bytes()
        grid = bytearray(raw[16 + 176 + struct.unpack_from("<I", raw, 16 + 136)[0] :])
        struct.pack_into("<I", grid, 16, (32 << 21) | (5 << 10))  # the version fVDB's NanoVDB wrote
        struct.pack_into("<II", grid, 24, k, 3)  # k of 3 in one buffer
        grid[40:42] = b"z\0"
        struct.pack_into("<d", grid, 608, 0.1)  # the voxel size edited after the checksum
        grids.append(bytes(grid))
        vols.append(vol)
    payload = b"".join(grids)
    meta = struct.pack("<QQQQII", len(payload), len(payload), 0, 0, 1, 0)
    meta += (
        bytes(136 - len(meta)) + struct.pack("<I", 2) + bytes(28) + struct.pack("<HHI", 0, 0, (32 << 21) | (5 << 10))
    )
    data = struct.pack("<QIHH", 0x304244566F6E614E, (32 << 21) | (5 << 10), 1, 0) + meta + b"z\0" + payload
    with pytest.warns(vdbflow.ChecksumWarning, match=r"grid 'z' \(NanoVDB 32\.5\.0\): the head half"):
        back = open_all(data)
    for a, b in zip(back, vols, strict=True):
        np.testing.assert_array_equal(a.active_voxels(), b.active_voxels())
        np.testing.assert_array_equal(a.active_values(), b.active_values())
    with pytest.raises(vdbflow.NanoVDBError, match="checksum mismatch"):
        vdbflow.open(data, 1, checksum="strict")
    assert_reads_like_warp(data, back)
