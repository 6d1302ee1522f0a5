"""Resumable jobs (issue 39): a job killed (SIGKILL of its whole process group, a lost node) or failed
mid-write leaves a partial result with a manifest; ``--resume`` / ``resume=True`` checks that the config
and inputs are the same, writes only the units that were not written and verified, and publishes a
result whose every stored object equals an uninterrupted run's, byte for byte."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import xarray as xr
from output_jobs import client, job, kill_after_units, objects, same_data, start_job, write_config  # noqa: F401

import vdbflow
from vdbflow.jobs.config.model import ConfigError

UNITS = 8  # 4,000 points in chunks of 500


@pytest.fixture(scope="module")
def reference(tmp_path_factory, client):  # noqa: F811
    """The uninterrupted run: its path, its stored objects and attrs."""
    tmp = tmp_path_factory.mktemp("reference")
    result = vdbflow.run(job(tmp, tmp / "ref.zarr"), client)
    with xr.open_zarr(result.output) as ds:
        attrs = dict(ds.attrs)
    return result, objects(result.output), attrs


def _partial(tmp_path: Path) -> Path:
    (found,) = tmp_path.glob(".r.zarr.partial-*")
    return found


def _records(partial: Path) -> dict[int, dict]:
    """The unit records of a partial result, read with json (those cut short left out)."""
    out = {}
    for path in (partial / ".vdbflow-manifest" / "units").glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        out[record["unit"]] = record
    return out


def _unit_files(partial: Path, units: set[int]) -> dict[str, int]:
    """mtime (ns) of the stored chunk files of ``units`` (first dimension index) of every array."""
    out = {}
    for path in partial.glob("*/*"):
        if path.name.split(".")[0].isdigit() and int(path.name.split(".")[0]) in units:
            out[str(path.relative_to(partial))] = path.stat().st_mtime_ns
    return out


@pytest.mark.parametrize("killed_after", [2, 5])
def test_resume_after_sigkill_equals_an_uninterrupted_run(tmp_path, client, reference, killed_after):  # noqa: F811
    """Killed after some units: the rerun keeps exactly the recorded ones (their files untouched), writes the
    others, and every stored object equals the uninterrupted run's; the summary's figures too."""
    ref, ref_objects, ref_attrs = reference
    config = write_config(tmp_path / "job.yaml", job(tmp_path, tmp_path / "r.zarr"))
    proc, marker = start_job(tmp_path, config)
    kill_after_units(proc, marker, killed_after)
    assert not (tmp_path / "r.zarr").exists()  # nothing published
    partial = _partial(tmp_path)
    recorded = _records(partial)
    assert killed_after <= len(recorded) < UNITS
    untouched = _unit_files(partial, set(recorded))
    result = vdbflow.run(config, client, resume=True)
    assert (result.units_kept, result.units_written) == (len(recorded), UNITS - len(recorded))
    after = {k: (Path(result.output) / k).stat().st_mtime_ns for k in untouched}
    assert after == untouched  # the kept units were not written again
    assert objects(result.output) == ref_objects  # every array's chunks and metadata, byte for byte
    with xr.open_zarr(result.output) as ds, xr.open_zarr(ref.output) as expected:
        same_data(ds, expected)
        for key in ("stencil_checked_points", "stencil_outside_points", "points_nonfinite", "input_sha256"):
            assert ds.attrs[key] == ref_attrs[key], key
    assert not list(tmp_path.glob(".r.zarr.*"))  # the partial result was published, nothing left beside it


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A folder holding a job (job.yaml, input.nvdb) killed after 2 units, and its partial result."""
    tmp = tmp_path_factory.mktemp("killed")
    config = write_config(tmp / "job.yaml", job(tmp, tmp / "r.zarr"))
    proc, marker = start_job(tmp, config)
    kill_after_units(proc, marker, 2)
    return tmp


def _copy_of(killed: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The killed job copied to ``tmp_path`` (times kept), its config naming the copies; the config, the
    partial result."""
    for path in killed.iterdir():
        if path.is_dir():
            shutil.copytree(path, tmp_path / path.name, copy_function=shutil.copy2)
        elif path.suffix in (".nvdb", ".yaml"):
            shutil.copy2(path, tmp_path / path.name)
    return write_config(tmp_path / "job.yaml", job(tmp_path, tmp_path / "r.zarr")), _partial(tmp_path)


def test_a_changed_config_is_refused(tmp_path, client, killed):  # noqa: F811
    config, partial = _copy_of(killed, tmp_path)
    with pytest.raises(ConfigError, match=r"points\.seed: 7 then, 8 now"):
        vdbflow.run(config, client, resume=True, points__seed=8)
    with pytest.raises(ConfigError, match=r"sampling\.outputs: .* then, .* now"):
        vdbflow.run(config, client, resume=True, sampling__outputs=["value"])
    assert partial.exists() and len(_records(partial)) >= 2  # refused: nothing touched


def test_a_changed_input_is_refused(tmp_path, client, killed):  # noqa: F811
    config, partial = _copy_of(killed, tmp_path)
    src = tmp_path / "input.nvdb"
    data = bytearray(src.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: the SHA-256 differs
    src.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=r"volume\.path: .*input\.nvdb changed"):
        vdbflow.run(config, client, resume=True)
    assert partial.exists()


def test_a_damaged_unit_is_written_again(tmp_path, client, reference, killed):  # noqa: F811
    """A recorded unit whose chunk was cut short fails verification and is written again."""
    config, partial = _copy_of(killed, tmp_path)
    recorded = _records(partial)
    victim = min(recorded)
    chunk = partial / "velocity" / f"{victim}.0"
    chunk.write_bytes(chunk.read_bytes()[:10])
    result = vdbflow.run(config, client, resume=True)
    assert (result.units_kept, result.units_written) == (len(recorded) - 1, UNITS - len(recorded) + 1)
    assert objects(result.output) == reference[1]


def test_a_rerun_without_resume_starts_over(tmp_path, client, reference, killed):  # noqa: F811
    config, partial = _copy_of(killed, tmp_path)
    result = vdbflow.run(config, client)
    assert (result.units_kept, result.units_written) == (0, UNITS)
    assert not partial.exists()  # removed by the new run's tidy, as any partial result of an exited writer
    assert objects(result.output) == reference[1]
    assert not os.path.exists(Path(result.output) / ".vdbflow-manifest")


def test_resume_without_a_partial_runs_the_whole_job(tmp_path, client, reference):  # noqa: F811
    result = vdbflow.run(job(tmp_path, tmp_path / "r.zarr"), client, resume=True)
    assert (result.units_kept, result.units_written) == (0, UNITS)
    assert objects(result.output) == reference[1]


@pytest.mark.parametrize("partitions", [None, 2])
def test_an_interrupted_notebook_run_keeps_its_partial(tmp_path, client, monkeypatch, partitions):  # noqa: F811
    """Ctrl-C in a notebook (KeyboardInterrupt while the client waits) once 2 units are recorded: the run
    keeps its partial result, and the next ``resume=True`` in the same process continues it; also for a
    volume partitioned across the workers (its edge tally kept chunk by chunk)."""
    import time

    gather = client.gather

    def interrupted(*args, **kwargs):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = list(tmp_path.glob(".r.zarr.partial-*/.vdbflow-manifest/units/*.json"))
            if len(found) >= 2:
                raise KeyboardInterrupt
            time.sleep(0.01)
        return gather(*args, **kwargs)

    cfg = job(tmp_path, tmp_path / "r.zarr", count=40_000, chunk=5_000)  # 8 units, slow enough to stop
    cfg["partitions"] = partitions
    with monkeypatch.context() as patch:
        patch.setattr(client, "gather", interrupted)
        with pytest.raises(KeyboardInterrupt):
            vdbflow.run(cfg, client, resume=True)
    partial = _partial(tmp_path)
    recorded = _records(partial)
    assert 2 <= len(recorded) <= UNITS
    result = vdbflow.run(cfg, client, resume=True)
    assert (result.units_kept, result.units_written) == (len(recorded), UNITS - len(recorded))
    whole = job(tmp_path, tmp_path / "whole.zarr", count=40_000, chunk=5_000)
    whole["partitions"] = partitions
    again = vdbflow.run(whole, client)
    assert objects(result.output) == objects(again.output)
    assert (result.edge_checked, result.edge_outside) == (again.edge_checked, again.edge_outside)
    assert result.partitions == again.partitions == (partitions or 0)


def test_a_netcdf_job_resumes_from_the_store_of_its_chunks(tmp_path, client, reference):  # noqa: F811
    """A NetCDF job writes its chunks to a hidden Zarr store first: killed there, it resumes from it."""
    config = write_config(tmp_path / "job.yaml", job(tmp_path, tmp_path / "r.nc"))
    proc, marker = start_job(tmp_path, config)
    kill_after_units(proc, marker, 3)
    (staging,) = tmp_path.glob(".r.nc.tmp-*")
    recorded = _records(staging)
    result = vdbflow.run(config, client, resume=True)
    assert (result.units_kept, result.units_written) == (len(recorded), UNITS - len(recorded))
    with xr.open_dataset(result.output, engine="h5netcdf") as ds, xr.open_zarr(reference[0].output) as expected:
        same_data(ds.load(), expected.load())
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_resumed_summary_says_what_was_kept(tmp_path, client, killed):  # noqa: F811
    """Issue 50, row 8: the summary of a resumed run says how many units it kept and its throughput counts
    only the points it sampled now (those of the units it wrote: chunks and units are both 500 points)."""
    from rich.console import Console

    from vdbflow.jobs.cli.main import _print_summary

    config, partial = _copy_of(killed, tmp_path)
    kept = len(_records(partial))
    result = vdbflow.run(config, client, resume=True)
    assert result.resumed and result.units_kept == kept
    assert result.points == 4_000 and result.points_sampled == 500 * (UNITS - kept)
    assert result.throughput == pytest.approx(result.points_sampled / result.timings["sample_and_write_s"])
    console = Console(record=True, width=300)
    _print_summary(result, console)
    text = console.export_text()
    row = f"{kept} of {UNITS} units kept from the partial result (verified); {UNITS - kept} written now"
    assert re.search(rf"resumed\W+{re.escape(row)}", text), text
    assert f"counting the {500 * (UNITS - kept):,} points sampled now" in text


def test_a_run_that_resumes_nothing_counts_every_point(tmp_path, client):  # noqa: F811
    result = vdbflow.run(job(tmp_path, tmp_path / "r.zarr"), client)
    assert not result.resumed and result.points_sampled is None
    assert result.throughput == pytest.approx(4_000 / result.timings["sample_and_write_s"])


def test_points_sampled_counts_the_chunks_the_written_units_overlap():
    """Chunks of 300 points, units of 500: unit 0 kept, unit 1 ([500, 1000)) needs chunks 1-3 (700 points)."""
    import numpy as np

    from vdbflow.jobs.publish.units import UnitPlan

    plan = UnitPlan("t", None, np.array([0, 300, 600, 900, 1000]))
    plan.assign(np.array([0, 500, 1000]))
    assert plan.points_sampled() == 1000
    plan.done = {0: {}}
    assert plan.points_sampled() == 700
    plan.done = {1: {}}
    assert plan.points_sampled() == 600  # chunks 0 and 1 ([0, 600)) overlap unit 0
    plan.done = {0: {}, 1: {}}
    assert plan.points_sampled() == 0
