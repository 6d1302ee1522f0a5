"""Files vdbflow writes appear whole or not at all, never through a planted link, and a failed write
leaves nothing behind (issue 23, rows 2, 3 and 8)."""

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_run import fake_result

import vdbflow
from vdbflow.core import atomic
from vdbflow.jobs.publish.output import leftovers, partial_path, publish, tidy

HOST = socket.gethostname()


def _volume() -> vdbflow.Volume:
    ijk = np.argwhere(np.ones((8, 8, 8), bool))
    return vdbflow.Volume.from_voxels(ijk, ijk[:, 0].astype(np.float32), name="density")


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_save_never_writes_through_a_link_planted_at_the_old_temporary_name(tmp_path):
    """The old save() wrote PATH.tmp-PID with open(): a link planted there had its target overwritten
    and the output became a link to it."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out.nvdb"
    for pid in {os.getpid(), os.getppid()}:
        (tmp_path / f"out.nvdb.tmp-{pid}").symlink_to(victim)
    vdbflow.save(out, {"density": _volume()})
    assert victim.read_text() == "precious"
    assert out.is_file() and not out.is_symlink()
    assert vdbflow.open(out).active_voxel_count == 512


def test_save_replaces_a_link_at_the_output_itself_and_never_its_target(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out.nvdb"
    out.symlink_to(victim)
    _volume().to_nvdb(str(out))
    assert victim.read_text() == "precious" and out.is_file() and not out.is_symlink()


def test_a_private_directory_name_that_is_taken_is_never_used(tmp_path, monkeypatch):
    """mkdir fails on any existing name, a link too: a planted name is passed over, never followed;
    a name that stays taken ends in a WriteError, not a loop."""
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    tags = iter(["aaaaaaaa-1@h", "bbbbbbbb-1@h"])
    monkeypatch.setattr(atomic, "writer_tag", lambda: next(tags))
    (tmp_path / ".out.nvdb.tmp-aaaaaaaa-1@h").symlink_to(victim)
    vdbflow.save(tmp_path / "out.nvdb", {"density": _volume()})
    assert list(victim.iterdir()) == [] and (tmp_path / "out.nvdb").is_file()
    assert _listing(tmp_path) == [".out.nvdb.tmp-aaaaaaaa-1@h", "elsewhere", "out.nvdb"]

    monkeypatch.setattr(atomic, "writer_tag", lambda: "aaaaaaaa-1@h")
    (tmp_path / ".again.nvdb.tmp-aaaaaaaa-1@h").symlink_to(victim)
    with pytest.raises(vdbflow.WriteError, match="expected to write .*again.nvdb"):
        vdbflow.save(tmp_path / "again.nvdb", {"density": _volume()})
    assert list(victim.iterdir()) == [] and not (tmp_path / "again.nvdb").exists()


def test_a_full_disk_leaves_nothing_and_the_old_file_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "out.nvdb"
    out.write_bytes(b"the earlier file")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(vdbflow.WriteError, match="No space left on device") as caught:
        vdbflow.save(out, {"density": _volume()})
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)
    assert out.read_bytes() == b"the earlier file" and _listing(tmp_path) == ["out.nvdb"]


def test_saved_files_get_the_permissions_of_a_plain_open(tmp_path):
    old = os.umask(0o027)
    try:
        vdbflow.save(tmp_path / "out.nvdb", {"density": _volume()})
    finally:
        os.umask(old)
    assert (tmp_path / "out.nvdb").stat().st_mode & 0o777 == 0o640


def test_an_interrupted_write_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic.atomic_file(tmp_path / "out.bin") as fh:
        fh.write(b"half")
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt), atomic.atomic_directory(tmp_path / "out.zarr") as where:
        where.mkdir()
        raise KeyboardInterrupt
    assert _listing(tmp_path) == []


def test_atomic_directory_refuses_or_exchanges(tmp_path):
    target = tmp_path / "store"
    with atomic.atomic_directory(target) as where:
        where.mkdir()
        (where / "a").write_text("1")
    with pytest.raises(vdbflow.WriteError, match="exists"), atomic.atomic_directory(target) as where:
        where.mkdir()
    with atomic.atomic_directory(target, replace=True) as where:
        where.mkdir()
        (where / "a").write_text("2")
    assert (target / "a").read_text() == "2" and _listing(tmp_path) == ["store"]


# -- a killed writer's private directory, and the names an older vdbflow left --------------------------


def test_clean_removes_what_a_killed_save_left_and_keeps_a_running_one(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    final = tmp_path / "field.nvdb"
    gone = tmp_path / f".field.nvdb.tmp-0123abcd-{dead}@{HOST}"
    running = tmp_path / f".field.nvdb.tmp-4567abcd-{alive}@{HOST}"
    for d in (gone, running):
        d.mkdir()
        (d / "field.nvdb").write_bytes(b"x" * 1000)
    lines = tidy(final)
    assert not gone.exists() and running.exists()
    assert any("removed" in line and "unfinished save" in line for line in lines)
    assert any("kept" in line and "running job" in line for line in lines)


def test_an_older_partial_save_name_is_read_with_its_writer(tmp_path):
    """``.NAME.partial-TAG.tmp-PID`` (a synthetic.write of an older vdbflow, killed or out of space)
    was read as host ``HOST.tmp-PID``: unknown, so kept without --force and the disk stayed full."""
    dead = _dead_pid()
    left = tmp_path / f".tg.nvdb.partial-0123abcd-{dead}@{HOST}.tmp-{dead}"
    left.write_bytes(b"x" * 1000)
    (item,) = leftovers(tmp_path / "tg.nvdb")
    assert (item.kind, item.pid, item.host, item.writer_gone) == ("partial", dead, HOST, True)
    tidy(tmp_path / "tg.nvdb")
    assert not left.exists()


def test_a_job_that_writes_its_synthetic_field_leaves_no_temporary_on_failure(tmp_path, monkeypatch):
    from vdbflow.jobs import inputs
    from vdbflow.jobs.config.load import load_config

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    cfg = load_config(
        data={
            "volume": {"synthetic": {"field": "taylor_green", "resolution": 16, "write": str(tmp_path / "tg.nvdb")}},
            "points": {"kind": "random", "count": 100},
            "output": {"path": str(tmp_path / "r.zarr")},
        }
    )
    with pytest.raises(vdbflow.WriteError, match="tg.nvdb"):
        inputs.build_volumes(cfg, ["velocity"])
    assert _listing(tmp_path) == []


# -- a result that could not be published is kept where nothing removes it -------------------------------


def test_a_complete_result_that_could_not_be_published_survives_the_next_cleanup(tmp_path):
    final = tmp_path / "r.zarr"
    part = fake_result(partial_path(final), "mine")
    fake_result(final, "theirs")  # appeared while the job ran
    with pytest.raises(vdbflow.VdbflowError, match=r"complete result is kept at .*r\.zarr\.unpublished-"):
        publish(part, final, "never")
    (kept,) = tmp_path.glob("r.zarr.unpublished-*")
    assert tidy(final, force=True) == [] and tidy(directory=tmp_path, force=True) == []
    assert (kept / "data" / "0").read_text() == "mine" and (final / "data" / "0").read_text() == "theirs"


def test_replacing_a_directory_without_renameat2_never_loses_the_earlier_one(tmp_path, monkeypatch):
    """The two-rename fallback sets the earlier store aside as .NAME.replaced-TAG (which vdbflow clean
    restores) and puts it back when the second rename fails."""
    target = tmp_path / "store"
    target.mkdir()
    (target / "a").write_text("earlier")
    monkeypatch.setattr(atomic, "renameat2", lambda *args: False)
    real_rename = os.rename

    def second_rename_fails(src, dst):
        if Path(dst) == target and ".tmp-" in Path(src).parent.name:  # the new store, not the earlier one
            raise OSError(errno.EIO, "I/O error")
        real_rename(src, dst)

    monkeypatch.setattr(atomic.os, "rename", second_rename_fails)
    with pytest.raises(vdbflow.WriteError, match="I/O error"), atomic.atomic_directory(target, replace=True) as new:
        new.mkdir()
        (new / "a").write_text("new")
    assert (target / "a").read_text() == "earlier" and _listing(tmp_path) == ["store"]
    monkeypatch.setattr(atomic.os, "rename", real_rename)
    with atomic.atomic_directory(target, replace=True) as new:
        new.mkdir()
        (new / "a").write_text("new")
    assert (target / "a").read_text() == "new" and _listing(tmp_path) == ["store"]


def test_a_long_file_name_saves_and_its_leftovers_are_found(tmp_path):
    """A hidden sibling's name holds at most 160 bytes of NAME (the kind and writer tag need the rest
    of 255), so a 240-byte name still saves, and cleanup still finds what a killed save left."""
    out = tmp_path / ("v" * 236 + ".nvdb")
    vdbflow.save(out, {"density": _volume()})
    assert vdbflow.open(out).active_voxel_count == 512
    left = atomic.hidden_sibling(out, "tmp")
    left.mkdir()
    (item,) = leftovers(out)
    assert item.path == left and item.final == out and len(left.name.encode()) <= 255


def test_a_rename_that_fails_while_publishing_keeps_the_complete_result(tmp_path, monkeypatch):
    from vdbflow.jobs.publish import output

    final = fake_result(tmp_path / "r.zarr", "old")
    part = fake_result(partial_path(final), "new")

    def gone(src, dst, flags):  # the earlier result vanished between the check and the exchange
        if flags == atomic.RENAME_EXCHANGE:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
        return False  # keep() then renames the plain way

    monkeypatch.setattr(output, "renameat2", gone)
    with pytest.raises(output.OutputError, match="kept at .*unpublished") as caught:
        publish(part, final, "always")
    (kept,) = tmp_path.glob("r.zarr.unpublished-*")
    assert str(kept) in str(caught.value) and (kept / "data" / "0").read_text() == "new"


# -- issue 40, rows 1 and 2: what came out of an exchange is checked again before it is deleted ----------


@pytest.mark.parametrize("earlier", [True, False])
@pytest.mark.parametrize("exchange", [True, False])
def test_to_zarr_never_deletes_a_directory_that_appeared_during_the_write(tmp_path, monkeypatch, earlier, exchange):
    """``to_zarr(overwrite=True)`` checks the path before the write; a directory of someone's files that
    replaces what was checked (or appears where nothing was) during the write is left untouched: a
    WriteError, and the new store is not published."""
    from vdbflow.io import volumes

    target = tmp_path / "v.zarr"
    if earlier:
        _volume().to_zarr(str(target))
    real_check = volumes._check_replaceable

    def then_someone_writes(path, overwrite):  # the race: right after the check
        real_check(path, overwrite)
        if earlier:
            os.rename(target, tmp_path / "moved-away")
        target.mkdir()
        (target / "thesis.tex").write_text("precious")

    monkeypatch.setattr(volumes, "_check_replaceable", then_someone_writes)
    if not exchange:
        monkeypatch.setattr(atomic, "renameat2", lambda *args: False)
    with pytest.raises(vdbflow.WriteError, match="a directory of other files") as caught:
        _volume().to_zarr(str(target), overwrite=True)
    assert f"it is back at {target}" in str(caught.value)
    assert _listing(target) == ["thesis.tex"] and (target / "thesis.tex").read_text() == "precious"
    assert _listing(tmp_path) == sorted(["v.zarr"] + ["moved-away"] * earlier)
