"""Hostile and faulty series (issue 23, rows 4, 9, 15, 16): steps replaced after the series was
opened, time records that disagree, steps in different units or component order, bad times,
prefixes that leave the directory."""

import hashlib
import os
import pickle

import numpy as np
import pytest

import vdbflow
from vdbflow.errors import TimeError, VolumeError
from vdbflow.synthetic import unsteady
from vdbflow.temporal.series import StepChangedError, StepIdentity

GYRE = unsteady.double_gyre()
TIMES = [0.0, 0.5, 1.0]
POINT = np.array([[0.5, 0.5, 0.0]])


def _series(tmp_path, times=TIMES):
    return unsteady.write_series(GYRE, tmp_path / "s", times, voxel_size=1 / 8, pad=2)


def _replace(path, t, **changes):
    """Write-and-rename a new step at ``path`` (the field at time ``t``, with attributes ``changes``)."""
    vol = unsteady.field_volume(GYRE, t, 1 / 8, pad=2)
    for name, value in changes.items():
        setattr(vol, name, value)
    vol.to_nvdb(f"{path}.new")
    os.replace(f"{path}.new", path)


def test_a_step_replaced_after_open_series_is_refused_when_opened(tmp_path):
    paths = _series(tmp_path)
    series = vdbflow.open_series(str(tmp_path / "s" / "*.nvdb"))
    series.volume(0)
    recorded = StepIdentity.of(paths[2])
    _replace(paths[2], 0.75)  # same name, new inode, another time record
    with pytest.raises(StepChangedError, match="as the series was opened") as err:
        series.sample(POINT, 0.9)
    message = str(err.value)
    assert paths[2] in message and f"inode {recorded.inode}" in message  # which file, recorded and found
    assert f"inode {os.stat(paths[2]).st_ino}" in message and "when step 2 was opened" in message
    assert isinstance(err.value, VolumeError)
    np.testing.assert_array_equal(series.sample(POINT, 0.25).velocity, series.sample(POINT, 0.25).velocity)


def test_a_pickled_series_carries_the_identities_to_workers(tmp_path):
    """A worker unpickles the series after the file was replaced: refused there, not sampled."""
    paths = _series(tmp_path)
    shipped = pickle.dumps(vdbflow.open_series(str(tmp_path / "s" / "*.nvdb")))
    _replace(paths[1], 0.5)  # even the same content at the same time: another file
    worker = pickle.loads(shipped)
    with pytest.raises(StepChangedError, match=paths[1].replace("/", "/")):
        worker.volume(1)
    assert worker.volume(0).name == "velocity"


def test_series_files_of_a_job_refuse_a_replaced_step_on_the_worker(tmp_path):
    """The job's SeriesFiles record identities on the client; a worker opening the series (or a
    chunk task advecting through it) after the replacement raises, and the hash checks them too."""
    from vdbflow.jobs.particles import SeriesFiles, _advect_chunk

    paths = _series(tmp_path)
    files = SeriesFiles(tuple(paths), None, None, 4)
    assert files.identities[0].sha256() == hashlib.sha256(open(paths[0], "rb").read()).hexdigest()
    shipped = pickle.loads(pickle.dumps(files))
    assert shipped.identities == files.identities
    _replace(paths[2], 2.0)
    settings = dict(t0=0.0, t1=1.0, dt=0.25, method="rk4", mode="linear", save_every=1, outputs=[], time="linear")
    settings["device"] = "cpu"
    with pytest.raises(StepChangedError, match="when its header was read"):
        _advect_chunk(shipped, POINT, settings)
    with pytest.raises(StepChangedError, match="when it was hashed"):
        files.identities[2].sha256()
    given = SeriesFiles(tuple(paths), tuple(TIMES), None, 4, files.identities)  # times given: no headers read
    with pytest.raises(StepChangedError, match="when step 2 was opened"):
        _advect_chunk(given, POINT, settings)


def test_a_step_whose_time_record_changed_is_refused(tmp_path):
    vols = [unsteady.field_volume(GYRE, t, 1 / 8, pad=2) for t in TIMES]
    series = vdbflow.open_series(vols)  # times from the steps' records
    from vdbflow.io.time_record import time_record

    vols[1].blind_data = (time_record(0.7),)
    with pytest.raises(TimeError, match=r"record of t=0.5 \(what the series was opened with\), found t=0.7"):
        series.volume(1)
    vols[2].blind_data = ()
    with pytest.raises(TimeError, match="found none"):
        series.volume(2)
    # times given explicitly: the records are not what the series is timed by
    assert vdbflow.open_series(vols, times=[0, 1, 2]).volume(1) is vols[1]


@pytest.mark.parametrize(
    "change, found",
    [
        ({"units": "km/h"}, "units 'm/s', got 'km/h'"),
        ({"units": None}, "units 'm/s', got None"),
        ({"length_units": "mm"}, "length_units 'm', got 'mm'"),
        ({"component_names": ("v", "u", "w")}, "component names ['u', 'v', 'w'], got ['v', 'u', 'w']"),
    ],
    ids=["units", "no-units", "length-units", "component-order"],
)
def test_steps_in_other_units_or_component_order_are_refused(tmp_path, change, found):
    paths = _series(tmp_path)
    _replace(paths[1], 0.5, **change)
    with pytest.raises(VolumeError, match="expected .* on the grid of .*") as err:
        vdbflow.open_series(str(tmp_path / "s" / "*.nvdb"))  # headers read: refused here
    assert found in str(err.value) and paths[1] in str(err.value) and paths[0] in str(err.value)
    series = vdbflow.open_series(paths, times=TIMES)  # no headers read: refused when the step opens
    with pytest.raises(VolumeError) as err:
        series.sample(POINT, 0.25)
    assert found in str(err.value) and paths[1] in str(err.value) and paths[0] in str(err.value)


def test_equivalent_unit_spellings_are_one_series(tmp_path):
    paths = _series(tmp_path)
    _replace(paths[1], 0.5, units="m s-1")
    series = vdbflow.open_series(str(tmp_path / "s" / "*.nvdb"))
    assert np.isfinite(series.sample(POINT, 0.75).velocity).all()


@pytest.mark.parametrize("times", [["a", "b", "c"], [[0.0], 1.0, 2.0], {"t": 1}], ids=["strings", "ragged", "dict"])
def test_times_that_are_not_numbers_are_a_time_error(tmp_path, times):
    with pytest.raises(TimeError, match="expected times as real numbers"):
        vdbflow.open_series(_series(tmp_path), times=times)


@pytest.mark.parametrize("prefix", ["../../x", "a/b", "/abs", "x\0y"])
def test_write_series_refuses_a_prefix_that_leaves_its_directory(tmp_path, prefix):
    with pytest.raises(VolumeError, match="expected a prefix"):
        unsteady.write_series(GYRE, tmp_path / "d", [0.0], voxel_size=1 / 8, pad=2, prefix=prefix)
    assert not any(p.suffix == ".nvdb" for p in tmp_path.rglob("*"))


def test_a_series_file_replaced_while_a_job_runs_fails_it_and_publishes_nothing(tmp_path, monkeypatch):
    """The file is swapped (write-and-rename) after the job opened the series on the client and
    before the workers open it: the workers refuse it (exit 1, naming the file), nothing published."""
    from test_run import base_config, invoke, write_config

    from vdbflow.jobs import executors as runner

    paths = _series(tmp_path)
    original = runner._particle_job

    def then_replace(*args, **kwargs):
        result = original(*args, **kwargs)
        _replace(paths[1], 0.5)
        return result

    monkeypatch.setattr(runner, "_particle_job", then_replace)
    cfg = base_config(
        tmp_path,
        volume={"series": {"paths": str(tmp_path / "s" / "*.nvdb")}},
        points={"kind": "line", "start": [0.5, 0.5, 0.0], "end": [1.5, 0.5, 0.0], "count": 20, "chunk": 10},
        advect={"t1": 1.0, "dt": 0.1},
        cluster={"kind": "local", "workers": 1, "dashboard": False},
    )
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 1, result.output
    assert paths[1] in result.output and "another process replaced or rewrote it" in result.output
    assert not (tmp_path / "result.zarr").exists()


def test_identities_that_do_not_name_a_step_are_refused(tmp_path):
    """Given identities must cover every step: a fresh identity for a path spelled otherwise would
    check the file against itself."""
    paths = _series(tmp_path)
    recorded = [StepIdentity.of(p) for p in paths[:2]]
    with pytest.raises(StepChangedError, match=r"found none for .*s_0002\.nvdb|found none for .*0002"):
        vdbflow.open_series(paths, identities=recorded)
    assert len(vdbflow.open_series(paths, identities=[StepIdentity.of(p) for p in paths])) == 3
