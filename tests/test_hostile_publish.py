"""Publishing on object stores against hostile or concurrent neighbours (issue 49 rows 3 and 13, and the
suspected race of two jobs at one URL): a leftover ``.NAME.publishing-TAG`` record is finished only when
it names this output and its own partial sibling - a record naming another prefix never makes ``vdbflow
clean`` (or a run's tidy) copy over or delete that prefix's objects; a run that finds another run's
publishing record copies nothing and keeps its result unpublished; a bucket-root ``output.path`` exits 2
at validation.  ``memory://`` stores, read back with plain fsspec."""

from __future__ import annotations

import json
import os
import socket

import fsspec
import pytest
from click.testing import CliRunner
from output_jobs import client, job, objects, write_config  # noqa: F401

import vdbflow
from vdbflow.errors import OutputError
from vdbflow.jobs.cli.main import main
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.config.model import ConfigError
from vdbflow.jobs.publish.output import tidy

DEAD = 4_194_000  # a pid above Linux's pid_max default: no such process
VICTIM = {"team-b/data.zarr/.zgroup": b'{"zarr_format": 2}', "team-b/data.zarr/v/0": b"\x01" * 64}


def _plant(memory_fs: str, record: dict | bytes, tag: str = "deadbeef") -> tuple[fsspec.AbstractFileSystem, str]:
    """Another team's store beside the output, and a publishing record of a dead writer at the output."""
    fs, root = fsspec.core.url_to_fs(memory_fs)
    for key, data in VICTIM.items():
        fs.pipe_file(f"{root}/{key}", data)
    name = f".out.zarr.publishing-{tag}-{DEAD}@{socket.gethostname()}"
    body = record if isinstance(record, bytes) else json.dumps(record).encode()
    fs.pipe_file(f"{root}/{name}", body)
    return fs, root


def _victim(fs, root: str) -> dict[str, bytes]:
    fs.invalidate_cache()
    return {key: fs.cat_file(f"{root}/{key}") for key in VICTIM if fs.exists(f"{root}/{key}")}


@pytest.mark.parametrize(
    "names",
    [
        ("victim", "victim"),  # the record publishes another prefix over itself: roll_forward deleted nothing ...
        ("own", "victim"),  # ... its own partial over another prefix: the other prefix's objects deleted
        ("victim", "output"),  # another prefix as the source: copied here, then deleted
    ],
)
def test_a_record_naming_another_prefix_is_left_alone(memory_fs, names):
    fs, root = fsspec.core.url_to_fs(memory_fs)
    paths = {
        "victim": f"{root}/team-b/data.zarr",
        "own": f"{root}/.out.zarr.partial-deadbeef-{DEAD}@{socket.gethostname()}",
        "output": f"{root}/out.zarr",
    }
    fs.pipe_file(f"{paths['own']}/.zgroup", b'{"zarr_format": 2}')  # a partial of the record's own tag
    fs, root = _plant(memory_fs, {"source": paths[names[0]], "final": paths[names[1]]})
    url = f"{memory_fs}/out.zarr"
    lines = tidy(url)
    assert _victim(fs, root) == VICTIM  # nothing of the other prefix copied over or deleted
    assert any(line.startswith("left ") and "that this output's runs did not write" in line for line in lines), lines
    assert not fs.exists(f"{root}/out.zarr/v/0")
    result = CliRunner().invoke(main, ["clean", url, "--force"])
    assert result.exit_code == 0 and "nothing was copied or deleted" in result.output, result.output
    assert _victim(fs, root) == VICTIM


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"final": 3}'])
def test_a_damaged_record_is_left_and_said(memory_fs, body):
    fs, root = _plant(memory_fs, body)
    lines = tidy(f"{memory_fs}/out.zarr")
    assert any(line.startswith("left ") for line in lines), lines
    assert _victim(fs, root) == VICTIM


def test_a_record_of_this_output_is_still_finished(memory_fs):
    """The record a killed run of this output wrote: its own partial published at the output."""
    fs, root = fsspec.core.url_to_fs(memory_fs)
    host = socket.gethostname()
    own = f"{root}/.out.zarr.partial-deadbeef-{DEAD}@{host}"
    fs.pipe_file(f"{own}/.zgroup", b'{"zarr_format": 2}')
    fs.pipe_file(f"{own}/v/0", b"\x02" * 8)
    fs, root = _plant(memory_fs, {"source": own, "final": f"{root}/out.zarr"})
    lines = tidy(f"{memory_fs}/out.zarr")
    assert any(line.startswith("finished publishing") for line in lines), lines
    assert objects(f"{memory_fs}/out.zarr") == {".zgroup": b'{"zarr_format": 2}', "v/0": b"\x02" * 8}
    assert _victim(fs, root) == VICTIM


def test_a_run_finding_another_publisher_copies_nothing(memory_fs, tmp_path, client):  # noqa: F811
    """Two jobs at one URL: the other's record (a live writer: this process) is there when this run
    publishes; this run keeps its complete result unpublished and names the other record."""
    url = f"{memory_fs}/out.zarr"
    fs, root = fsspec.core.url_to_fs(memory_fs)
    other = f"{root}/.out.zarr.publishing-0badf00d-{os.getpid()}@{socket.gethostname()}"
    record = {"source": f"{root}/.out.zarr.partial-0badf00d", "final": f"{root}/out.zarr"}
    fs.pipe_file(other, json.dumps(record).encode())
    with pytest.raises(OutputError, match=r"another run is publishing to .*out\.zarr.*publishing-0badf00d"):
        vdbflow.run(job(tmp_path, url, count=1_000), client)
    fs.invalidate_cache()
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False))
    assert not fs.exists(f"{root}/out.zarr")  # nothing copied
    kept = [n for n in names if n.startswith("out.zarr.unpublished-")]
    assert len(kept) == 1 and fs.exists(f"{root}/{kept[0]}/.zmetadata")
    assert other.rsplit("/", 1)[-1] in names and not any(".publishing-" in n and n not in other for n in names)


@pytest.mark.parametrize("url", ["s3://results", "s3://results/", "gs://bucket", "az://container/"])
def test_a_bucket_root_output_is_refused_at_validation(tmp_path, url):
    cfg = job(tmp_path, url)
    with pytest.raises(ConfigError, match=r"expected a URL naming a prefix inside a bucket"):
        load_config(data=cfg)
    config = write_config(tmp_path / "job.yaml", cfg)
    result = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["run", str(config), "--dry-run"])
    assert result.exit_code == 2 and "prefix inside a bucket" in result.output, result.output


def test_a_prefix_inside_a_bucket_and_a_memory_root_are_accepted(tmp_path):
    assert load_config(data=job(tmp_path, "s3://results/out.zarr")).output.url == "s3://results/out.zarr"
    assert load_config(data=job(tmp_path, "memory://out.zarr")).output.url == "memory://out.zarr"
