"""Zarr format 3 results open in v3 readers other than zarr-python (issue 50): every array of a sharded
result, read with tensorstore's ``zarr3`` driver, equals zarr-python's; the label coordinates, which the v3
core has no data type for, are in the ``vdbflow_labels`` attr, and ``vdbflow.open_result`` gives the
Dataset the same job's format 2 store gives."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from output_jobs import client, job, same_data  # noqa: F401

import vdbflow
from vdbflow.errors import StorageError
from vdbflow.io import labels

ts = pytest.importorskip("tensorstore", reason="tensorstore is in the test extra")

OUTPUTS = ["value", "jacobian", "q_criterion", "vorticity", "inside"]
CORE_TYPES = {"bool", *(f"{k}{b}" for k in ("int", "uint") for b in (8, 16, 32, 64)), "float32", "float64"}


def tensorstore_array(store: Path, name: str) -> np.ndarray:
    """Array ``name`` of the store read whole by tensorstore (its own parser of zarr.json and codecs)."""
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(store / name)}}
    return ts.open(spec, read=True).result().read().result()


def arrays(store: Path) -> dict[str, zarr.Array]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not recognized as a component.*")
        return dict(zarr.open_group(str(store), mode="r").arrays())


@pytest.fixture(scope="module")
def results(tmp_path_factory, client):  # noqa: F811
    tmp = tmp_path_factory.mktemp("v3readers")
    out = {}
    for name, output in (("v3", {"shard": 2_000}), ("v2", {})):
        cfg = job(tmp, tmp / f"{name}.zarr", **output)  # 4,000 points in chunks of 500, 2,000 a shard
        cfg["sampling"]["outputs"] = OUTPUTS
        out[name] = Path(vdbflow.run(cfg, client).output)
    return out


def test_every_array_of_a_sharded_result_reads_the_same_in_tensorstore(results):
    store = results["v3"]
    found = arrays(store)
    assert {"velocity", "velocity_jacobian", "stencil_inside", "point", "x"} <= set(found)
    for name, array in found.items():
        meta = json.loads((store / name / "zarr.json").read_text())
        assert meta["data_type"] in CORE_TYPES, (name, meta["data_type"])  # the v3 core's types only
        got = tensorstore_array(store, name)
        expected = array[...]
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        np.testing.assert_array_equal(got, expected, err_msg=name)
    codecs = json.loads((store / "velocity" / "zarr.json").read_text())["codecs"]
    assert codecs[0]["name"] == "sharding_indexed"  # the sharded layout tensorstore read


def test_open_result_gives_the_format_2_dataset(results):
    with vdbflow.open_result(results["v3"]) as ds, xr.open_zarr(results["v2"]) as expected:
        same_data(ds, expected)  # labels, their attrs, every value
        assert list(ds["component"].values) == ["u", "v", "w"] and "vdbflow_labels" not in ds.attrs
    with xr.open_zarr(results["v3"]) as plain:  # xarray alone: the dims unlabelled, the labels in the attr
        assert "component" not in plain.coords and plain.sizes["component"] == 3
        assert plain.attrs["vdbflow_labels"]["axis"]["labels"] == ["x", "y", "z"]


def test_tensorstore_refuses_zarr_python_string_arrays(tmp_path):
    """The oracle bites: what format 3 results held before (zarr-python's ``string``), tensorstore refuses."""
    labels = np.array(["u", "v", "w"], dtype=object)  # variable-length strings: zarr-python's "string" type
    xr.Dataset(coords={"component": labels}).to_zarr(tmp_path / "s.zarr", zarr_format=3, consolidated=False)
    assert json.loads((tmp_path / "s.zarr" / "component" / "zarr.json").read_text())["data_type"] == "string"
    with pytest.raises(ValueError, match="data_type"):
        tensorstore_array(tmp_path / "s.zarr", "component")


def test_bad_label_attrs_are_storage_errors():
    ds = xr.Dataset({"v": (("point", "component"), np.zeros((2, 3)))})
    for bad, message in (
        ({"component": ["u", "v"]}, r"expected the vdbflow_labels attr to map dims to \{'labels'"),
        ({"component": {"labels": ["u", "v"]}}, r"one label for each of the dim's 3 positions, got 2"),
        ({"time": {"labels": ["a"]}}, "got 1 labels for no such dim"),
        ("{not json", "expected the vdbflow_labels attr"),
    ):
        with pytest.raises(StorageError, match=message):
            labels.restore(ds.assign_attrs(vdbflow_labels=bad))
    good = ds.assign_attrs(vdbflow_labels=json.dumps({"component": {"labels": ["u", "v", "w"]}}))
    assert list(labels.restore(good)["component"].values) == ["u", "v", "w"]
