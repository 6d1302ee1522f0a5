"""Job configs at URLs (issue 50, row 6): ``vdbflow run s3://bucket/job.yaml`` reads the object through fsspec
(credentials and endpoint from the environment), with the same checks as a local config; a missing object is
"found nothing", an oversized one is refused before it is parsed. Relative paths in it stay relative to the
current directory, as in a local config."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner
from output_jobs import job, write_config

from vdbflow.jobs.cli.main import main
from vdbflow.jobs.config.load import MAX_CONFIG_BYTES, load_config
from vdbflow.jobs.config.model import ConfigError


@pytest.fixture
def s3_env(s3, monkeypatch):
    """The moto server as the environment's S3 endpoint (as AWS_ENDPOINT_URL names one for boto3 and s3fs).
    fsspec keeps one S3 filesystem per set of options: one an earlier test made without this endpoint would
    be reused (and reach AWS), so the cache is cleared on both sides of the test."""
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint_url)
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3
    s3fs.S3FileSystem.clear_instance_cache()


def test_a_config_on_s3_loads_as_the_same_file_does(s3_env, tmp_path):
    cfg = job(tmp_path, tmp_path / "r.zarr")
    local = write_config(tmp_path / "job.yaml", cfg)
    url = f"s3://{s3_env.bucket()}/configs/job.yaml"
    s3_env.put(url, local.read_bytes())
    assert load_config(url).model_dump() == load_config(local).model_dump()
    assert load_config(url, ["points.count=123"]).points.count == 123


def test_vdbflow_run_dry_run_reads_a_config_on_s3(s3_env, tmp_path):
    url = f"s3://{s3_env.bucket()}/job.yaml"
    s3_env.put(url, yaml.safe_dump(job(tmp_path, tmp_path / "r.zarr")).encode())
    result = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["run", url, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "4,000" in result.output and "found nothing" not in result.output


def test_a_missing_or_bad_config_object_is_a_config_error(s3_env, tmp_path):
    bucket = s3_env.bucket()
    with pytest.raises(ConfigError, match=rf"expected a config file, found nothing at s3://{bucket}/no\.yaml"):
        load_config(f"s3://{bucket}/no.yaml")
    s3_env.put(f"s3://{bucket}/big.yaml", b"#" * (MAX_CONFIG_BYTES + 10))
    with pytest.raises(ConfigError, match="expected a config of at most"):
        load_config(f"s3://{bucket}/big.yaml")
    s3_env.put(f"s3://{bucket}/bad.yaml", b"\xff\xfe not text")
    with pytest.raises(ConfigError, match=rf"cannot read the config file s3://{bucket}/bad\.yaml"):
        load_config(f"s3://{bucket}/bad.yaml")
    s3_env.put(f"s3://{bucket}/typo.yaml", yaml.safe_dump({"volum": {}}).encode())
    with pytest.raises(ConfigError, match=rf"job config s3://{bucket}/typo\.yaml:\n.*volum"):
        load_config(f"s3://{bucket}/typo.yaml")


def test_a_config_at_a_memory_url(tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/vdbflow-config-test/job.yaml", yaml.safe_dump(job(tmp_path, tmp_path / "r.zarr")).encode())
    try:
        assert load_config("memory://vdbflow-config-test/job.yaml").points.count == 4_000
    finally:
        fs.rm("/vdbflow-config-test", recursive=True)
