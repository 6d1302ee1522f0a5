"""A fault campaign: hostile and faulty inputs, signals, full disks and concurrent runs, one case a process.

    python scripts/fault_campaign.py --cases 5000 [--kinds units,stores,...] [--seed 0] [--jobs 2]
                                     [--report campaign.json]
    python scripts/fault_campaign.py --replay KIND SEED INDEX     # one case, in the foreground

Each case runs in its own process (forked from a server that imported vdbflow once) under an
address-space limit and a time limit, and ends with an outcome its oracle accepts or with a bug:

- accepted outcomes: ``refused`` (a vdbflow error, its type in the detail), ``same`` (the right
  result: what was written comes back), ``warned`` (a unit string kept with a ``UnitsWarning``),
  ``changed`` (bytes of a chunk flipped in a way the format cannot detect: the store still opens
  whole and consistent), ``done`` / ``stopped`` / ``killed`` (a job that finished, cleaned up after a
  signal, or was killed and whose leftovers the next cleanup removed);
- bugs: ``error`` (an exception that is not vdbflow's), ``wrong`` (the oracle found garbage, a lost
  result or a leftover), ``hang`` (the time limit), ``memory`` (the address-space limit),
  ``crash`` (the process died).

Kinds of case (``--kinds``; their shares of ``--cases`` in ``KINDS``):

- ``units``: unit strings from a hostile grammar (power towers, nesting, thousands of factors,
  division by zero, stray operators, huge numbers), through every function of vdbflow.core.units
  and a sampled Dataset's attrs;
- ``metadata``: .nvdb files whose ``vdbflow.metadata`` record holds hostile JSON (deep nesting,
  huge numbers, wrong types, invalid UTF-8) or hostile unit strings;
- ``stores``: Zarr volume stores with a chunk deleted, truncated, flipped, a link to /dev/zero, a
  FIFO or a directory; inflated or zero shapes and chunks; other dtypes and compressors; hostile
  ``.zattrs`` (transform, format, units, nesting); consolidated metadata removed or contradicting;
- ``series``: series whose time records are hostile, whose steps disagree in units or component
  order, or whose step files are replaced, rewritten or touched after ``open_series``;
- ``config``: job configs with hostile values for the keys a run depends on: the dry run must refuse
  them (exit code 2), or the run must then succeed (run in the case's process on a small cluster);
- ``signals``: ``vdbflow run`` sent SIGINT, SIGTERM, SIGHUP or SIGKILL at a random moment, with and
  without an earlier result: the output is the earlier result byte for byte or a complete new one,
  nothing hidden is left (after SIGKILL: after ``vdbflow clean``);
- ``disk``: (as root) saves, stores and whole jobs on a tmpfs of 1-12 MiB: a vdbflow error or a
  complete result, nothing left half-written, an earlier result intact;
- ``concurrent``: two runs on one output at once: one complete result published, the other's kept
  complete at its ``.unpublished-`` path or published after it, nothing hidden left.

Round four (issue 40; run them alone with ``--kinds races,midread,planner,text``):

- ``races``: right after ``to_zarr(overwrite=True)`` or a job's publishing checked its output path,
  something else takes it (a directory of other files, a file, a link, a replaceable store or result,
  or nothing), with and without ``renameat2``: what appeared is never deleted or changed, the new
  data is published only over what may be replaced, a job's complete result is never lost;
- ``midread``: a .vdb, .nvdb or Zarr store renamed over (a .vdb also appended to in place) between a
  reader's first and last read: the values of the file it opened, whole, or a vdbflow error;
- ``planner``: one chunk of random outputs, modes, dtypes and sizes sampled under ``tracemalloc``: its
  peak within the plan's working set of that chunk (plus ``PLANNER_SLACK``), its arrays within the
  plan's bytes a point held;
- ``text``: bytes that are not UTF-8 and JSON escapes of lone surrogates as .nvdb metadata (units,
  length units, component names), .nvdb and .vdb grid names, store attrs, a CSV header and a config:
  refused, or read as text that UTF-8 encodes (what ``info``, saves and jobs need).

Round five, readers (issue 49; ``--kinds urlfaults,strided``; the cases are in scripts/fault_readers.py):

- ``urlfaults``: a .nvdb volume, a volume store (naming a ``pickle`` codec, or clean), remote .npy points
  and the xarray backend read through ``faulty://``, an fsspec store that misreports sizes, gives no
  version, fails or shortens a read, or replaces the object mid-read: the local file's values, or a
  vdbflow error; a store without versions warns; a pickle payload never runs;
- ``strided``: strided, reversed and integer selections of the backend against NumPy's slice of the
  dense reference, and hostile ``dim_order`` / ``drop_variables`` / ``leaf_chunks`` (refused).

Round five, statistics (issue 49; ``--kinds statistics``; the cases are in scripts/hostile_statistics.py):

- ``statistics``: ten calls of the statistics doors (histogram, moments, conditional_mean, statistics)
  with arguments from pools of good and hostile values (bin products past 2^63, ranges of the wrong
  shape, ``normalize="yes"``, points of the wrong shape, ...) and two kernel specs with fields overwritten
  by hostile numbers: a Dataset whose counts cover every point, a vdbflow error, or the kernels' refusal.

Round five, publishing, resume and the CUDA build cache (issue 49; ``--kinds pubrecords,unitrecords,
cachetrust``; the cases are in scripts/hostile_publish_cases.py):

- ``pubrecords``: tampered publishing records beside a ``memory://`` output and another team's prefix,
  then ``tidy`` (``vdbflow clean``): the other prefix untouched, the output finished only from its own
  record;
- ``unitrecords``: tampered unit records and lost chunks of a store written by ``write_unit``: every unit a
  resumed job keeps reads back its rows, every untouched unit is kept;
- ``cachetrust``: CUDA build caches of hostile modes and owners with planted entries, links, FIFOs and
  folders: the image this process builds, or a ``DeviceError``.

The run prints a table of outcomes per kind and writes every bug as (kind, seed, index, detail) to
``--report``; ``--replay`` reruns one with its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ACCEPTED = ("refused", "same", "warned", "changed", "done", "stopped", "killed")
BUGS = ("error", "wrong", "hang", "memory", "crash")


class Wrong(Exception):
    """The oracle found a wrong result, a lost result or a leftover."""


@dataclass(frozen=True)
class Kind:
    run: Callable[[np.random.Generator, Path], tuple[str, str]]
    share: float  # of the cases
    seconds: float  # time limit of one case
    memory_gib: float  # address-space limit of one case (0: none, for cases that start clusters)


def _refused(err: BaseException) -> tuple[str, str]:
    from vdbflow.errors import VdbflowError

    if isinstance(err, VdbflowError):
        return "refused", f"{type(err).__name__}: {str(err)[:160]}"
    raise err


# -- units --------------------------------------------------------------------------------------------

UNIT_NAMES = ("m", "s", "kg", "K", "km", "cm", "mol", "voxel", "percent", "degC", "Pa", "J", "W", "1", "rad")
KNOWN_UNITS = {"m/s": "m/s", "m s-1": "m s-1", "kg m-3": "kg m-3", "m/s/m": "1/s", "1": "1", "dimensionless": "1"}


def hostile_unit(rng: np.random.Generator) -> str:
    """A unit string from a grammar of the hostile shapes the audit found, and random noise."""
    name = lambda: str(rng.choice(UNIT_NAMES))  # noqa: E731
    big = lambda: str(int(rng.choice([9, 99, 999, 10**6, 10**18, 2**63, 10**400])))  # noqa: E731
    shape = int(rng.integers(12))
    if shape == 0:  # power towers
        return ("**" if rng.random() < 0.5 else "^").join(
            [big() if rng.random() < 0.7 else name()] * int(rng.integers(2, 8))
        )
    if shape == 1:  # deep nesting
        depth = int(rng.choice([10, 100, 1000, 3000, 20000]))
        return "(" * depth + name() + ")" * (depth if rng.random() < 0.8 else depth - 1)
    if shape == 2:  # many factors
        n = int(rng.choice([10, 200, 2000, 50000]))
        return str(rng.choice(["*", " ", "/", "."])).join(name() for _ in range(n))
    if shape == 3:  # division by zero, stray operators
        return str(rng.choice(["1/", "m/0", "/", "m//s", "0 m", "m/(s-s)", "m**", "**m", "m^-", "()", "m/()", "m s-0"]))
    if shape == 4:  # huge or non-finite numbers and exponents
        number = rng.choice(["1e999", "nan", "inf", "-inf", "1e-999", "0"])
        return f"{number} {name()}{rng.choice(['', '^1e308', '**-99999', '2'])}"
    if shape == 5:  # exponents on groups
        return f"({name()}/{name()})**{int(rng.integers(-(10**6), 10**6))}"
    if shape == 6:  # code-looking strings pint might evaluate
        return str(rng.choice(["__import__('os')", "lambda: 1", "[1]*10**9", "m if 1 else s", "m; s", "m\n**9**9"]))
    if shape == 7:  # unicode and control characters
        return "".join(chr(int(c)) for c in rng.integers(1, 0x2FFF, int(rng.integers(1, 40))))
    if shape == 8:  # very long plain names
        return "m" * int(rng.choice([256, 4096, 10**6]))
    if shape == 9:  # known units (the right result is checked)
        return str(rng.choice(list(KNOWN_UNITS)))
    alphabet = list("mskgK()*/^- .0123456789e") + ["**", "µ", "°"]
    return "".join(str(rng.choice(alphabet)) for _ in range(int(rng.integers(1, 60))))


def _small_volume(components: int = 3) -> Any:
    import vdbflow

    ijk = np.argwhere(np.ones((12, 10, 9), bool))
    values = np.stack([ijk[:, 0] * 0.5, ijk[:, 1] - 2.0, ijk[:, 2] * 0.25], 1)[:, :components].astype(np.float32)
    tiles = (np.array([[64, 0, 0]]), np.array([8]), np.full((1, components), 7.0, np.float32))
    return vdbflow.Volume.from_voxels(ijk, values if components > 1 else values[:, 0], background=-1.0, tiles=tiles)


def _check_units_result(text: Any, where: str) -> None:
    if text is not None and not isinstance(text, str):
        raise Wrong(f"{where} gave {type(text).__name__}, expected str or None")


def case_units(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    from vdbflow.core import units

    text = hostile_unit(rng)
    with warnings.catch_warnings(record=True) as normalized:
        warnings.simplefilter("always")
        out = units.normalize(text)
    _check_units_result(out, "normalize")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for result, where in (
            (units.divide(text, "m"), "divide"),
            (units.multiply(text, "1/s"), "multiply"),
            (units.power(text, int(rng.choice([-3, 2, 3, 99]))), "power"),
        ):
            _check_units_result(result, where)
        units.same(text, "m/s")
        vol = _small_volume()
        vol.units, vol.length_units = text, str(rng.choice(["m", text]))
        ds = vol.sample_grad(np.array([[1.5, 2.25, 3.0]]), space="index")
        _check_units_result(ds[f"{vol.name}_jacobian"].attrs.get("units"), "the Jacobian's units")
    other = [w for w in [*normalized, *caught] if not issubclass(w.category, units.UnitsWarning)]
    if other:
        raise Wrong(f"unexpected warning {other[0].category.__name__}: {other[0].message}")
    if text in KNOWN_UNITS:
        if out != KNOWN_UNITS[text]:
            raise Wrong(f"normalize({text!r}) gave {out!r}, expected {KNOWN_UNITS[text]!r}")
        return "same", text
    if normalized:  # normalize itself could not read it (a product or power of it may not be readable either)
        if out != text.strip():
            raise Wrong(f"an unreadable unit string must be kept as given, got {out!r} for {text[:40]!r}")
        return "warned", text[:40]
    return "same", f"{text[:40]!r} -> {out!r}"


# -- metadata records -----------------------------------------------------------------------------------


def hostile_json(rng: np.random.Generator) -> bytes:
    shape = int(rng.integers(10))
    if shape == 9:  # strings that never close: a quadratic scan of them would take hours at 1 MiB
        n = int(rng.choice([1000, 100_000, 340_000]))
        return (str(rng.choice(['"', '["', '{"a": "'])) + str(rng.choice(['\\"', 'a\\"', "["])) * n).encode()
    depth = int(rng.choice([50, 1000, 100000]))
    if shape == 0:
        return ("[" * depth + "]" * depth).encode()
    if shape == 1:
        return ('{"units": ' + "[" * depth + "1" + "]" * depth + "}").encode()
    if shape == 2:
        return ('{"units": ' + "1" * int(rng.choice([400, 5000, 100000])) + "}").encode()
    if shape == 3:
        return json.dumps({"units": int(rng.integers(9)), "component_names": [1, 2]}).encode()
    if shape == 4:
        return bytes(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8))
    if shape == 5:
        return b'{"units": NaN, "length_units": Infinity, "component_names": ["a", "a", "b"]}'
    if shape == 6:
        return json.dumps({"format": 1, "units": hostile_unit(rng), "length_units": hostile_unit(rng)}).encode()
    if shape == 7:
        return json.dumps({"component_names": ["x"] * int(rng.choice([2, 3, 10**5]))}).encode()
    return b'{"units": "m/s", "units": "' + b"x" * int(rng.choice([10, 10**6])) + b'"}'


def case_metadata(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    import vdbflow
    from vdbflow.io.nanovdb import METADATA_NAME, BlindData, write

    vol = _small_volume()
    data = hostile_json(rng)
    vol.blind_data = (BlindData(METADATA_NAME, 0, 0, 0, 1, data),)
    write.blind_records = lambda obj: tuple(obj.blind_data)  # write the hostile record as it is
    path = work / "meta.nvdb"
    vdbflow.save(path, {"velocity": vol}, codec=str(rng.choice(["none", "zip"])))
    with warnings.catch_warnings():  # a bad record is ignored with a warning: the grid itself is fine
        warnings.simplefilter("ignore")
        try:
            back = vdbflow.open(path)
        except Exception as err:
            raise Wrong(f"a grid whose metadata record is bad was refused: {type(err).__name__}: {err}") from None
        ds = back.sample_grad(np.array([[1.5, 2.25, 3.0], [70.0, 1.0, 1.0]]), space="index")
    for attr in ("units", "length_units"):
        _check_units_result(getattr(back, attr, None), attr)
    expect = np.array([[0.75, 0.25, 0.75], [7.0, 7.0, 7.0]], np.float32)
    if not np.array_equal(ds["velocity"].values, expect):
        raise Wrong(f"the grid sampled {ds['velocity'].values.tolist()}, expected {expect.tolist()}")
    return "same", f"record of {len(data)} bytes"


# -- Zarr volume stores ---------------------------------------------------------------------------------


def _chunk_files(store: Path) -> list[Path]:
    return sorted(p for p in store.rglob("*") if p.is_file() and not p.name.startswith(".") and p.parent != store)


def _edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))


def _edit_array_meta(store: Path, array: str, edit: Callable[[dict], None], consolidated: bool) -> None:
    """Edit ``array``'s .zarray, and its copy in .zmetadata (both or the file alone)."""
    _edit_json(store / array / ".zarray", edit)
    if consolidated and (store / ".zmetadata").exists():
        _edit_json(store / ".zmetadata", lambda m: edit(m["metadata"][f"{array}/.zarray"]))


def _edit_attrs(store: Path, edit: Callable[[dict], None], consolidated: bool) -> None:
    _edit_json(store / ".zattrs", edit)
    if consolidated and (store / ".zmetadata").exists():
        _edit_json(store / ".zmetadata", lambda m: edit(m["metadata"][".zattrs"]))


def _mutate_store(rng: np.random.Generator, store: Path) -> tuple[str, bool]:
    """Apply one fault to ``store``; returns its name and whether the store may open with other values
    (faults the format cannot detect, such as flipped bits of a chunk)."""
    chunks = _chunk_files(store)
    chunk = chunks[int(rng.integers(len(chunks)))]
    arrays = sorted(p.name for p in store.iterdir() if (p / ".zarray").exists())
    array = str(rng.choice(arrays))
    both = bool(rng.random() < 0.7)
    fault = int(rng.integers(16))
    if fault == 0:
        chunk.unlink()
        return f"chunk {chunk.relative_to(store)} deleted", False
    if fault == 1:
        data = chunk.read_bytes()
        chunk.write_bytes(data[: int(rng.integers(len(data)))])
        return f"chunk {chunk.relative_to(store)} truncated", False
    if fault == 2:
        data = bytearray(chunk.read_bytes())
        for at in rng.integers(0, len(data), int(rng.integers(1, 8))):
            data[at] ^= 1 << int(rng.integers(8))
        chunk.write_bytes(bytes(data))
        return f"bits of {chunk.relative_to(store)} flipped", True
    if fault == 3:
        chunk.unlink()
        chunk.symlink_to("/dev/zero")
        return f"chunk {chunk.relative_to(store)} a link to /dev/zero", False
    if fault == 4:
        chunk.unlink()
        os.mkfifo(chunk)
        return f"chunk {chunk.relative_to(store)} a FIFO", False
    if fault == 5:
        chunk.unlink()
        chunk.mkdir()
        return f"chunk {chunk.relative_to(store)} a directory", False
    if fault == 6:
        factor = int(rng.choice([2, 10, 1000, 10**6, 10**9]))
        _edit_array_meta(store, array, lambda m: m.update(shape=[m["shape"][0] * factor, *m["shape"][1:]]), both)
        return f"{array} declares {factor}x its rows", False
    if fault == 7:
        bad = [[0, 3], [-1, 3], [2**62, 1], [1], "x", None][int(rng.integers(6))]
        _edit_array_meta(store, array, lambda m: m.update(chunks=bad), both)
        return f"{array} chunks {bad}", False
    if fault == 8:
        dtype = str(rng.choice(["<i2", "<f8", "|b1", "|O", ">f4", "<c16", "|S3", "<M8[s]", "bogus"]))
        _edit_array_meta(store, array, lambda m: m.update(dtype=dtype), both)
        return f"{array} dtype {dtype}", dtype == ">f4"
    if fault == 9:
        comp = [{"id": "nosuchcodec"}, {"id": "zlib", "level": 99}, "x", {"id": "blosc", "cname": "?"}][
            int(rng.integers(4))
        ]
        _edit_array_meta(store, array, lambda m: m.update(compressor=comp), both)
        return f"{array} compressor {comp}", False
    if fault == 10:
        value: Any = [
            "[" * 5000 + "]" * 5000,
            [[1.0] * 4] * 3,
            [float("nan")] * 16,
            [1e308] * 16,
            [0.0] * 16,
            "not json",
            {"a": 1},
            [1] * 15,
            [[[1]]],
        ][int(rng.integers(9))]
        _edit_attrs(store, lambda a: a.update(index_to_world=value), both)
        return f"index_to_world {str(value)[:30]}", False
    if fault == 11:
        key = str(rng.choice(["volume_units", "length_units"]))
        text = hostile_unit(rng)[:10000]
        _edit_attrs(store, lambda a: a.update({key: text}), both)
        return f"{key} {text[:30]!r}", True
    if fault == 12:
        what = int(rng.integers(3))
        edit = [lambda a: a.pop("format"), lambda a: a.update(format=7), lambda a: a.update(name="n" * 10**5)][what]
        _edit_attrs(store, edit, both)
        return ["format removed", "format 7", "a long name"][what], what == 2
    if fault == 13:
        (store / ".zmetadata").unlink(missing_ok=True)
        return "consolidated metadata removed", True
    if fault == 14:
        _edit_array_meta(store, array, lambda m: m.update(fill_value=123), both)
        return f"{array} fill value 123", True
    nested = "[" * 100000 + "]" * 100000
    (store / array / ".zarray").write_text(nested)
    return f"{array}/.zarray nested JSON", False


def _same_volume(a: Any, b: Any) -> bool:
    return (
        np.array_equal(a.topology.leaf_origins, b.topology.leaf_origins)
        and np.array_equal(a.topology.masks, b.topology.masks)
        and np.array_equal(np.asarray(a.active_values()), np.asarray(b.active_values()))
        and np.array_equal(np.asarray(a.background_values), np.asarray(b.background_values))
        and np.allclose(a.index_to_world, b.index_to_world)
    )


def case_stores(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    import vdbflow
    from vdbflow.io.volumes import to_zarr

    vol = _small_volume(int(rng.choice([1, 3])))
    store = work / "volume.zarr"
    to_zarr(vol, store, chunk=int(rng.choice([64, 256, 1 << 20])))
    fault, may_open = _mutate_store(rng, store)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            back = vdbflow.open_zarr(store)
            back.sample_grad(np.array([[1.5, 2.25, 3.0]]), space="index")
    except Exception as err:
        outcome, detail = _refused(err)
        return outcome, f"{fault}: {detail}"
    if _same_volume(back, vol):  # e.g. a fault in an array the volume is not built from (i, j, k)
        return "same", fault
    if may_open:
        return "changed", fault
    raise Wrong(f"a store with {fault} opened with other contents")


# -- series ---------------------------------------------------------------------------------------------


def _series_files(work: Path, rng: np.random.Generator) -> tuple[list[Path], list[Any]]:
    import vdbflow
    from vdbflow.io.time_record import time_record

    paths, vols = [], []
    for k in range(3):
        vol = _small_volume()
        vol.units, vol.length_units = "m/s", "m"
        vol.blind_data = (time_record(float(k)),)
        paths.append(work / f"step_{k:04d}.nvdb")
        vdbflow.save(paths[-1], {"velocity": vol})
        vols.append(vol)
    return paths, vols


def _replace(path: Path, vol: Any) -> None:
    """Write ``vol`` beside ``path`` and rename it over ``path`` (how tools replace files)."""
    import vdbflow

    fresh = path.with_name(path.name + ".new")
    vdbflow.save(fresh, {"velocity": vol})
    os.replace(fresh, path)


def case_series(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    import vdbflow
    from vdbflow.io.nanovdb import BlindData
    from vdbflow.io.time_record import TIME_RECORD, time_record

    paths, vols = _series_files(work, rng)
    k = int(rng.integers(3))
    fault = int(rng.integers(7))
    point = np.array([[1.5, 2.25, 3.0]])
    expect_refusal = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if fault == 0:  # a hostile time record
                vol = vols[k]
                vol.blind_data = (BlindData(TIME_RECORD, 0, 0, 0, 1, hostile_json(rng)),)
                _replace(paths[k], vol)
                what = "a hostile time record"
                series = vdbflow.open_series([str(p) for p in paths])
                expect_refusal = False  # a readable record may still be a valid time
            elif fault == 1:  # other units, length units or component names in one step
                vol = vols[k]
                change = int(rng.integers(3))
                if change == 0:
                    vol.units = "km/s"
                elif change == 1:
                    vol.length_units = "cm"
                else:
                    vol.component_names = ("w", "v", "u")
                _replace(paths[k], vol)
                what = ["units km/s", "length units cm", "components w v u"][change] + f" at step {k}"
                series = vdbflow.open_series([str(p) for p in paths])
                series.sample_grad(point, float(rng.uniform(0, 2)), space="index")
            else:
                series = vdbflow.open_series([str(p) for p in paths])
                vol = _small_volume()
                vol.units, vol.length_units = "m/s", "m"
                if fault == 2:  # replaced by other values
                    vol = vol.with_values(np.asarray(vol.values) * 2) if hasattr(vol, "with_values") else _scaled(vol)
                    vol.blind_data = (time_record(float(k)),)
                    what = f"step {k} replaced by other values"
                elif fault == 3:  # replaced by another time
                    vol.blind_data = (time_record(float(k) + 0.5),)
                    what = f"step {k} replaced by one at another time"
                elif fault == 4:  # rewritten in place, same size
                    data = bytearray(paths[k].read_bytes())
                    data[-1] ^= 0xFF
                    with open(paths[k], "r+b") as fh:
                        fh.write(bytes(data))
                    vol = None
                    what = f"step {k} rewritten in place"
                elif fault == 5:  # the same bytes again (a copy): identity changes, content does not
                    shutil.copyfile(paths[k], paths[k].with_name("copy"))
                    os.replace(paths[k].with_name("copy"), paths[k])
                    vol = None
                    expect_refusal = False
                    what = f"step {k} copied over with the same bytes"
                else:  # removed
                    paths[k].unlink()
                    vol = None
                    what = f"step {k} removed"
                if vol is not None:
                    _replace(paths[k], vol)
                for t in (float(k), float(min(k + 0.5, 2.0)), float(max(k - 0.5, 0.0))):
                    series.sample_grad(point, t, space="index")
        except Exception as err:
            outcome, detail = _refused(err)
            return outcome, f"{what}: {detail}"
    if expect_refusal:
        raise Wrong(f"a series with {what} was sampled without an error")
    return "same", what


def _scaled(vol: Any) -> Any:
    import vdbflow

    ijk = vol.active_voxels()
    return vdbflow.Volume.from_voxels(ijk, np.asarray(vol.active_values()) * 2, background=-1.0)


# -- job configs ----------------------------------------------------------------------------------------

CONFIG_VALUES: dict[str, list[Any]] = {
    "points.seed": [-1, 2**64, 1.5, "x", None, 2**32 - 1, 0, 2**63],
    "points.count": [0, -5, 1e300, 2**63, "1e3", 7],
    "points.chunk": [0, 1, -1, 2**40, 3],
    "volume.synthetic.extent": [1e300, -1, 0, float("nan"), float("inf"), 1e-300, 6.0],
    "volume.synthetic.resolution": [0, 1, 10**6, -3, 7, 2.5],
    "volume.synthetic.params": [
        {"amplitude": float("nan")},
        {"amplitude": float("inf")},
        {"amplitude": 1e308},
        {"bogus": 1},
        {"amplitude": 2.0},
    ],
    "volume.synthetic.shell": [[0.5, 0.1], [float("nan"), 1], [-1, 2], [0.1, 0.4]],
    "cluster.memory_limit": [-1, "0", "1 petabyte", "abc", "-5GiB", "auto", "nan"],
    "cluster.workers": [0, -1, 10**6, 1],
    "output.chunk": [1, 0, -1, 2**62, 1000],
    "sampling.mode": ["cubic??", 5, None, "closest"],
    "output.path": ["", "/proc/x.zarr", "a\0b.zarr", "/", "ok.zarr"],
    "limits.max_points": [-1, 0, 1e400, 10],
}


def _job(work: Path, **points: Any) -> dict[str, Any]:
    return {
        "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
        "points": {"kind": "random", "count": 2000, "chunk": 1000, "seed": 1, **points},
        "sampling": {"mode": "linear", "outputs": ["value", "jacobian"]},
        "cluster": {"kind": "local", "workers": 1, "dashboard": False},
        "output": {"path": str(work / "result.zarr")},
    }


def case_config(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    import distributed

    import vdbflow
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.plan import plan_job

    key = str(rng.choice(list(CONFIG_VALUES)))
    options = CONFIG_VALUES[key]
    value = options[int(rng.integers(len(options)))]
    if key == "output.path" and isinstance(value, str) and value and not value.startswith("/"):
        value = str(work / value)
    what = f"{key}={value!r}"[:80]
    try:
        cfg = load_config(data=_job(work), values={key: value})
        planned = plan_job(cfg, dry_run=True)
    except Exception as err:
        outcome, detail = _refused(err)
        return outcome, f"{what}: {detail}"
    if rng.random() > 0.3 or (planned.seconds or 0) > 10:  # e.g. output.chunk=1: 2,000 chunks, planned 100 s
        return "same", f"{what}: accepted by the dry run, planned {planned.seconds or 0:.0f} s (not run)"
    try:  # accepted: the run must then succeed
        with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as client:
            result = vdbflow.run(cfg, client=client)
    except Exception as err:
        raise Wrong(f"{what} passed the dry run, then the run failed: {type(err).__name__}: {err}") from None
    import xarray as xr

    with xr.open_zarr(result.output) as ds:
        velocity = ds["velocity"].values
    if not np.isfinite(velocity).all():
        raise Wrong(f"{what}: the run published non-finite velocities")
    return "done", what


# -- jobs under signals, full disks, concurrent runs ----------------------------------------------------


def _write_job(work: Path, cfg: dict[str, Any], name: str = "job.yaml") -> Path:
    import yaml

    path = work / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def _vdbflow(*args: str, cwd: Path, **kwargs: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )


def _tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _complete(path: Path, count: int) -> bool:
    import xarray as xr

    try:
        with xr.open_zarr(path) as ds:
            return (
                ds.sizes.get("point") == count
                and "input_sha256" in ds.attrs
                and bool(np.isfinite(ds["velocity"].values).all())
            )
    except Exception:
        return False


def _hidden(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.glob(f".{name}.*"))


def _job_input(work: Path) -> dict[str, Any]:
    """A job reading an .nvdb file through a private snapshot (so that snapshots are checked too)."""
    import vdbflow
    from vdbflow import synthetic

    vol = synthetic.flow_volume(synthetic.make_field("taylor_green"), 24, 2 * np.pi, np.dtype("float32"), 0.2, 0.5)
    vdbflow.save(work / "input.nvdb", {"velocity": vol})
    cfg = _job(work, count=60_000, chunk=5_000)
    cfg["volume"] = {"path": str(work / "input.nvdb"), "snapshot": True}
    return cfg


def case_signals(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    cfg = _job_input(work)
    final = work / "result.zarr"
    earlier = None
    if rng.random() < 0.5:
        done = subprocess.run(
            [sys.executable, "-m", "vdbflow.jobs.cli.main", "run", str(_write_job(work, cfg))],
            cwd=work,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise Wrong(f"the first run failed: {done.stderr[-300:]}")
        earlier = _tree_digest(final)
        cfg["output"]["overwrite"] = "always"
        cfg["points"]["seed"] = 2
    sig = int(rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]))
    delay = float(rng.uniform(0.0, 6.0))
    proc = _vdbflow("run", str(_write_job(work, cfg)), cwd=work)
    time.sleep(delay)
    if proc.poll() is None:
        os.kill(proc.pid, sig)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(0.5)  # tasks still in flight would write now
    code, name = proc.returncode, signal.Signals(sig).name
    what = f"{name} after {delay:.2f} s, exit {code}{', earlier result' if earlier else ''}"
    left = _hidden(work, "result.zarr")
    published = final.exists() and (earlier is None or _tree_digest(final) != earlier)
    if published and not _complete(final, 60_000):
        raise Wrong(f"{what}: an incomplete result was published")
    if not published and earlier is not None and _tree_digest(final) != earlier:
        raise Wrong(f"{what}: the earlier result changed")
    if code == 0:
        if not published or left:
            raise Wrong(f"{what}: exit 0 but published={published}, leftovers {left}")
        return "done", what
    if code == 128 + sig:  # the handler ran: everything cleaned up already
        if left or published:
            raise Wrong(f"{what}: after cleaning up, published={published}, leftovers {left}; {err[-200:]}")
        return "stopped", what
    clean = subprocess.run(
        [sys.executable, "-m", "vdbflow.jobs.cli.main", "clean", str(work)], cwd=work, capture_output=True, text=True
    )
    left = _hidden(work, "result.zarr")
    if clean.returncode != 0 or left:
        raise Wrong(f"{what}: vdbflow clean left {left} ({clean.stdout[-200:]})")
    return "killed", what


@contextlib.contextmanager
def _small_disk(work: Path, size: int):
    where = work / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True, capture_output=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def case_disk(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    import vdbflow
    from vdbflow import synthetic

    size = int(rng.integers(1 << 20, 12 << 20))
    what_kind = int(rng.integers(3))
    with _small_disk(work, size) as disk:
        filler = disk / "filler"
        filler.write_bytes(b"\0" * int(rng.integers(0, size // 2)))
        earlier = disk / "earlier.bin"
        earlier.write_bytes(b"earlier")
        try:
            if what_kind == 0:
                vol = synthetic.flow_volume(
                    synthetic.make_field("taylor_green"),
                    int(rng.choice([16, 32, 48])),
                    2 * np.pi,
                    np.dtype("float32"),
                    0.0,
                    0.6,
                )
                target = disk / "earlier.bin" if rng.random() < 0.5 else disk / "v.nvdb"
                vdbflow.save(target, {"velocity": vol}, codec=str(rng.choice(["none", "zip"])))
                what = f"save of {vol.active_voxel_count} voxels on {size >> 10} KiB"
                ok = vdbflow.open(target).active_voxel_count == vol.active_voxel_count
            elif what_kind == 1:
                vol = synthetic.flow_volume(
                    synthetic.make_field("abc"), int(rng.choice([16, 32, 48])), 2 * np.pi, np.dtype("float64"), 0.0, 0.6
                )
                vol.to_zarr(disk / "v.zarr")
                what = f"to_zarr of {vol.active_voxel_count} voxels on {size >> 10} KiB"
                ok = _same_volume(vdbflow.open_zarr(disk / "v.zarr"), vol)
            else:
                cfg = _job(disk, count=int(rng.choice([20_000, 200_000, 600_000])), chunk=20_000)
                cfg["volume"]["synthetic"]["write"] = str(disk / "tg.nvdb")
                proc = subprocess.run(
                    ["python", "-m", "vdbflow.jobs.cli.main", "run", str(_write_job(work, cfg))],
                    cwd=work,
                    capture_output=True,
                    text=True,
                )
                what = f"job of {cfg['points']['count']} points on {size >> 10} KiB, exit {proc.returncode}"
                if proc.returncode not in (0, 1, 2):
                    raise Wrong(f"{what}: {proc.stderr[-300:]}")
                if proc.returncode != 0:
                    if "Traceback" in proc.stderr:
                        raise Wrong(f"{what}: a traceback reached stderr: {proc.stderr[-300:]}")
                    outcome = "refused"
                    ok = not (disk / "result.zarr").exists()
                else:
                    outcome = "same"
                    ok = _complete(disk / "result.zarr", cfg["points"]["count"])
                left = [p.name for p in disk.iterdir() if p.name.startswith(".")]
                if left or not ok or earlier.read_bytes() != b"earlier":
                    raise Wrong(f"{what}: leftovers {left}, result complete or absent: {ok}")
                return outcome, what
        except Exception as err:
            left = [p.name for p in disk.iterdir() if p.name.startswith(".")]
            if left:
                raise Wrong(f"a failed write left {left}: {err}") from None
            if (
                earlier.exists()
                and earlier.read_bytes() not in (b"earlier",)
                and not earlier.read_bytes().startswith(b"NanoVDB"[:4])
            ):
                raise Wrong("the earlier file was damaged") from None
            outcome, detail = _refused(err)
            return outcome, f"{size >> 10} KiB: {detail}"
        if not ok:
            raise Wrong(f"{what}: the written data did not read back")
        return "same", what


def case_concurrent(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    overwrite = str(rng.choice(["never", "always"]))
    procs = []
    for seed in (1, 2):
        cfg = _job(work, count=int(rng.choice([20_000, 60_000])), seed=seed)
        cfg["output"]["overwrite"] = overwrite
        procs.append(_vdbflow("run", str(_write_job(work, cfg, f"job{seed}.yaml")), cwd=work))
        time.sleep(float(rng.uniform(0, 2)))
    codes, errs = [], []
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        codes.append(proc.returncode)
        errs.append(" ".join(err.split()))
    what = f"overwrite {overwrite}, exits {codes}"
    final = work / "result.zarr"
    import xarray as xr

    if not final.exists():
        raise Wrong(f"{what}: nothing was published")
    with xr.open_zarr(final) as ds:
        count = ds.sizes["point"]
    if not _complete(final, count):
        raise Wrong(f"{what}: the published result is incomplete")
    kept = sorted(work.glob("result.zarr.unpublished-*"))
    for code, err in zip(codes, errs, strict=True):
        if code not in (0, 1, 2) or "Traceback" in err:
            raise Wrong(f"{what}: {err[-300:]}")
        if code == 1 and "unpublished" not in err and "exists" not in err and "appeared" not in err:
            raise Wrong(f"{what}: a run failed for another reason: {err[-300:]}")
    for path in kept:
        with xr.open_zarr(path) as ds:
            if not _complete(path, ds.sizes["point"]):
                raise Wrong(f"{what}: the kept result {path.name} is incomplete")
    if _hidden(work, "result.zarr"):
        raise Wrong(f"{what}: leftovers {_hidden(work, 'result.zarr')}")
    return "done", what


# -- round four (issue 40): races between check and act ---------------------------------------------------

INTRUDERS = ("files", "file", "link", "replaceable", "nothing")


def _fake_result(path: Path, content: str) -> Path:
    """A directory shaped like a vdbflow Zarr result (vdbflow's attrs, one array holding ``content``)."""
    from vdbflow.jobs.publish.results import RESULT_TITLE

    path.mkdir()
    (path / ".zattrs").write_text(json.dumps({"title": RESULT_TITLE, "vdbflow_config": "{}"}))
    (path / "data").mkdir()
    (path / "data" / ".zarray").write_text("{}")
    (path / "data" / "0").write_text(content)
    return path


def _snapshot(path: Path) -> Any:
    """What is at ``path``: a link's target, a file's bytes, a directory's tree of names and bytes."""
    if path.is_symlink():
        return ("link", os.readlink(path))
    if path.is_file():
        return ("file", path.read_bytes())
    if path.is_dir():
        return (
            "dir",
            sorted((str(p.relative_to(path)), p.read_bytes() if p.is_file() else b"") for p in path.rglob("*")),
        )
    return None


def _intrude(kind: str, target: Path, work: Path, replaceable: Callable[[Path], Any], seen: dict) -> None:
    """Right after the writer's check: what was at ``target`` goes, and ``kind`` takes its place (its
    state kept in ``seen``)."""
    if os.path.lexists(target):
        os.rename(target, work / "moved-away")
    if kind == "files":
        target.mkdir()
        (target / "thesis.tex").write_text("precious")
    elif kind == "file":
        target.write_bytes(b"precious")
    elif kind == "link":
        (work / "elsewhere").mkdir()
        (work / "elsewhere" / "notes").write_text("precious")
        target.symlink_to(work / "elsewhere")
    elif kind == "replaceable":
        replaceable(target)
    seen["state"] = _snapshot(target)


def case_races(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """A writer checks its output path, then something else takes the path before the writer exchanges
    with it: ``to_zarr(overwrite=True)`` and a job's publishing, with and without ``renameat2``."""
    import vdbflow
    from vdbflow.core import atomic
    from vdbflow.io import volumes
    from vdbflow.jobs.publish import output

    intruder = str(rng.choice(INTRUDERS))
    earlier, exchange, job = bool(rng.random() < 0.7), bool(rng.random() < 0.6), bool(rng.random() < 0.5)
    if not exchange:
        atomic.renameat2 = output.renameat2 = lambda *args: False
    target = work / "out.zarr"
    seen: dict[str, Any] = {}
    what = f"{'publish' if job else 'to_zarr'}, {intruder}, earlier {earlier}, exchange {exchange}"
    if job:
        if earlier:
            _fake_result(target, "old")
        part = _fake_result(output.partial_path(target), "new")
        real_check, calls = output.not_a_result, []

        def check_then_race(path: Path) -> Any:
            problem = real_check(path)
            if not calls:
                _intrude(intruder, target, work, lambda t: _fake_result(t, "other"), seen)
            calls.append(path)
            return problem

        output.not_a_result = check_then_race
        run = lambda: output.publish(part, target, "always")  # noqa: E731
    else:
        vol = _small_volume(int(rng.choice([1, 3])))
        if earlier:
            _small_volume().to_zarr(str(target))
        real_zarr_check = volumes._check_replaceable

        def zarr_check_then_race(path: Path, overwrite: bool) -> None:
            real_zarr_check(path, overwrite)
            volumes._check_replaceable = real_zarr_check  # once: the intruder may be a store written here
            _intrude(intruder, target, work, lambda t: _small_volume().to_zarr(str(t)), seen)

        volumes._check_replaceable = zarr_check_then_race
        run = lambda: vol.to_zarr(str(target), overwrite=True)  # noqa: E731
    try:
        run()
        refused = None
    except vdbflow.VdbflowError as err:
        refused = err
    intruder_state = seen.get("state")
    left = [p.name for p in work.iterdir() if p.name.startswith(".")]
    if left:
        raise Wrong(f"{what}: hidden leftovers {left}")
    if refused is None:  # published: only over what may be replaced
        if intruder in ("files", "file", "link") and "state" in seen:
            raise Wrong(f"{what}: published over {intruder} that appeared after the check (it is gone)")
        if job:
            if (target / "data" / "0").read_text() != "new":
                raise Wrong(f"{what}: the published result is not the new one")
        elif not _same_volume(vdbflow.open_zarr(target), vol):
            raise Wrong(f"{what}: the published store does not read back")
        return "same", what
    if "state" in seen and _snapshot(target) != intruder_state and intruder != "nothing":
        raise Wrong(f"{what}: what appeared after the check was changed: {type(refused).__name__}: {refused}")
    if job:
        kept = list(work.glob("out.zarr.unpublished-*"))
        published = (
            target.is_dir() and (target / "data" / "0").is_file() and (target / "data" / "0").read_text() == "new"
        )
        if not published and (len(kept) != 1 or (kept[0] / "data" / "0").read_text() != "new"):
            raise Wrong(f"{what}: the complete new result was lost: {refused}")
    return "refused", f"{what}: {type(refused).__name__}: {str(refused)[:120]}"


# -- round four: files replaced while they are read -------------------------------------------------------


def _vdb_pair(work: Path, rng: np.random.Generator) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    sys.path.insert(0, str(ROOT / "tests"))
    from vdb_writer import write_vdb

    leaves = int(rng.choice([3, 200, 17_000]))  # the last: the early read beside the topology
    n = np.arange(leaves)
    ijk = np.stack([8 * (n % 64), 8 * ((n // 64) % 64), 8 * (n // 4096)], 1)
    old = rng.random(leaves).astype(np.float32)
    new_ijk = ijk if rng.random() < 0.7 else ijk + 8  # same topology (a silent mix) or another
    write_vdb(work / "f.vdb", "Tree_float_5_4_3", np.float32, 1, ijk, old, 0.0)
    write_vdb(work / "new.vdb", "Tree_float_5_4_3", np.float32, 1, new_ijk, -old - 1, 0.0)
    return work / "f.vdb", work / "new.vdb", ijk, old


def case_midread(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """A file renamed over (or, for .vdb, appended to in place) while a reader is between its first
    and its last read: the reader gets the file it opened, whole, or a vdbflow error; never a mix."""
    import vdbflow
    from vdbflow.io import zarr_v2
    from vdbflow.io.nanovdb import read as nvdb_read
    from vdbflow.io.openvdb import read as vdb_read

    fmt_ = str(rng.choice(["vdb", "nvdb", "zarr"]))
    how = "appended in place" if fmt_ == "vdb" and rng.random() < 0.25 else "renamed over"
    what = f"{fmt_} {how}"
    if fmt_ == "vdb":
        path, other, ijk, old = _vdb_pair(work, rng)
        real = vdb_read.read_head

        def hook(*args: Any) -> Any:
            if how == "renamed over":
                os.replace(other, path)
            else:
                with open(path, "ab") as fh:
                    fh.write(b"\0" * 8)
            return real(*args)

        vdb_read.read_head = hook
        expect_points, expect = ijk.astype(np.float64), old
    else:
        vol = _small_volume(1)
        changed = vdbflow.Volume.from_voxels(
            vol.active_voxels(), np.asarray(vol.active_values()) * -3 - 1, background=-1.0
        )
        path, other = work / f"v.{fmt_}", work / f"new.{fmt_}"
        if fmt_ == "nvdb":
            vdbflow.save(path, {"value": vol})
            vdbflow.save(other, {"value": changed})
            real_decode = nvdb_read.decode_grid

            def hook_nvdb(*args: Any) -> Any:
                os.replace(other, path)
                return real_decode(*args)

            nvdb_read.decode_grid = hook_nvdb
        else:
            from vdbflow.io.volumes import to_zarr

            to_zarr(vol, path, chunk=64)
            to_zarr(changed, other, chunk=64)
            real_read, calls = zarr_v2.read_regular, []
            at = int(rng.integers(1, 12))

            def hook_zarr(p: Path, limit: int, w: str) -> bytes:
                calls.append(p)
                if len(calls) == at:
                    os.rename(path, work / "old-store")
                    os.rename(other, path)
                return real_read(p, limit, w)

            zarr_v2.read_regular = hook_zarr
        expect_points = vol.active_voxels().astype(np.float64)
        expect = np.asarray(vol.active_values())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            back = vdbflow.open(path) if fmt_ != "zarr" else vdbflow.open_zarr(path)
            got = back.sample(expect_points, space="index", mode="closest")[back.name].values
    except Exception as err:
        outcome, detail = _refused(err)
        return outcome, f"{what}: {detail}"
    if not np.array_equal(np.asarray(got).reshape(-1), np.asarray(expect).reshape(-1)):
        raise Wrong(f"{what}: read values of neither file whole ({np.asarray(got).reshape(-1)[:3]} ...)")
    return "same", what


# -- round four: the planner's chunk estimate against a chunk's measured peak ------------------------------


PLANNER_SLACK = 1 << 20  # bytes of a chunk that do not grow with its points (xarray's objects, small temporaries)


def sample_chunk_arrays(spec: Any, request: Any, points: np.ndarray, vol: Any) -> dict[str, Any]:
    from vdbflow.jobs.chunks import sample_chunk

    returned = sample_chunk(0, 0, len(points), spec, points, vol)
    return dict(zip(request.outputs, returned[1 : 1 + len(request.outputs)], strict=True))


def case_planner(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """One chunk of a job sampled here under ``tracemalloc``: its peak (every array the chunk task makes
    and the outputs computed from them) must be within the plan's working set of that chunk, and its
    arrays within the plan's bytes a point held."""
    import tracemalloc

    from vdbflow import synthetic
    from vdbflow.core import outputs as output_table
    from vdbflow.jobs.chunks import ChunkSpec, grid_request, grid_variables, sample_chunk
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.plan import CHUNK_WORKING_SET_FACTOR, plan_job

    names = list(output_table.TABLE)
    outputs = sorted({str(o) for o in rng.choice(names, int(rng.integers(1, 4)))}, key=names.index)
    n = int(rng.choice([200, 1000, 5000, 20_000]))
    mode = str(rng.choice(["linear", "fd4", "lag4", "catmull_rom"]))
    dtype = str(rng.choice(["float32", "float64"]))
    what = f"{outputs}, {n} points, {mode}, {dtype}"
    cfg_dict = _job(work, count=n, chunk=n)
    cfg_dict["sampling"] = {"mode": mode, "outputs": outputs}
    cfg_dict["volume"]["synthetic"]["dtype"] = dtype
    try:
        cfg = load_config(data=cfg_dict)
        plan = plan_job(cfg, dry_run=True)
        request = grid_request(cfg)
    except Exception as err:
        outcome, detail = _refused(err)
        return outcome, f"{what}: {detail}"
    field = synthetic.make_field("taylor_green")
    vol = synthetic.flow_volume(field, 16, 2 * np.pi, np.dtype(dtype), 0.0, 0.6)
    points = np.random.default_rng(int(rng.integers(1 << 30))).uniform(1, 15, (n, 3))
    spec = ChunkSpec(request, None, "inside" in outputs, None)
    grid_variables(vol, request, points[:8], sample_chunk_arrays(spec, request, points[:8], vol), cfg, "", None)
    tracemalloc.start()  # after a first small chunk: imports and caches are not the chunk's
    try:
        returned = sample_chunk(0, 0, n, spec, points, vol)
        arrays = dict(zip(request.outputs, returned[1 : 1 + len(request.outputs)], strict=True))
        inside = returned[1 + len(request.outputs)] if spec.inside else None
        ds, _ = grid_variables(vol, request, points, arrays, cfg, "", inside)
        derived = {v: np.asarray(ds[v].values) for v in ds.data_vars}
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = sum(np.asarray(a).nbytes for a in returned[: 1 + len(request.outputs) + spec.inside]) + 8 * n
    need, _, _ = plan.chunk_working_set()
    need += PLANNER_SLACK
    if held > plan.held_per_point * n:
        raise Wrong(f"{what}: a chunk holds {held / n:.0f} bytes a point, the plan counts {plan.held_per_point}")
    if peak > need:
        raise Wrong(f"{what}: a chunk peaked at {peak:,} bytes, the plan's working set is {need:,}")
    del derived
    return "same", f"{what}: peak {peak / n:.0f} B/point, plan {plan.held_per_point}x{CHUNK_WORKING_SET_FACTOR}"


# -- round four: text that is not valid UTF-8 wherever a name or unit is read ------------------------------

BAD_TEXT = (b"\xff\xfe", b"\xed\xa0\x80", b"\xc0\xaf", b"a\x00b", b"\x80")  # bytes no UTF-8 decoder accepts (or NUL)
BAD_ESCAPES = ("\\ud800", "\\udfff", "a\\udc80b", "\\ud83d", "\\ude00x")  # JSON escapes of lone surrogates


def _bad_json_text(rng: np.random.Generator) -> bytes:
    if rng.random() < 0.5:
        return b'"' + str(rng.choice(BAD_ESCAPES)).encode() + b'"'
    return b'"' + bytes(rng.choice(BAD_TEXT)) + b'"'


def _check_text_out(obj: Any, where: str) -> None:
    """Every name and unit ``obj`` gives is text UTF-8 can encode (what info, save and jobs need)."""
    from vdbflow.io.bounded_json import not_text

    for key in ("name", "units", "length_units"):
        value = getattr(obj, key, None)
        if value is not None and not_text(value) is not None:
            raise Wrong(f"{where}: {key} {not_text(value)}")
    for c in getattr(obj, "component_names", ()) or ():
        if not_text(c) is not None:
            raise Wrong(f"{where}: component name {not_text(c)}")


def case_text(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    import vdbflow
    from vdbflow.io.nanovdb import METADATA_NAME, BlindData, write

    where = str(rng.choice(["nvdb-metadata", "nvdb-name", "store-attrs", "vdb-name", "csv-header", "config"]))
    bad = _bad_json_text(rng)
    what = f"{where}: {bad[:20]!r}"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if where == "nvdb-metadata":
                key = str(rng.choice(["units", "length_units", "component_names"]))
                value = b"[" + b", ".join([b'"a"', bad, b'"c"']) + b"]" if key == "component_names" else bad
                vol = _small_volume()
                record = b'{"format": 1, "' + key.encode() + b'": ' + value + b"}"
                vol.blind_data = (BlindData(METADATA_NAME, 0, 0, 0, 1, record),)
                write.blind_records = lambda obj: tuple(obj.blind_data)
                vdbflow.save(work / "v.nvdb", {"velocity": vol})
                back = vdbflow.open(work / "v.nvdb")
            elif where == "nvdb-name":
                vdbflow.save(work / "v.nvdb", {"zzzzzz": _small_volume()})
                name = (bytes(rng.choice(BAD_TEXT)) + b"zzzzzz")[:6]
                raw = (work / "v.nvdb").read_bytes().replace(b"zzzzzz\0", name + b"\0")
                (work / "v.nvdb").write_bytes(raw)
                back = vdbflow.open(work / "v.nvdb", checksum=False)
            elif where == "store-attrs":
                vol = _small_volume()
                vol.units, vol.length_units = "m/s", "m"
                vol.to_zarr(str(work / "v.zarr"))
                key = str(rng.choice(["volume_units", "length_units", "name"]))
                for name in (".zattrs", ".zmetadata"):
                    text = (work / "v.zarr" / name).read_bytes()
                    edited = text.replace(f'"{key}"'.encode(), f'"{key}": '.encode() + bad + b', "x"', 1)
                    if edited == text:
                        raise Wrong(f"{what}: the campaign could not put the text in {name}")
                    (work / "v.zarr" / name).write_bytes(edited)
                back = vdbflow.open_zarr(work / "v.zarr")
            elif where == "vdb-name":
                sys.path.insert(0, str(ROOT / "tests"))
                from vdb_writer import write_vdb

                write_vdb(work / "f.vdb", "Tree_float_5_4_3", np.float32, 1, [[0, 0, 0]], [1.0], 0.0)
                name = (bytes(rng.choice(BAD_TEXT)) * 4)[:4]
                raw = (work / "f.vdb").read_bytes().replace(b"\x04\x00\x00\x00grid", b"\x04\x00\x00\x00" + name)
                (work / "f.vdb").write_bytes(raw)
                back = vdbflow.open(work / "f.vdb")
            elif where == "csv-header":
                (work / "p.csv").write_bytes(b"x," + bytes(rng.choice(BAD_TEXT)) + b",z\n1,2,3\n")
                from vdbflow.jobs.config.load import load_config
                from vdbflow.jobs.plan import plan_job

                cfg = _job(work)
                cfg["points"] = {"kind": "file", "path": str(work / "p.csv"), "columns": ["x", "y", "z"]}
                plan_job(load_config(data=cfg), dry_run=True)
                raise Wrong(f"{what}: a CSV header that is not text was read")
            else:
                from vdbflow.jobs.config.load import load_config

                field = bytes(rng.choice(BAD_TEXT))
                (work / "job.yaml").write_bytes(
                    b"points: {kind: random, count: 5}\nvolume: {synthetic: {field: " + field + b"}}\n"
                )
                load_config(work / "job.yaml")
                raise Wrong(f"{what}: a config that is not text was read")
            _check_text_out(back, what)
            if where != "store-attrs":  # what `vdbflow info` prints, as UTF-8
                for g in vdbflow.list_grids(work / ("f.vdb" if where == "vdb-name" else "v.nvdb")):
                    _check_text_out(g, f"{what}: list_grids")
                    json.dumps(str(g), ensure_ascii=False).encode("utf-8")
            back.to_nvdb(str(work / "again.nvdb"))
    except Wrong:
        raise
    except Exception as err:
        outcome, detail = _refused(err)
        return outcome, f"{what}: {detail}"
    if any(issubclass(w.category, UserWarning) for w in caught):
        return "warned", what
    return "same", what


# -- round five, readers (issue 49): the cases are in scripts/fault_readers.py ------------------------------


def _readers_case(name: str, rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """A case of scripts/fault_readers.py, its oracle's finding raised as this module's :class:`Wrong`."""
    import fault_readers

    try:
        return getattr(fault_readers, name)(rng, work)
    except fault_readers.Wrong as err:
        raise Wrong(str(err)) from None


def case_urlfaults(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """Inputs read through a fault-injecting fsspec store (fault_readers.case_urlfaults)."""
    return _readers_case("case_urlfaults", rng, work)


def case_strided(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """Strided backend selections and hostile backend arguments (fault_readers.case_strided)."""
    return _readers_case("case_strided", rng, work)


# -- round five, statistics (issue 49): the cases are in scripts/hostile_statistics.py ---------------------


def case_statistics(rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """Hostile statistics specs (hostile_statistics.case): the oracle's finding raised as :class:`Wrong`."""
    import hostile_statistics

    try:
        return hostile_statistics.case(rng)
    except AssertionError as err:
        raise Wrong(str(err)) from None


# -- round five, publishing, resume, CUDA cache (issue 49): the cases are in scripts/hostile_publish_cases.py --


def _publish_case(name: str, rng: np.random.Generator, work: Path) -> tuple[str, str]:
    """A case of scripts/hostile_publish_cases.py, its oracle's finding raised as :class:`Wrong`."""
    import hostile_publish_cases

    try:
        return getattr(hostile_publish_cases, name)(rng, work)
    except hostile_publish_cases.Wrong as err:
        raise Wrong(str(err)) from None


KINDS: dict[str, Kind] = {
    "units": Kind(case_units, 0.30, 20, 3),
    "metadata": Kind(case_metadata, 0.15, 20, 3),
    "stores": Kind(case_stores, 0.30, 20, 3),
    "series": Kind(case_series, 0.12, 30, 3),
    "config": Kind(case_config, 0.07, 90, 0),
    "signals": Kind(case_signals, 0.03, 240, 0),
    "disk": Kind(case_disk, 0.02, 180, 0),
    "concurrent": Kind(case_concurrent, 0.01, 300, 0),
    # round four (issue 40): their shares when run alone with --kinds races,midread,planner,text
    "races": Kind(case_races, 0.10, 20, 3),
    "midread": Kind(case_midread, 0.10, 30, 3),
    "planner": Kind(case_planner, 0.05, 60, 3),
    "text": Kind(case_text, 0.10, 20, 3),
}
ROUND_FOUR = ("races", "midread", "planner", "text")
# round five, readers (issue 49): run them alone with --kinds urlfaults,strided
KINDS["urlfaults"] = Kind(case_urlfaults, 0.10, 30, 3)
KINDS["strided"] = Kind(case_strided, 0.10, 30, 3)
ROUND_FIVE_READERS = ("urlfaults", "strided")
# round five, statistics (issue 49): run it alone with --kinds statistics (10 door calls a case)
KINDS["statistics"] = Kind(case_statistics, 0.10, 60, 4)
# round five, publishing, resume and the CUDA build cache (issue 49): --kinds pubrecords,unitrecords,cachetrust
KINDS["pubrecords"] = Kind(lambda rng, work: _publish_case("case_pubrecords", rng, work), 0.10, 30, 3)
KINDS["unitrecords"] = Kind(lambda rng, work: _publish_case("case_unitrecords", rng, work), 0.10, 30, 3)
KINDS["cachetrust"] = Kind(lambda rng, work: _publish_case("case_cachetrust", rng, work), 0.10, 30, 3)
ROUND_FIVE_PUBLISH = ("pubrecords", "unitrecords", "cachetrust")
CHEAP = ("units", "metadata", "stores", "series")  # the kinds the test suite runs


# -- running ----------------------------------------------------------------------------------------------

WARM = "VDBFLOW_FAULT_CAMPAIGN_WARM"  # set for the fork server: it warms up once, the cases fork from it


def _warm_up() -> None:
    """What every case would otherwise do first: pint's registry (0.3 s) and vdbflow's modules.
    Nothing that starts a thread (the kernels' OpenMP pool, Zarr's I/O loop): a process forked
    from one that did can hang in it."""
    import importlib

    from vdbflow.core import units

    units.registry()
    for module in ("vdbflow.io.volumes", "vdbflow.io.nanovdb", "vdbflow.temporal.series", "vdbflow.jobs.runner"):
        importlib.import_module(module)


def _child(kind: str, seed: int, index: int, conn: Any) -> None:
    spec = KINDS[kind]
    if spec.memory_gib:
        limit = int(spec.memory_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    rng = np.random.default_rng([seed, index, list(KINDS).index(kind)])
    work = Path(tempfile.mkdtemp(prefix=f"vdbflow-fault-{kind}-"))
    try:
        outcome, detail = spec.run(rng, work)
    except Wrong as err:
        outcome, detail = "wrong", str(err)
    except MemoryError:
        outcome, detail = "memory", traceback.format_exc(limit=-3)
    except RecursionError:
        outcome, detail = "error", traceback.format_exc(limit=-3)
    except BaseException as err:  # noqa: BLE001 - every other exception is a bug of the case's kind
        outcome, detail = "error", f"{type(err).__name__}: {err}"[:300] + "\n" + traceback.format_exc(limit=-3)
    finally:
        subprocess.run(["umount", "-l", str(work / "disk")], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    conn.send((outcome, detail[:2000]))
    conn.close()
    os._exit(0)  # not multiprocessing's exit, which joins the threads the case started (seconds)


def plan(total: int, kinds: list[str]) -> list[tuple[str, int]]:
    """(kind, index) for ``total`` cases shared among ``kinds`` by their shares, interleaved."""
    shares = np.array([KINDS[k].share for k in kinds])
    counts = np.floor(total * shares / shares.sum()).astype(int)
    counts[np.argmax(shares)] += total - counts.sum()
    order = []
    for kind, n in zip(kinds, counts, strict=True):
        order.extend((kind, i) for i in range(n))
    order.sort(key=lambda ki: (ki[1] / max(counts[kinds.index(ki[0])], 1), ki[0]))
    return order


def run_campaign(
    total: int, kinds: list[str], seed: int = 0, jobs: int = 2, progress: bool = True
) -> tuple[Counter, list[dict[str, Any]]]:
    """Run ``total`` cases; returns outcome counts by (kind, outcome) and the bugs found."""
    if str(Path(__file__).parent) not in sys.path:
        sys.path.insert(0, str(Path(__file__).parent))
    import fault_campaign  # the cases' function by this name, not __main__'s, so the server's warm copy runs

    os.environ[WARM] = "1"
    here = str(Path(__file__).parent)  # the fork server imports this module by name (it ignores sys.path)
    os.environ["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "xarray", "zarr", "pint", "vdbflow", "distributed", "fault_campaign"])
    todo = plan(total, kinds)
    counts: Counter = Counter()
    bugs: list[dict[str, Any]] = []
    running: dict[Any, tuple[str, int, float, Any]] = {}
    started = time.monotonic()
    done = 0
    while todo or running:
        while todo and len(running) < jobs:
            kind, index = todo.pop(0)
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=fault_campaign._child, args=(kind, seed, index, child), daemon=True)
            proc.start()
            child.close()
            running[proc] = (kind, index, time.monotonic(), parent)
        time.sleep(0.005)
        for proc, (kind, index, t0, conn) in list(running.items()):
            outcome = None
            if conn.poll():
                try:
                    outcome, detail = conn.recv()
                except EOFError:
                    outcome = None
            if outcome is None and not proc.is_alive():
                proc.join()
                outcome, detail = "crash", f"exit code {proc.exitcode}"
                if proc.exitcode == -signal.SIGKILL:
                    outcome, detail = "memory", "killed (the out-of-memory killer?)"
            if outcome is None and time.monotonic() - t0 > KINDS[kind].seconds:
                outcome, detail = "hang", f"still running after {KINDS[kind].seconds:.0f} s"
                _kill_tree(proc.pid)
            if outcome is None:
                continue
            proc.join(5)
            if proc.is_alive():
                _kill_tree(proc.pid)
            del running[proc]
            counts[kind, outcome] += 1
            done += 1
            if outcome in BUGS:
                bugs.append({"kind": kind, "seed": seed, "index": index, "outcome": outcome, "detail": detail})
                if progress:
                    print(f"BUG {kind} {seed} {index} {outcome}: {detail.splitlines()[0][:200]}", flush=True)
            if progress and done % 100 == 0:
                print(f"{done}/{total} cases, {len(bugs)} bug(s), {time.monotonic() - started:.0f} s", flush=True)
    return counts, bugs


def _kill_tree(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def table(counts: Counter) -> str:
    kinds = sorted({k for k, _ in counts}, key=list(KINDS).index)
    outcomes = [o for o in ACCEPTED + BUGS if any(counts[k, o] for k in kinds)]
    rows = [["kind", *outcomes, "cases"]]
    for k in kinds:
        rows.append([k, *(str(counts[k, o]) for o in outcomes), str(sum(counts[k, o] for o in outcomes))])
    rows.append(["all", *(str(sum(counts[k, o] for k in kinds)) for o in outcomes), str(sum(counts.values()))])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated, of: " + ", ".join(KINDS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--replay", nargs=3, metavar=("KIND", "SEED", "INDEX"))
    args = parser.parse_args(argv)
    if args.replay:
        kind, seed, index = args.replay[0], int(args.replay[1]), int(args.replay[2])
        rng = np.random.default_rng([seed, index, list(KINDS).index(kind)])
        with tempfile.TemporaryDirectory() as work:
            print(KINDS[kind].run(rng, Path(work)))
        return 0
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kinds {unknown}; expected some of {list(KINDS)}")
    if "disk" in kinds and os.geteuid() != 0:
        print("disk: skipped (mounting a small tmpfs needs root)")
        kinds.remove("disk")
    t0 = time.monotonic()
    counts, bugs = run_campaign(args.cases, kinds, args.seed, args.jobs)
    print(table(counts))
    print(f"{sum(counts.values())} cases in {time.monotonic() - t0:.0f} s, {len(bugs)} bug(s)")
    if args.report:
        args.report.write_text(
            json.dumps({"counts": {f"{k}/{o}": n for (k, o), n in sorted(counts.items())}, "bugs": bugs}, indent=1)
        )
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
elif os.environ.get(WARM) == "1" and __name__ == "fault_campaign":
    os.environ.pop(WARM)  # the fork server imports this module: it warms up once, for every case
    _warm_up()
