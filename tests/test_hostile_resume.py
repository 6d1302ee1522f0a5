"""Resuming against tampered manifests and other releases (issue 49 rows 10, 11, 12): a unit record that
does not cover its unit (no arrays, some arrays, other rows, missing figures, not an object) is written
again, never published as the fill value; a partial of another vdbflow release is refused naming both
versions; a NetCDF job failed in this process (a notebook) is continued by the next ``resume=True`` and
leaves nothing hidden.  The oracle: the stored objects of an uninterrupted run, byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import xarray as xr
from output_jobs import client, job, objects, same_data  # noqa: F401

import vdbflow
from vdbflow.jobs.config.model import ConfigError
from vdbflow.jobs.publish.units import Manifest

UNITS = 8  # 4,000 points in chunks of 500


def _fail_before_publishing(monkeypatch) -> None:
    """The next run fails once every unit is written and recorded (before its manifest is removed)."""

    def boom(self) -> None:
        raise RuntimeError("failed just before publishing")

    monkeypatch.setattr(Manifest, "remove", boom)


@pytest.fixture(scope="module")
def kept(tmp_path_factory, client):  # noqa: F811
    """A partial result with every unit recorded, kept by a failed ``resume=True`` run, a pristine copy of
    it, and the stored objects of the same job run uninterrupted."""
    tmp = tmp_path_factory.mktemp("kept")
    reference = objects(vdbflow.run(job(tmp, tmp / "ref.zarr"), client).output)
    with pytest.MonkeyPatch.context() as patch:
        _fail_before_publishing(patch)
        with pytest.raises(Exception, match="failed just before publishing"):
            vdbflow.run(job(tmp, tmp / "r.zarr"), client, resume=True)
    (partial,) = tmp.glob(".r.zarr.partial-*")
    shutil.copytree(partial, tmp / "pristine")
    return tmp, partial, reference


def _fresh(kept) -> tuple[Path, Path]:
    """The kept partial as it was, the published result of an earlier test removed."""
    tmp, partial, _ = kept
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(tmp / "pristine", partial)
    shutil.rmtree(tmp / "r.zarr", ignore_errors=True)
    return tmp, partial


def _unit_record(partial: Path, unit: int) -> Path:
    return partial / ".vdbflow-manifest" / "units" / f"{unit}.json"


def _remove_unit_chunks(partial: Path, unit: int, keep: set[str]) -> None:
    """The stored chunks of ``unit`` of every array but ``keep`` (as a run killed before writing them
    leaves them)."""
    for path in partial.glob(f"*/{unit}*"):
        if path.name.split(".")[0] == str(unit) and path.parent.name not in keep:
            path.unlink()


# each tampered record: what it becomes; the arrays whose chunks of the unit are then removed are those it
# does not list (a record listing no arrays: every chunk gone, which the old reader published as NaN)
TAMPER = {
    "no arrays": lambda r: {**r, "sha256": {}},
    "one array": lambda r: {**r, "sha256": dict(list(r["sha256"].items())[:1])},
    "other rows": lambda r: {**r, "rows": [0, 1]},
    "no figures": lambda r: {**r, "extras": {}},  # the old reader: a raw KeyError adding up the figures
    "figures a list": lambda r: {**r, "extras": [1]},
    "rows as text": lambda r: {**r, "rows": "0:500"},
    "a list": lambda r: [r],
    "sha256 a list": lambda r: {**r, "sha256": list(r["sha256"])},
}


@pytest.mark.parametrize("how", list(TAMPER))
def test_a_record_that_does_not_cover_its_unit_is_written_again(kept, client, how):  # noqa: F811
    tmp, partial = _fresh(kept)
    record = _unit_record(partial, 3)
    changed = TAMPER[how](json.loads(record.read_text()))
    record.write_text(json.dumps(changed))
    listed = changed.get("sha256") if isinstance(changed, dict) else None
    if isinstance(listed, dict):
        _remove_unit_chunks(partial, 3, keep=set(listed))
    result = vdbflow.run(job(tmp, tmp / "r.zarr"), client, resume=True)
    assert (result.units_kept, result.units_written) == (UNITS - 1, 1)
    assert objects(result.output) == kept[2]  # unit 3 computed again, not published as the fill value


def test_an_untampered_partial_is_kept_whole(kept, client):  # noqa: F811
    tmp, partial = _fresh(kept)
    result = vdbflow.run(job(tmp, tmp / "r.zarr"), client, resume=True)
    assert (result.units_kept, result.units_written) == (UNITS, 0)
    assert objects(result.output) == kept[2]


@pytest.mark.parametrize("then", ["0.0.1", None])
def test_a_partial_of_another_release_is_refused_naming_both(kept, client, then):  # noqa: F811
    tmp, partial = _fresh(kept)
    path = partial / ".vdbflow-manifest" / "job.json"
    record = json.loads(path.read_text())
    if then is None:
        record.pop("vdbflow_version", None)  # written before versions were recorded
    else:
        record["vdbflow_version"] = then
    path.write_text(json.dumps(record))
    with pytest.raises(ConfigError, match=r"vdbflow version: .* then, .* now") as err:
        vdbflow.run(job(tmp, tmp / "r.zarr"), client, resume=True)
    assert vdbflow.__version__ in str(err.value)
    assert (then or "did not record its version") in str(err.value)
    assert partial.exists() and not (tmp / "r.zarr").exists()


@pytest.mark.slow
def test_a_netcdf_job_failed_in_this_process_resumes_and_leaves_nothing(tmp_path, client, monkeypatch):  # noqa: F811
    """A notebook: the file task fails once every chunk is in the staging store; the next resume=True in
    the same process continues that store (no unit computed again) and leaves no hidden file."""
    import vdbflow.jobs.publish.writers.netcdf_file as netcdf

    def failed(*args) -> None:
        raise RuntimeError("the file task failed")

    cfg = job(tmp_path, tmp_path / "r.nc")
    with monkeypatch.context() as patch:
        patch.setattr(netcdf, "_write_file", failed)
        with pytest.raises(Exception, match="the file task failed"):
            vdbflow.run(cfg, client, resume=True)
    assert len(list(tmp_path.glob(".r.nc.tmp-*"))) == 1
    result = vdbflow.run(cfg, client, resume=True)
    assert (result.units_kept, result.units_written) == (UNITS, 0)
    whole = vdbflow.run(job(tmp_path, tmp_path / "whole.zarr"), client)
    with xr.open_dataset(result.output, engine="h5netcdf") as ds, xr.open_zarr(whole.output) as expected:
        same_data(ds.load(), expected.load())
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_record_in_another_unit_s_name_is_not_taken_for_that_unit(kept, client):  # noqa: F811
    """4.json claiming to be unit 3 (found by the campaign's unitrecords kind): unit 3's own record is
    kept, and unit 4, whose record is not its own, is written again."""
    tmp, partial = _fresh(kept)
    path = _unit_record(partial, 4)
    path.write_text(json.dumps({**json.loads(path.read_text()), "unit": 3}))
    assert sorted(Manifest(partial).records()) == [0, 1, 2, 3, 5, 6, 7]
    assert Manifest(partial).records()[3]["rows"] == [1500, 2000]
    result = vdbflow.run(job(tmp, tmp / "r.zarr"), client, resume=True)
    assert (result.units_kept, result.units_written) == (UNITS - 1, 1)
    assert objects(result.output) == kept[2]


def test_a_partial_of_another_host_is_not_resumed_and_said(tmp_path, caplog):
    """A replaced pod's partial: its writer cannot be checked from here, so it is not resumed (two writers
    of one partial would mix); the warning names it and the way out."""
    from vdbflow.jobs.publish.resume import resumable

    partial = tmp_path / ".r.zarr.partial-deadbeef-123@another-host"
    (partial / ".vdbflow-manifest").mkdir(parents=True)
    (partial / ".vdbflow-manifest" / "job.json").write_text(json.dumps({"config": {}, "inputs": {}}))
    with caplog.at_level("WARNING", logger="vdbflow.run"):
        assert resumable(tmp_path / "r.zarr", None, lambda target: target) is None
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "not resuming" in said and "pid 123 on another-host" in said and "vdbflow clean --force" in said
