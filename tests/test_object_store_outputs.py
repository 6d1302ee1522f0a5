"""Job outputs on object stores (issue 39): a job writing to ``s3://`` (moto's S3 server on 127.0.0.1) or
``memory://`` publishes a store that xarray opens equal, object for object, to the same job written to a
local path; a URL is never taken for a local folder; a job killed before publishing leaves the earlier
result intact, one killed while publishing leaves no store at all (never a mixture) and the next run or
``vdbflow clean`` finishes it; a killed job on S3 resumes there."""

from __future__ import annotations

from pathlib import Path

import pytest
import xarray as xr
from click.testing import CliRunner
from output_jobs import client, job, kill_after_units, objects, same_data, start_job, write_config  # noqa: F401

import vdbflow
from vdbflow.jobs.cli.main import main
from vdbflow.jobs.publish.output import tidy


@pytest.fixture(scope="module")
def local(tmp_path_factory, client):  # noqa: F811
    """The same jobs (seeds 7 and 8) written to local paths: their stored objects by seed."""
    tmp = tmp_path_factory.mktemp("local")
    out = {}
    for seed in (7, 8):
        cfg = job(tmp, tmp / f"s{seed}.zarr")
        cfg["points"]["seed"] = seed
        out[seed] = objects(vdbflow.run(cfg, client).output)
    return out, tmp


def _job(tmp_path: Path, url: str, seed: int = 7, options: dict | None = None, **output) -> dict:
    cfg = job(tmp_path, url, **output)
    cfg["points"]["seed"] = seed
    if options is not None:
        cfg["output"]["storage_options"] = options
    return cfg


def test_a_job_to_s3_publishes_what_a_local_job_writes(s3, tmp_path, client, local, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    bucket = s3.bucket()
    url = f"s3://{bucket}/runs/out.zarr"
    result = vdbflow.run(_job(tmp_path, url, options=s3.storage_options), client)
    assert result.output == url
    assert objects(url, s3.storage_options) == local[0][7]  # every chunk and array metadata, byte for byte
    with (
        xr.open_zarr(url, storage_options=s3.storage_options) as ds,
        xr.open_zarr(local[1] / "s7.zarr") as expected,
    ):
        same_data(ds, expected)
        assert ds.attrs["title"] == "vdbflow run result"
    keys = [k.removeprefix(f"{bucket}/") for k in s3.filesystem().find(bucket)]
    assert keys and all(k.startswith("runs/out.zarr/") for k in keys)  # no hidden prefix, no manifest left
    assert not any(".vdbflow-manifest" in k for k in keys)
    assert not Path("s3:").exists() and not list(tmp_path.glob("s3*"))  # never a local folder


def test_a_url_is_never_written_as_a_local_folder(s3, tmp_path, monkeypatch):
    """The old failure: --set output.path=s3://bucket/out.zarr wrote ./s3:/bucket/out.zarr and exited 0."""
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path / "job.yaml", _job(tmp_path, tmp_path / "r.zarr", options=None))
    runner = CliRunner(env={"COLUMNS": "250"})
    missing = "s3://vdbflow-no-such-bucket/out.zarr"
    result = runner.invoke(
        main,
        [
            "run",
            str(config),
            "--set",
            f"output.path={missing}",
            "--set",
            f"output.storage_options={s3.storage_options}",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "expected the bucket of s3://vdbflow-no-such-bucket/out.zarr to exist" in result.output
    result = runner.invoke(
        main, ["run", str(config), "--set", "output.path=s3://x/out.zarr", "--set", "output.storage_options={a: 1}"]
    )
    assert result.exit_code == 2, result.output
    assert not Path("s3:").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["input.nvdb", "job.yaml"]


def test_memory_store_replaces_an_earlier_result(memory_fs, tmp_path, client, local):  # noqa: F811
    url = f"{memory_fs}/out.zarr"
    vdbflow.run(_job(tmp_path, url, seed=7), client)
    assert objects(url) == local[0][7]
    vdbflow.run(_job(tmp_path, url, seed=8, overwrite="always"), client)
    assert objects(url) == local[0][8]
    import fsspec

    fs, root = fsspec.core.url_to_fs(memory_fs)
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)] == ["out.zarr"]  # nothing hidden left


def test_a_job_killed_while_publishing_leaves_no_mixture(memory_fs, tmp_path, client, local, monkeypatch):  # noqa: F811
    """Killed after the body was copied, before the root metadata: no store opens at the URL (the earlier
    result's root metadata went first), the record says what was being published, and tidy finishes it."""
    import vdbflow.jobs.publish.remote as remote

    url = f"{memory_fs}/out.zarr"
    vdbflow.run(_job(tmp_path, url, seed=7), client)
    copy_root = remote.ROOT_METADATA

    def killed(fs, source, final):
        monkeypatch.setattr(remote, "ROOT_METADATA", ())  # steps 2-3 on the body only ...
        old = [k for k in objects(url)]
        for name in copy_root:  # ... the earlier root metadata removed first, as roll_forward does
            if fs.exists(f"{final}/{name}"):
                fs.rm_file(f"{final}/{name}")
        body = [k for k in remote._objects(fs, source) if k not in copy_root]
        fs.copy([f"{source}/{k}" for k in body], [f"{final}/{k}" for k in body])
        assert old  # the earlier result was there
        raise KeyboardInterrupt("killed while publishing")

    monkeypatch.setattr(remote, "roll_forward", killed)
    with pytest.raises(KeyboardInterrupt):
        vdbflow.run(_job(tmp_path, url, seed=8, overwrite="always"), client)
    monkeypatch.undo()
    with pytest.raises((FileNotFoundError, KeyError, ValueError, OSError)):
        xr.open_zarr(url).load()  # no store: never the earlier root metadata over new chunks
    import fsspec

    fs, root = fsspec.core.url_to_fs(memory_fs)
    names = [p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
    assert any(n.startswith(".out.zarr.publishing-") for n in names), names
    lines = tidy(url)  # the next run's tidy, or vdbflow clean
    assert any(line.startswith(f"finished publishing {url}") for line in lines), lines
    assert objects(url) == local[0][8]
    assert [p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)] == ["out.zarr"]


def test_a_job_killed_on_s3_keeps_the_earlier_result_and_resumes(s3, tmp_path, client, local):  # noqa: F811
    """SIGKILL of the whole job (client and workers) at two points: the earlier result stays, object for
    object; --resume then continues the partial prefix and publishes the new result."""
    bucket = s3.bucket()
    url = f"s3://{bucket}/out.zarr"
    vdbflow.run(_job(tmp_path, url, seed=7, options=s3.storage_options), client)
    config = write_config(
        tmp_path / "job.yaml", _job(tmp_path, url, seed=8, options=s3.storage_options, overwrite="always")
    )
    for units in (1, 4):
        proc, marker = start_job(tmp_path, config)
        kill_after_units(proc, marker, units)
        assert objects(url, s3.storage_options) == local[0][7]
        with xr.open_zarr(url, storage_options=s3.storage_options) as ds:
            assert int(ds.attrs["vdbflow_config"].count("seed: 7")) == 1
    partials = [k for k in s3.filesystem().ls(bucket, detail=False) if ".out.zarr.partial-" in k]
    assert partials
    result = vdbflow.run(config, client, resume=True)
    assert result.units_kept >= 4 and result.units_kept + result.units_written == 8
    assert objects(url, s3.storage_options) == local[0][8]
    assert s3.filesystem().ls(bucket, detail=False) == [f"{bucket}/out.zarr"]
