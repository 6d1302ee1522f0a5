"""Zarr format 3 results (issue 39): ``output.zarr_format: 3`` and ``output.shard`` write a store that
``xr.open_zarr`` opens with the asked chunk and shard shapes (one object a shard), holding the values of the
same job written as format 2 (its labels kept in an attr, put back by ``vdbflow.open_result``: issue 50)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xarray as xr
from output_jobs import client, job, same_data  # noqa: F401

import vdbflow
from vdbflow.jobs.config.model import ConfigError


@pytest.fixture(scope="module")
def format_2(tmp_path_factory, client):  # noqa: F811
    tmp = tmp_path_factory.mktemp("v2")
    return vdbflow.run(job(tmp, tmp / "v2.zarr"), client).output


def test_sharded_result_opens_in_xarray_equal_to_format_2(tmp_path, client, format_2):  # noqa: F811
    result = vdbflow.run(job(tmp_path, tmp_path / "v3.zarr", shard=2_000), client)  # 4 chunks of 500 a shard
    root = json.loads((Path(result.output) / "zarr.json").read_text())
    assert root["zarr_format"] == 3 and root["attributes"]["title"] == "vdbflow run result"
    with vdbflow.open_result(result.output) as ds, xr.open_zarr(format_2) as expected:
        assert ds["velocity"].encoding["chunks"] == (500, 3)
        assert ds["velocity"].encoding["shards"] == (2_000, 3)
        assert ds["q_criterion"].encoding["shards"] == (2_000,)
        same_data(ds, expected)
    shards = sorted(p.name for p in (Path(result.output) / "velocity" / "c").iterdir())
    assert shards == ["0", "1"]  # 4,000 points: two objects, not eight


def test_format_3_without_shards(tmp_path, client, format_2):  # noqa: F811
    result = vdbflow.run(job(tmp_path, tmp_path / "v3.zarr", zarr_format=3), client)
    with vdbflow.open_result(result.output) as ds, xr.open_zarr(format_2) as expected:
        assert ds["velocity"].encoding["chunks"] == (500, 3) and ds["velocity"].encoding.get("shards") is None
        same_data(ds, expected)


def test_a_shard_that_is_no_multiple_of_the_chunk_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"output\.shard.*multiple of the stored chunk \(500 points\), got 1,200"):
        vdbflow.run(job(tmp_path, tmp_path / "v3.zarr", shard=1_200))
    assert not list(tmp_path.glob("*.zarr*"))


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ({"shard": 1_000, "zarr_format": 2}, "expected zarr_format 3 with shard"),
        ({"path": "r.nc", "zarr_format": 3}, "only with format zarr"),
        ({"zarr_format": 4}, "zarr_format"),
    ],
)
def test_bad_zarr_settings_are_refused(tmp_path, output, message):
    cfg = job(tmp_path, tmp_path / "r.zarr")
    cfg["output"].update(output)
    with pytest.raises(ConfigError, match=message):
        vdbflow.run(cfg)
