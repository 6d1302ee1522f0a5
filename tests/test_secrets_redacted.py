"""Credentials never stored with a result nor printed (issue 49 row 9): ``user:password@``, presigned
``X-Amz-Signature`` / ``X-Amz-Credential`` / ``X-Amz-Security-Token`` (and Google's, Azure's ``sig``) in a
URL, and credential-like ``storage_options`` (adlfs' ``connection_string`` included) are ``<redacted>`` in
the result's ``vdbflow_config``, in the CLI's messages and log, and in a ``StorageError``; the job itself
reads the real URL (a local HTTP server that checks the URL's user and password serves the input), also
when a config object is run with overrides."""

from __future__ import annotations

import base64
import http.server
import threading
from pathlib import Path

import pytest
import xarray as xr
import yaml
from click.testing import CliRunner
from output_jobs import client, job, volume_file, write_config  # noqa: F401

import vdbflow
from vdbflow.io.location import storage_error
from vdbflow.io.redact import redact, redact_text, redact_url
from vdbflow.jobs.cli.main import main
from vdbflow.jobs.config.load import dump_config, load_config

SECRETS = ("hunter2", "SIGNATURE0123", "AKIAEXAMPLE", "SESSIONTOKEN9", "AccountKey=abc", "azuresig")
QUERY = (
    "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F20261206%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20261206T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
    "&X-Amz-Security-Token=SESSIONTOKEN9&X-Amz-Signature=SIGNATURE0123"
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://alice:hunter2@example.org/a.nvdb", "https://<redacted>@example.org/a.nvdb"),
        ("https://hunter2@example.org/a.nvdb", "https://<redacted>@example.org/a.nvdb"),
        (
            f"https://b.s3.amazonaws.com/a.nvdb?{QUERY}",
            "https://b.s3.amazonaws.com/a.nvdb?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=<redacted>"
            "&X-Amz-Date=20261206T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
            "&X-Amz-Security-Token=<redacted>&X-Amz-Signature=<redacted>",
        ),
        ("https://a.blob.core.windows.net/c/a.nvdb?sv=2022&sp=r&sig=azuresig", None),
        ("s3://bucket/key@v2/a.nvdb", "s3://bucket/key@v2/a.nvdb"),  # an @ in the key is no userinfo
        ("https://example.org/a.nvdb?version=3#part", "https://example.org/a.nvdb?version=3#part"),
    ],
)
def test_redact_url(url, expected):
    got = redact_url(url)
    if expected is not None:
        assert got == expected
    assert not any(s in got for s in SECRETS)
    assert redact_url(got) == got  # idempotent


def test_redact_options_and_text():
    options = {
        "connection_string": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc;EndpointSuffix=x",
        "account_name": "a",
        "client_kwargs": {"region_name": "us-east-1", "aws_session_token": "SESSIONTOKEN9"},
        "endpoint_url": "https://alice:hunter2@minio.local:9000",
        "anon": False,
    }
    out = redact(options)
    assert out["connection_string"] == "<redacted>" and out["client_kwargs"]["aws_session_token"] == "<redacted>"
    assert out["account_name"] == "a" and out["anon"] is False and out["client_kwargs"]["region_name"] == "us-east-1"
    assert out["endpoint_url"] == "https://<redacted>@minio.local:9000"
    text = f"expected to read https://alice:hunter2@h/x.nvdb?{QUERY} (and s3://b/k), got 403"
    said = redact_text(text)
    assert not any(s in said for s in SECRETS) and "(and s3://b/k), got 403" in said


def test_a_storage_error_names_the_url_without_its_secrets():
    err = storage_error(f"https://alice:hunter2@example.org/a.nvdb?{QUERY}", PermissionError("403 Forbidden"))
    assert "https://<redacted>@example.org/a.nvdb?" in str(err) and "403 Forbidden" in str(err)
    assert not any(s in str(err) for s in SECRETS)


def test_the_stored_config_has_no_secrets(tmp_path):
    cfg = job(tmp_path, "memory://bucket/out.zarr")
    cfg["volume"] = {"path": f"https://alice:hunter2@example.org/v.nvdb?{QUERY}"}
    cfg["points"] = {"kind": "file", "path": "https://example.org/p.npy?sv=1&sig=azuresig", "chunk": 500}
    cfg["output"]["storage_options"] = {"key": "AKIAEXAMPLE", "secret": "hunter2", "token": "SESSIONTOKEN9"}
    loaded = load_config(data=cfg)
    assert "hunter2" in str(loaded.volume.path)  # what is read keeps the real URL
    stored = dump_config(loaded)
    assert not any(s in stored for s in SECRETS), stored
    back = yaml.safe_load(stored)
    assert back["output"]["storage_options"] == {"key": "<redacted>", "secret": "<redacted>", "token": "<redacted>"}
    assert back["volume"]["path"].startswith("https://<redacted>@example.org/v.nvdb?X-Amz-Algorithm=AWS4-HMAC-SHA256")


AUTH = "Basic " + base64.b64encode(b"alice:hunter2").decode()


class _Ranges(http.server.BaseHTTPRequestHandler):
    """GET/HEAD of the files of ``root`` with byte ranges (``Range: bytes=A-B``) for the URL's user and
    password only (basic auth); the query is ignored, as a store that accepted the signature would."""

    root: Path

    def log_message(self, *args) -> None:  # no request lines in the test log
        pass

    def _file(self) -> bytes | None:
        path = self.root / self.path.split("?", 1)[0].lstrip("/")
        return path.read_bytes() if path.is_file() else None

    def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
        self._answer(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        if self.headers.get("Authorization") != AUTH:  # the userinfo of the URL, as basic auth
            self.send_error(401)
            return
        data = self._file()
        if data is None:
            self.send_error(404)
            return
        status, part = 200, data
        wanted = self.headers.get("Range", "")
        if wanted.startswith("bytes="):
            lo, _, hi = wanted[6:].partition("-")
            start, stop = int(lo), min(int(hi) + 1 if hi else len(data), len(data))
            status, part = 206, data[start:stop]
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(part)))
        self.send_header("ETag", f'"{len(data)}"')
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if body:
            self.wfile.write(part)


@pytest.fixture
def http_root(tmp_path):
    """A local HTTP server over ``tmp_path/www`` (it ignores userinfo and query strings); yields its URL."""
    root = tmp_path / "www"
    root.mkdir()
    handler = type("Handler", (_Ranges,), {"root": root})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://alice:hunter2@127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_job_reading_a_secret_url_stores_and_prints_no_secret(tmp_path, client, http_root):  # noqa: F811
    root, base = http_root
    volume = volume_file(tmp_path)
    (root / "input.nvdb").write_bytes(volume.read_bytes())
    cfg = job(tmp_path, tmp_path / "out.zarr", count=1_000)
    cfg["volume"] = {"path": f"{base}/input.nvdb?{QUERY}"}
    result = vdbflow.run(cfg, client)
    with xr.open_zarr(result.output) as ds:
        stored = ds.attrs["vdbflow_config"] + str(ds.attrs)
    assert "input.nvdb" in stored and not any(s in stored for s in SECRETS), stored
    # the same job with a missing input: the CLI's error names the URL, not its secrets
    cfg["volume"] = {"path": f"{base}/missing.nvdb?{QUERY}"}
    cfg["output"]["path"] = str(tmp_path / "out2.zarr")
    config = write_config(tmp_path / "job.yaml", cfg)
    said = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["run", str(config), "-vv"])
    assert said.exit_code != 0 and "missing.nvdb" in said.output, said.output
    assert not any(s in said.output for s in SECRETS), said.output
    assert not Path(tmp_path / "out2.zarr").exists()


def test_a_config_object_run_with_overrides_keeps_its_credentials(tmp_path, client, http_root):  # noqa: F811
    """vdbflow.run(JobConfig, overrides): the config is re-read from its fields, not from its stored
    (redacted) form, so the job still reads the URL with its user and password."""
    root, base = http_root
    (root / "input.nvdb").write_bytes(volume_file(tmp_path).read_bytes())
    cfg = job(tmp_path, tmp_path / "out.zarr", count=1_000)
    cfg["volume"] = {"path": f"{base}/input.nvdb?{QUERY}"}
    result = vdbflow.run(load_config(data=cfg), client, overrides={"points.count": 500})
    with xr.open_zarr(result.output) as ds:
        assert ds.sizes["point"] == 500
        assert not any(s in ds.attrs["vdbflow_config"] for s in SECRETS)
