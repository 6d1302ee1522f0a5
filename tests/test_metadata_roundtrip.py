"""Units and component names survive .nvdb files (NanoVDB blind data "vdbflow.metadata") and jobs."""

import json
import struct
import warnings

import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow import synthetic


@pytest.fixture(scope="module")
def tg():
    return synthetic.flow_volume(synthetic.taylor_green(), resolution=16)


def blind_records(raw: bytes) -> list[tuple[str, int, int, int, int, bytes]]:
    """The blind data of the single grid of an uncompressed .nvdb, read straight from NanoVDB's layout
    (GridData: blind metadata offset i64 at byte 640, count u32 at 648; GridBlindMetaData: 288 bytes,
    data offset i64 from the record, value count u64, value size, semantic, class, type u32, name[256])."""
    base = raw.find(b"NanoVDB", 1)  # the file's magic at byte 0, then each grid's
    while base >= 0 and struct.unpack_from("<Q", raw, base + 32)[0] != len(raw) - base:
        base = raw.find(b"NanoVDB", base + 1)
    if base >= 0:
        offset, count = struct.unpack_from("<qI", raw, base + 640)
        out = []
        for b in range(count):
            at = base + offset + 288 * b
            data_offset, n, size, semantic, cls, dtype = struct.unpack_from("<qQIIII", raw, at)
            name = raw[at + 32 : at + 288].split(b"\0", 1)[0].decode()
            out.append((name, semantic, cls, dtype, size, raw[at + data_offset : at + data_offset + n * size]))
        return out
    raise AssertionError("no grid found")


@pytest.mark.parametrize("codec", ["none", "zip", "blosc"])
def test_units_and_component_names_survive_nvdb(tg, tmp_path, codec):
    path = tmp_path / "tg.nvdb"
    tg.to_nvdb(str(path), codec=codec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = vdbflow.open(str(path))
    assert (back.units, back.length_units, back.component_names) == ("m/s", "m", ("u", "v", "w"))
    assert back.blind_data == ()  # vdbflow's own record is read into the fields, not kept as a record
    ds = back.sample_grad(tg.transform.apply(tg.active_voxels()[:50] + 0.25))
    assert ds["velocity"].attrs["units"] == "m/s" and list(ds["component"].values) == ["u", "v", "w"]
    assert ds["velocity_jacobian"].attrs["units"] == "1/s" and ds["x"].attrs["units"] == "m"


def test_the_record_is_plain_json_bytes_to_other_readers(tg, tmp_path):
    path = tmp_path / "tg.nvdb"
    tg.to_nvdb(str(path))
    records = blind_records(path.read_bytes())
    assert len(records) == 1
    name, semantic, cls, dtype, size, data = records[0]
    assert (name, semantic, cls, dtype, size) == ("vdbflow.metadata", 0, 0, 0, 1)  # Unknown, chars
    meta = json.loads(data.decode("utf-8"))
    assert meta["units"] == "m/s" and meta["length_units"] == "m" and meta["component_names"] == ["u", "v", "w"]


def test_other_blind_data_is_kept_and_the_record_is_not_doubled(tg, tmp_path):
    weights = vdbflow.BlindData(
        "weights", semantic=0, data_class=1, data_type=1, value_size=4, data=np.arange(6, dtype=np.float32).tobytes()
    )
    vol = tg.select_leaves(np.arange(tg.leaf_count))
    vol.blind_data = (weights,)
    a, b = tmp_path / "a.nvdb", tmp_path / "b.nvdb"
    vol.to_nvdb(str(a))
    back = vdbflow.open(str(a))
    assert back.blind_data == (weights,) and back.units == "m/s"
    back.units = "km/h"  # changed after reading: the new value is written
    back.component_names = ("vx", "vy", "vz")
    back.to_nvdb(str(b))
    names = [r[0] for r in blind_records(b.read_bytes())]
    assert sorted(names) == ["vdbflow.metadata", "weights"]
    again = vdbflow.open(str(b))
    assert (again.units, again.component_names, again.blind_data) == ("km/h", ("vx", "vy", "vz"), (weights,))


def test_nothing_is_written_for_a_volume_without_metadata(tmp_path):
    vol = vdbflow.Volume.from_voxels(np.array([[0, 0, 0], [1, 2, 3]]), np.ones((2, 3), np.float32))
    vol.to_nvdb(str(tmp_path / "plain.nvdb"))
    assert blind_records((tmp_path / "plain.nvdb").read_bytes()) == []
    back = vdbflow.open(str(tmp_path / "plain.nvdb"))
    assert (back.units, back.length_units, back.component_names) == (None, None, ("x", "y", "z"))


def test_a_malformed_record_warns_and_the_grid_still_opens(tg, tmp_path):
    path = tmp_path / "tg.nvdb"
    tg.to_nvdb(str(path))
    raw = bytearray(path.read_bytes())
    at = raw.find(b'{"format"')
    raw[at] = ord("[")  # no longer a JSON object
    with pytest.warns(UserWarning, match="vdbflow.metadata blind data of the grid at byte"):
        back = vdbflow.open(bytes(raw), checksum=False)
    assert back.component_names == ("x", "y", "z") and back.units is None
    np.testing.assert_array_equal(back.active_values(), tg.active_values())


@pytest.mark.slow
def test_metadata_survives_a_job(tmp_path):
    """A synthetic field written to .nvdb, read by the workers: the result keeps units and names."""
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.runner import run_job

    cfg = load_config(
        data={
            "volume": {"synthetic": {"field": "taylor_green", "resolution": 20, "write": str(tmp_path / "tg.nvdb")}},
            "points": {"kind": "random", "count": 3000, "chunk": 1000, "seed": 1},
            "sampling": {"mode": "linear", "outputs": ["value", "jacobian", "q_criterion", "vorticity_magnitude"]},
            "cluster": {"kind": "local", "workers": 1, "dashboard": False},
            "output": {"path": str(tmp_path / "result.zarr")},
        }
    )
    run_job(cfg, progress=False)
    ds = xr.open_zarr(tmp_path / "result.zarr")
    assert list(ds["component"].values) == ["u", "v", "w"]
    assert ds["velocity"].attrs["units"] == "m/s" and ds["velocity_jacobian"].attrs["units"] == "1/s"
    assert ds["q_criterion"].attrs["units"] == "1/s^2" and ds["vorticity_magnitude"].attrs["units"] == "1/s"
    assert all(ds[c].attrs["units"] == "m" for c in "xyz")
    assert ds.attrs["Conventions"] == "CF-1.10" and ds.attrs["featureType"] == "point"
    vol = vdbflow.open(str(tmp_path / "tg.nvdb"))
    np.testing.assert_array_equal(np.asarray(ds.attrs["index_to_world"]).reshape(4, 4), vol.index_to_world)


# -- issue 40, rows 8 and 12: text that is not valid Unicode, and names and paths save() cannot write ------


def _with_record(tmp_path, monkeypatch, record: bytes):
    """The Taylor-Green field saved with ``record`` as its vdbflow.metadata blind data, as a hostile
    writer would."""
    from vdbflow.io.nanovdb import METADATA_NAME, BlindData, write

    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    vol.blind_data = (BlindData(METADATA_NAME, 0, 0, 0, 1, record),)
    with monkeypatch.context() as patch:
        patch.setattr(write, "blind_records", lambda obj: tuple(obj.blind_data))
        vdbflow.save(tmp_path / "lone.nvdb", {"velocity": vol})
    assert record in (tmp_path / "lone.nvdb").read_bytes()
    return tmp_path / "lone.nvdb"


@pytest.mark.parametrize("key", ["units", "length_units", "component_names"])
def test_a_lone_surrogate_in_the_metadata_record_is_dropped_with_a_warning(tg, tmp_path, monkeypatch, key):
    from click.testing import CliRunner

    from vdbflow.jobs.cli.main import main

    value = ["a", "\ud800", "c"] if key == "component_names" else "\ud800"
    path = _with_record(tmp_path, monkeypatch, json.dumps({"format": 1, key: value}).encode())
    with pytest.warns(UserWarning, match="lone surrogate"):
        back = vdbflow.open(path)
    assert back.units is None and back.length_units is None and back.component_names == ("x", "y", "z")
    np.testing.assert_array_equal(back.active_values(), tg.active_values())
    back.to_nvdb(str(tmp_path / "again.nvdb"))  # what was read saves again
    result = CliRunner().invoke(main, ["info", str(path)], catch_exceptions=False)
    assert result.exit_code == 0 and "velocity" in result.output, result.output
    result = CliRunner().invoke(main, ["info", "--json", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    json.loads(result.output)


def test_a_lone_surrogate_in_a_stores_attrs_is_refused(tg, tmp_path):
    store = tmp_path / "v.zarr"
    tg.to_zarr(str(store))
    for name in (".zattrs", ".zmetadata"):
        text = (store / name).read_text()
        (store / name).write_text(text.replace('"volume_units"', '"volume_units": "\\ud800", "x"', 1))
    with pytest.raises(vdbflow.VolumeError, match="lone surrogate"):
        vdbflow.open_zarr(store)


@pytest.mark.parametrize("attr", ["units", "length_units", "name", "component_names"])
def test_volumes_with_text_no_file_can_hold_are_refused_when_saved(tg, tmp_path, attr):
    vol = synthetic.flow_volume(synthetic.taylor_green(), resolution=16)
    setattr(vol, attr, ("x", "\udc80", "z") if attr == "component_names" else "\udc80")
    with pytest.raises(vdbflow.NanoVDBError, match="expected .*text"):
        vol.to_nvdb(str(tmp_path / "v.nvdb"))
    with pytest.raises(vdbflow.VolumeError, match="expected .*text"):
        vol.to_zarr(str(tmp_path / "v.zarr"))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name, error",
    [("\ud800", "not text"), (1, "a str"), ("a\0b", "NUL"), (b"velocity", "a str")],
    ids=["surrogate", "int", "nul", "bytes"],
)
def test_save_refuses_grid_names_it_cannot_write_as_given(tg, tmp_path, name, error):
    with pytest.raises(vdbflow.NanoVDBError, match=f"expected .*grid name.*{error}"):
        vdbflow.save(tmp_path / "v.nvdb", {name: tg})
    assert list(tmp_path.iterdir()) == []


def test_save_paths_with_nul_are_write_errors_and_bytes_paths_work(tg, tmp_path):
    with pytest.raises(vdbflow.WriteError, match="NUL"):
        vdbflow.save(str(tmp_path / "a\0b.nvdb"), {"velocity": tg})
    with pytest.raises(vdbflow.WriteError, match="NUL"):
        vdbflow.save(bytes(tmp_path / "a\0b.nvdb"), {"velocity": tg})
    vdbflow.save(bytes(tmp_path / "b.nvdb"), {"velocity": tg})  # a bytes path, as os functions take
    assert vdbflow.open(tmp_path / "b.nvdb").active_voxel_count == tg.active_voxel_count
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.nvdb"]
