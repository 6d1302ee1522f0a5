"""The CUDA build cache runs only code its own user (or root) wrote (issue 49 row 1): an entry planted by
another user - KEY.so/KEY.cubin with a KEY.json whose sha256 matches it - is built again, never loaded; a
cache folder others can write is refused; symbolic links are never followed; the lock has a timeout.

The cache layer is tested directly (``_cached_build`` with a ``make`` whose bytes are known), as the NVRTC
and emulation builds both go through it; "another user" is a real chown when the tests run as root, else
this user is taken out of the trusted owners (the files' real owner is still what is checked)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

import pytest

from vdbflow.devices import cuda_build
from vdbflow.errors import DeviceError

PARTS = {"source": "test", "unit": "vdbflow::sample_kernel<float, 1>", "options": ["-arch=sm_90"], "kind": "cubin"}
GOOD = b"\x7fELF the image this process builds"
EVIL = b"\x7fELF planted: runs the attacker's code"


def _make() -> tuple[bytes, dict]:
    return GOOD, {"lowered": {"a": "b"}}


def _key() -> str:
    return hashlib.sha256(json.dumps(PARTS, sort_keys=True).encode()).hexdigest()[:32]


def _plant(root: Path, data: bytes = EVIL, key_parts: dict | None = None) -> tuple[Path, Path]:
    """An entry whose record's digest matches its image, as an attacker writes it."""
    key = _key()
    image, record = root / f"{key}.cubin", root / f"{key}.json"
    image.write_bytes(data)
    meta = {"lowered": {"a": "evil"}, "key": key_parts or PARTS, "image_sha256": hashlib.sha256(data).hexdigest()}
    record.write_text(json.dumps(meta))
    return image, record


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    root.mkdir(mode=0o755)
    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(root))
    return root


def _as_another_user(monkeypatch, *paths: Path) -> None:
    """Make ``paths`` another user's: chown them (root), else drop this user from the trusted owners."""
    if os.geteuid() == 0:
        for path in paths:
            os.chown(path, 54321, 54321, follow_symlinks=False)
    else:
        monkeypatch.setattr(cuda_build, "_trusted_owners", lambda: {0})


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _build() -> tuple[Path, dict, str, float]:
    return cuda_build._cached_build(PARTS, ".cubin", _make)


def test_an_own_entry_is_loaded_from_the_cache(cache):
    image, meta, how, _ = _build()
    assert (how, image.read_bytes()) == ("compiled", GOOD)
    image, meta, how, _ = _build()
    assert (how, image.read_bytes(), meta["lowered"]) == ("cached", GOOD, {"a": "b"})
    assert oct(image.stat().st_mode & 0o777) == oct(0o644 & ~_umask())  # no one else may write it


def test_an_entry_planted_by_another_user_is_built_again(cache, monkeypatch):
    image, record = _plant(cache)
    _as_another_user(monkeypatch, image, record)
    path, meta, how, _ = _build()
    assert how == "compiled" and path.read_bytes() == GOOD and meta["lowered"] == {"a": "b"}


@pytest.mark.parametrize("which", ["image", "record"])
def test_a_symlinked_entry_is_not_followed(cache, tmp_path, which):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    image, record = _plant(elsewhere)
    key = _key()
    if which == "image":
        (cache / f"{key}.cubin").symlink_to(image)
        (cache / f"{key}.json").write_bytes(record.read_bytes())
    else:
        (cache / f"{key}.cubin").write_bytes(image.read_bytes())
        (cache / f"{key}.json").symlink_to(record)
    path, _, how, _ = _build()
    assert how == "compiled" and path.read_bytes() == GOOD and not path.is_symlink()
    assert image.read_bytes() == EVIL  # the link's target is left alone


def test_a_group_writable_entry_is_built_again(cache):
    image, record = _plant(cache)
    image.chmod(0o664)
    path, _, how, _ = _build()
    assert how == "compiled" and path.read_bytes() == GOOD


def test_an_entry_renamed_from_another_key_is_built_again(cache):
    _plant(cache, key_parts={**PARTS, "unit": "vdbflow::other_kernel"})  # an own, intact entry of another key
    path, _, how, _ = _build()
    assert how == "compiled" and path.read_bytes() == GOOD


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_a_cache_folder_others_can_write_is_refused(cache, mode):
    cache.chmod(mode)
    _plant(cache)
    with pytest.raises(DeviceError, match=r"expected a CUDA build cache that only its owner .* is writable by"):
        _build()
    assert (cache / f"{_key()}.cubin").read_bytes() == EVIL  # neither loaded nor touched


def test_a_cache_folder_of_another_user_is_refused(cache, monkeypatch):
    _plant(cache)
    _as_another_user(monkeypatch, cache)
    with pytest.raises(DeviceError, match=r"belongs to another user"):
        _build()


def test_a_new_cache_folder_is_private_whatever_the_umask(tmp_path, monkeypatch):
    monkeypatch.setenv("VDBFLOW_CUDA_CACHE", str(tmp_path / "new" / "cuda"))
    old = os.umask(0o002)
    try:
        root = cuda_build.cache_dir()
    finally:
        os.umask(old)
    assert root.stat().st_mode & 0o777 == 0o755


def test_a_symlinked_lock_is_refused(cache, tmp_path):
    target = tmp_path / "victim"
    target.write_text("keep")
    (cache / f"{_key()}.lock").symlink_to(target)
    with pytest.raises(DeviceError, match=r"expected a writable CUDA build cache"):
        _build()
    assert target.read_text() == "keep"


def test_the_lock_times_out(cache, monkeypatch):
    monkeypatch.setenv("VDBFLOW_CUDA_LOCK_TIMEOUT", "0.2")
    with open(cache / f"{_key()}.lock", "a+") as held:  # another process's compile that never ends
        fcntl.flock(held, fcntl.LOCK_EX)  # _locked opens its own file description: flock conflicts with it
        with pytest.raises(DeviceError, match=r"expected to lock .* within 0\.2 s"):
            _build()


@pytest.mark.parametrize("text", ["0", "-3", "soon", "nan"])
def test_a_bad_lock_timeout_is_refused(cache, monkeypatch, text):
    monkeypatch.setenv("VDBFLOW_CUDA_LOCK_TIMEOUT", text)
    with pytest.raises(DeviceError, match="VDBFLOW_CUDA_LOCK_TIMEOUT"):
        _build()


@pytest.mark.parametrize("which", ["cubin", "json"])
def test_a_folder_in_the_entry_s_place_is_a_device_error(cache, which):
    (cache / f"{_key()}.{which}").mkdir()
    with pytest.raises(DeviceError, match=r"expected to write the CUDA build cache's entry"):
        _build()
