"""Round five of the fault campaign, publishing, resume and the CUDA build cache (issue 49 rows 1, 3, 11):
the cases of ``--kinds pubrecords,unitrecords,cachetrust`` (scripts/fault_campaign.py runs them, one a
process).

- ``pubrecords``: a ``memory://`` output beside another team's prefix, with a leftover publishing record
  of a dead (or unknown) writer whose JSON is tampered - source and final drawn from the output, its own
  partial sibling, the other prefix, the parent, other types, garbage bytes - and ``tidy`` (what ``vdbflow
  clean`` and every run do) with or without ``force``.  Oracle: the other prefix is never touched; the
  output becomes its partial's objects exactly when the record is this output's own, else it is as it was
  and the record is said to be left.
- ``unitrecords``: a store written unit by unit by the workers' own ``write_unit``, its manifest's unit
  records tampered (keys dropped, types changed, arrays left out, rows moved, figures lost, bytes cut) and
  some units' chunks deleted; then what a resumed job keeps (``Manifest.records``, ``verified``,
  ``UnitPlan.keep_complete``).  Oracle: every kept unit reads back the rows written, every untouched unit
  is kept, nothing raises.
- ``cachetrust``: a CUDA build cache folder of a random mode (private, group- or world-writable, sticky)
  and owner (as root: another uid), entries planted as another user's files, symbolic links, group-writable
  files, FIFOs, folders, records of another key, a lock that is a link or a folder.  Oracle: the build
  returns the image this process makes or a ``DeviceError``; a planted image is never returned, no link's
  target is changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any

import numpy as np

DEAD = 4_194_000  # a pid above Linux's pid_max default: no such process


class Wrong(Exception):
    """The oracle found a wrong result."""


# -- pubrecords ---------------------------------------------------------------------------------------------


def case_pubrecords(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    import fsspec

    from vdbflow.jobs.publish.output import tidy

    fs = fsspec.filesystem("memory")
    root = f"/campaign-{os.getpid()}-{int(rng.integers(1 << 30))}"
    host = socket.gethostname() if rng.random() < 0.8 else "another-host"
    tag = f"{int(rng.integers(1 << 32)):08x}"
    own = f"{root}/.out.zarr.partial-{tag}-{DEAD}@{host}"
    paths = {
        "own": own,
        "output": f"{root}/out.zarr",
        "victim": f"{root}/team-b/data.zarr",
        "parent": root,
        "other-partial": f"{root}/.out.zarr.partial-{(int(tag, 16) ^ 1):08x}-{DEAD}@{host}",
        "slash": f"{root}/out.zarr/",
        "dots": f"{root}/team-b/../out.zarr",
    }
    victim = {f"{paths['victim']}/.zgroup": b"{}", f"{paths['victim']}/v/0": rng.bytes(32)}
    partial = {f"{own}/.zgroup": b'{"zarr_format": 2}', f"{own}/v/0": rng.bytes(16)}
    earlier = {f"{root}/out.zarr/.zgroup": b'{"zarr_format": 2}', f"{root}/out.zarr/v/1": rng.bytes(8)}
    for key, data in {**victim, **(partial if rng.random() < 0.8 else {}), **earlier}.items():
        fs.pipe_file(key, data)
    pool: list[Any] = [*paths, None, 5, [], {"a": 1}, "", "x" * 5000]
    source, final = pool[int(rng.integers(len(pool)))], pool[int(rng.integers(len(pool)))]
    if rng.random() < 0.1:
        body = rng.bytes(int(rng.integers(0, 64)))
        what = "garbage bytes"
    elif rng.random() < 0.3:  # the record this output's own run wrote
        body = json.dumps({"source": own, "final": paths["output"]}).encode()
        what = "its own record"
    else:
        record: dict[str, Any] = {}
        if rng.random() < 0.9:
            record["source"] = paths.get(source, source) if isinstance(source, str) else source
        if rng.random() < 0.9:
            record["final"] = paths.get(final, final) if isinstance(final, str) else final
        body = json.dumps(record).encode()
        what = f"source {source!r:.20} final {final!r:.20}"
    fs.pipe_file(f"{root}/.out.zarr.publishing-{tag}-{DEAD}@{host}", body)
    force = bool(rng.random() < 0.5)
    before_output = _tree(fs, f"{root}/out.zarr")
    before_partial = _tree(fs, own)
    try:
        lines = tidy(f"memory://{root}/out.zarr", force=force)
        if _tree(fs, paths["victim"]) != {k[len(paths["victim"]) + 1 :]: v for k, v in victim.items()}:
            raise Wrong(f"{what}: the other team's prefix changed")
        valid = body == json.dumps({"source": own, "final": paths["output"]}).encode()
        acted = force or host == socket.gethostname()
        after = _tree(fs, f"{root}/out.zarr")
        if valid and acted and before_partial:
            if after != before_partial:
                raise Wrong(f"{what}: the output is not its own partial's objects after finishing")
            return "same", f"finished: {what}"
        if valid and acted:  # no partial any more: the record goes, the output stays
            if after != before_output:
                raise Wrong(f"{what}: the output changed though the record names no partial")
            return "same", f"record of a gone partial removed: {what}"
        if after != before_output:
            raise Wrong(f"{what}: a record that is not this output's changed the output")
        if acted and not any(line.startswith("left ") for line in lines):
            raise Wrong(f"{what}: a record that is not this output's was not said to be left: {lines}")
        return "refused", f"left: {what}"
    finally:
        if fs.exists(root):
            fs.rm(root, recursive=True)


def _tree(fs: Any, prefix: str) -> dict[str, bytes]:
    fs.invalidate_cache()
    try:
        found = fs.find(prefix)
    except (OSError, ValueError):
        return {}
    return {p[len(prefix) + 1 :]: fs.cat_file(p) for p in found if p.startswith(prefix + "/")}


# -- unitrecords --------------------------------------------------------------------------------------------

_UNIT_TAMPER = (
    "drop rows",
    "drop sha256",
    "drop extras",
    "drop unit",
    "empty sha256",
    "subset sha256",
    "extra sha256",
    "rows shifted",
    "rows as text",
    "rows reversed",
    "sha256 a list",
    "sha256 values wrong",
    "extras empty",
    "extras a list",
    "unit as text",
    "unit of another",
    "a list",
    "null",
    "cut short",
    "garbage",
)


def _tampered(rng: np.random.Generator, record: dict[str, Any], how: str, units: int) -> bytes:
    r = json.loads(json.dumps(record))
    if how.startswith("drop "):
        r.pop(how[5:], None)
    elif how == "empty sha256":
        r["sha256"] = {}
    elif how == "subset sha256":
        r["sha256"] = dict(list(r["sha256"].items())[:1])
    elif how == "extra sha256":
        r["sha256"]["ghost"] = "0" * 64
    elif how == "rows shifted":
        r["rows"] = [r["rows"][0] + 1, r["rows"][1] + 1]
    elif how == "rows as text":
        r["rows"] = f"{r['rows'][0]}:{r['rows'][1]}"
    elif how == "rows reversed":
        r["rows"] = r["rows"][::-1]
    elif how == "sha256 a list":
        r["sha256"] = list(r["sha256"])
    elif how == "sha256 values wrong":
        r["sha256"] = {k: "f" * 64 for k in r["sha256"]}
    elif how == "extras empty":
        r["extras"] = {}
    elif how == "extras a list":
        r["extras"] = [1, 2]
    elif how == "unit as text":
        r["unit"] = str(r["unit"])
    elif how == "unit of another":
        r["unit"] = (r["unit"] + 1) % units
    elif how == "a list":
        return json.dumps([r]).encode()
    elif how == "null":
        return b"null"
    elif how == "cut short":
        text = json.dumps(r).encode()
        return text[: int(rng.integers(0, len(text)))]
    elif how == "garbage":
        return rng.bytes(int(rng.integers(1, 40)))
    return json.dumps(r).encode()


def case_unitrecords(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    import zarr

    from vdbflow.jobs.publish.units import MANIFEST, POINT_INDEX, Manifest, UnitPlan, verified, write_unit

    store = work / "r.zarr"
    units, rows = int(rng.integers(1, 7)), int(rng.integers(1, 9))
    n = units * rows
    values = rng.standard_normal(n).astype(np.float32)
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    group.create_array("value", shape=(n,), chunks=(rows,), dtype="float32", fill_value=np.nan)
    group.create_array(POINT_INDEX, shape=(n,), chunks=(rows,), dtype="int64", fill_value=-1)
    names = ("value",)
    starts = np.arange(units + 1) * rows
    plan = UnitPlan(store, None, starts)  # one chunk of points a unit
    plan.parts = {"tally": [None] * units}
    plan.assign(starts)
    for u in range(units):
        extras = {"tally": {u: np.array([u, 0])}}
        write_unit(u, store, "{}", names, (u * rows, (u + 1) * rows), True, extras, values[u * rows : (u + 1) * rows])
    folder = store / MANIFEST / "units"
    tampered = {int(u): str(rng.choice(_UNIT_TAMPER)) for u in range(units) if rng.random() < 0.5}
    lost = {int(u) for u in range(units) if rng.random() < 0.3}
    for u, how in tampered.items():
        path = folder / f"{u}.json"
        path.write_bytes(_tampered(rng, json.loads(path.read_text()), how, units))
    for u in lost:
        for array in ("value", POINT_INDEX):
            (store / array / str(u)).unlink(missing_ok=True)
    _array_cache_clear()
    records = Manifest(store).records()
    good = verified(store, None, records)
    plan.done = {u: records[u] for u in good}
    plan.keep_complete(starts, (*names, POINT_INDEX))
    group = zarr.open_group(str(store), mode="r")
    for u in plan.done:
        if not 0 <= u < units:
            raise Wrong(f"unit {u} of {units} kept")
        got = np.asarray(group["value"][u * rows : (u + 1) * rows])
        if got.tobytes() != values[u * rows : (u + 1) * rows].tobytes():
            raise Wrong(f"unit {u} kept ({tampered.get(u, 'untouched')}, chunks lost: {u in lost}) reads other rows")
        record = plan.done[u]
        if not all(str(c) in record["extras"]["tally"] for c in np.flatnonzero(plan.owner == u)):
            raise Wrong(f"unit {u} kept ({tampered.get(u)}) without the figures of its chunks")
    untouched = {u for u in range(units) if u not in tampered and u not in lost}
    if not untouched <= set(plan.done):
        raise Wrong(f"untouched units {sorted(untouched - set(plan.done))} were not kept")
    kept_tampered = sorted(set(plan.done) & set(tampered))
    what = f"{units} units, tampered {sorted(tampered.items())}, chunks lost {sorted(lost)}"
    return ("same" if not tampered and not lost else "refused"), f"{what}; kept tampered {kept_tampered}"


def _array_cache_clear() -> None:
    from vdbflow.jobs.publish import units

    units._array.cache_clear()


# -- cachetrust ---------------------------------------------------------------------------------------------

GOOD = b"\x7fELF the image this process builds"
EVIL = b"\x7fELF planted"
_ENTRY_KINDS = ("own", "own", "absent", "other user", "symlink", "group-writable", "fifo", "folder", "other key")
_LOCK_KINDS = ("absent", "absent", "regular", "symlink", "folder")


def case_cachetrust(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    from vdbflow.devices import cuda_build
    from vdbflow.errors import DeviceError

    parts = {"source": "campaign", "unit": f"u{int(rng.integers(1000))}", "kind": "cubin"}
    key = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]
    cache, elsewhere = work / "cache", work / "elsewhere"
    cache.mkdir()
    elsewhere.mkdir()
    root = os.geteuid() == 0
    image_kind, record_kind = str(rng.choice(_ENTRY_KINDS)), str(rng.choice(_ENTRY_KINDS))
    lock_kind = str(rng.choice(_LOCK_KINDS))
    planted = EVIL if rng.random() < 0.7 else GOOD
    meta = {"lowered": {}, "key": parts, "image_sha256": hashlib.sha256(planted).hexdigest()}
    targets = {}
    for name, kind, data in (
        (f"{key}.cubin", image_kind, planted),
        (f"{key}.json", record_kind, json.dumps(meta).encode()),
    ):
        path = cache / name
        if kind == "absent":
            continue
        if kind == "symlink":
            target = elsewhere / name
            target.write_bytes(data)
            targets[target] = data
            path.symlink_to(target)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            path.mkdir()
        elif kind == "other key":
            other = {**meta, "key": {**parts, "unit": "another"}} if name.endswith(".json") else None
            path.write_bytes(json.dumps(other).encode() if other else data)
        else:
            path.write_bytes(data)
            path.chmod(0o664 if kind == "group-writable" else 0o644)
            if kind == "other user" and root:
                os.chown(path, 54321, 54321)
    if lock_kind == "regular":
        (cache / f"{key}.lock").write_bytes(b"")
    elif lock_kind == "symlink":
        (elsewhere / "victim").write_bytes(b"keep")
        targets[elsewhere / "victim"] = b"keep"
        (cache / f"{key}.lock").symlink_to(elsewhere / "victim")
    elif lock_kind == "folder":
        (cache / f"{key}.lock").mkdir()
    mode = int(rng.choice([0o700, 0o755, 0o775, 0o777, 0o1777, 0o750]))
    cache.chmod(mode)
    foreign = root and rng.random() < 0.15
    if foreign:
        os.chown(cache, 54321, 54321)
    import logging

    logging.getLogger("vdbflow.devices").setLevel(logging.ERROR)  # the warning of each entry not used
    os.environ["VDBFLOW_CUDA_CACHE"] = str(cache)
    os.environ["VDBFLOW_CUDA_LOCK_TIMEOUT"] = "2"
    if not root and image_kind == "other user":  # not root: this user is taken out of the trusted owners
        cuda_build._trusted_owners = lambda: {0}  # type: ignore[assignment]
    what = (
        f"cache {mode:04o}{' foreign' if foreign else ''}, image {image_kind}, record {record_kind}, lock {lock_kind}"
    )
    try:
        image, _, how, _ = cuda_build._cached_build(parts, ".cubin", lambda: (GOOD, {"lowered": {}}))
    except DeviceError as err:
        outcome = ("refused", f"{what}: {str(err)[:120]}")
    else:
        data = image.read_bytes()
        own_entry = image_kind in ("own", "other key") and record_kind == "own"  # this user's own entry: used
        if data != (planted if own_entry else GOOD):
            raise Wrong(f"{what}: the build returned {'a planted' if data == EVIL else 'another'} image ({how})")
        if image.is_symlink() or image.stat().st_uid not in (os.geteuid(), 0):
            raise Wrong(f"{what}: the image returned is a link or another user's file")
        outcome = ("same", f"{what}: {how}")
    for target, data in targets.items():
        if target.read_bytes() != data:
            raise Wrong(f"{what}: the target of a link in the cache changed")
    return outcome
