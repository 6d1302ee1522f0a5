"""Periods at the command line and in job configs: ``convert --periodic``, ``vdbflow info``, ``volume.periodic``
(docs/periodic.md), against volumes made periodic in Python and sampled in one process."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
import yaml
from test_cli import invoke

import vdbflow
from vdbflow.core.periodic import Periodicity


def test_convert_periodic_takes_the_dense_array_as_one_period(tmp_path, rng):
    data = rng.standard_normal((20, 12, 9)).astype(np.float32)
    data[:, 0, :] = 0.0  # a plane equal to the background: inactive, yet inside the period
    np.save(tmp_path / "box.npy", data)
    result = invoke("convert", tmp_path / "box.npy", tmp_path / "box.nvdb", "--periodic", "x,y")
    assert result.exit_code == 0, result.output
    assert "periodic x: 20 voxels from 0, y: 12 voxels from 0, z: no" in result.output
    vol = vdbflow.open(str(tmp_path / "box.nvdb"))
    assert vol.periodic == Periodicity((0, 0, 0), (20, 12, 0))
    want = vdbflow.Volume.from_dense(data, periodic="xy", name=vol.name)
    pts = rng.uniform(-30, 30, (2000, 3))
    np.testing.assert_array_equal(
        vol.sample_grad(pts, mode="lag4", space="index")[f"{vol.name}_jacobian"].values,
        want.sample_grad(pts, mode="lag4", space="index")[f"{vol.name}_jacobian"].values,
    )
    bad = invoke("convert", tmp_path / "box.npy", tmp_path / "bad.nvdb", "--periodic", "xq")
    assert bad.exit_code == 2 and "expected periodic axes named among x, y, z" in bad.output
    assert not (tmp_path / "bad.nvdb").exists()


def test_info_shows_the_periods(tmp_path, rng):
    vdbflow.Volume.from_dense(rng.standard_normal((16, 8, 8)), periodic="z").to_nvdb(str(tmp_path / "p.nvdb"))
    vdbflow.Volume.from_dense(rng.standard_normal((8, 8, 8))).to_nvdb(str(tmp_path / "q.nvdb"))
    text = invoke("info", tmp_path / "p.nvdb", tmp_path / "q.nvdb", columns=200).output
    rows = [line.split("│")[2].strip() for line in text.splitlines() if line.startswith("│ periodic ")]
    assert rows == ["x: no, y: no, z: 8 voxels from 0", "no"]
    grid = json.loads(invoke("info", "--json", tmp_path / "p.nvdb").output)[0]["grids"][0]
    assert grid["periodic"] == {"lo": [0, 0, 0], "size": [0, 0, 8]}


@pytest.mark.slow
def test_job_volume_periodic_for_a_file_and_a_synthetic_field(tmp_path, rng):
    data = rng.standard_normal((24, 24, 24, 3)).astype(np.float32)
    vdbflow.Volume.from_dense(data, name="u").to_nvdb(str(tmp_path / "box.nvdb"))  # no periods stored
    pts = np.concatenate([rng.uniform(-0.5, 23.5, (3000, 3)), rng.uniform(-40, 40, (1000, 3))])
    np.save(tmp_path / "pts.npy", pts)
    want = vdbflow.Volume.from_dense(data, name="u", periodic=True).sample_grad(pts, mode="lag6", space="index")
    for partitions in (None, 2):
        cfg = {
            "volume": {"path": str(tmp_path / "box.nvdb"), "periodic": True},
            "points": {"kind": "file", "path": str(tmp_path / "pts.npy"), "space": "index", "chunk": 1500},
            "sampling": {"mode": "lag6"},
            "cluster": {"kind": "local", "workers": 1, "dashboard": False},
            "output": {"path": str(tmp_path / f"out-{partitions}.zarr")},
            **({"partitions": partitions} if partitions else {}),
        }
        (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
        result = invoke("run", tmp_path / "job.yaml")
        assert result.exit_code == 0, result.output
        got = xr.open_zarr(tmp_path / f"out-{partitions}.zarr")
        assert got.attrs["periodic_axes"] == "xyz"
        for var in ("u", "u_jacobian"):
            np.testing.assert_array_equal(got[var].values, want[var].values, err_msg=var)
    # a synthetic Taylor-Green box is periodic unless the config says otherwise
    for periodic, axes in ((None, "xyz"), (False, None)):
        volume = {"synthetic": {"field": "taylor_green", "resolution": 16}}
        if periodic is not None:
            volume["periodic"] = periodic
        cfg = {
            "volume": volume,
            "points": {"kind": "random", "count": 500, "chunk": 500},
            "cluster": {"kind": "local", "workers": 1, "dashboard": False},
            "output": {"path": str(tmp_path / f"tg-{periodic}.zarr")},
        }
        (tmp_path / "tg.yaml").write_text(yaml.safe_dump(cfg))
        assert invoke("run", tmp_path / "tg.yaml").exit_code == 0
        assert xr.open_zarr(tmp_path / f"tg-{periodic}.zarr").attrs.get("periodic_axes") == axes
    bad = {**cfg, "volume": {"synthetic": {"field": "abc"}, "periodic": "xyw"}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    result = invoke("run", tmp_path / "bad.yaml")
    assert result.exit_code == 2 and "volume.periodic" in result.output


@pytest.mark.slow
def test_particle_job_in_a_periodic_box_reports_unwrapped_and_wrapped_positions(tmp_path):
    cfg = {
        "volume": {"synthetic": {"field": "abc", "resolution": 24, "shell": [0.0, 0.9]}},  # periodic by default
        "points": {"kind": "line", "start": [0.3, 0.4, 0.5], "end": [6.0, 5.0, 4.0], "count": 40, "chunk": 20},
        "sampling": {"mode": "linear"},
        "advect": {"t0": 0.0, "t1": 8.0, "dt": 0.05, "save_every": 10},
        "cluster": {"kind": "local", "workers": 1, "dashboard": False},
        "output": {"path": str(tmp_path / "tracks.zarr")},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(cfg))
    result = invoke("run", tmp_path / "job.yaml")
    assert result.exit_code == 0, result.output
    got = xr.open_zarr(tmp_path / "tracks.zarr")
    vol = vdbflow.synthetic.flow_volume(vdbflow.synthetic.abc_flow(), 24, inner=0.0, outer=0.9)
    seeds = np.stack([got[c].values for c in "xyz"], axis=-1)  # the line's points, as the job drew them
    want = vdbflow.advect(vol, seeds, 0.0, 8.0, 0.05, mode="linear", save_every=10)
    np.testing.assert_array_equal(got["position"].values, want["position"].values)
    assert (got["status"].values == 0).all()  # nobody leaves a periodic box
    turns = (got["position"].values - got["position_wrapped"].values) / (2 * np.pi)
    np.testing.assert_allclose(turns, np.round(turns), atol=1e-9)
    assert np.abs(turns).max() >= 1  # some particle crossed a face
    assert got.attrs["periodic"].startswith("x: 24 voxels from 0")
