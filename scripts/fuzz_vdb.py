"""Structure-aware fuzzing of vdbflow's OpenVDB (.vdb) reader.

    python scripts/fuzz_vdb.py --cases 20000 [--batch 1000] [--jobs 2] [--seed 0] [--report bugs.json]
    python scripts/fuzz_vdb.py --replay SEED CASE

The seeds are the committed files of tests/data/openvdb (written by pyopenvdb and vdb_tool, see
scripts/make_vdb_seeds.py: float, half-float, level-set, vec3s, bool and instanced grids, repeated
names, blosc, zip and mask compression).  Each seed is parsed once with the reader's cursor
instrumented, which records where every number it reads lies (header, metadata, descriptors and
their offsets, transform, root counts and tiles, node masks, mask codes, chunk sizes); mutants set
those numbers to boundary values, random values or near misses, and add bit flips, random spans,
splices, truncations (anywhere and at field boundaries), crafted headers with absurd counts, and
zip bombs in leaf chunks.

Each batch runs in its own subprocess under an address-space limit.  A case ends as

- ``rejected``: a ``VdbflowError`` (the reader said what is wrong);
- ``accepted``: it opened, and what it holds is self-consistent: list_grids agrees with the grids
  opened (leaf counts, active voxels), the bytes read from memory give the same grid as the file,
  every active voxel samples (closest) to its stored value, linear sampling runs, and (every
  ``roundtrip_every``-th case) the grid survives a .nvdb write + read, or the .nvdb writer refuses it
  with a NanoVDBError (a grid NanoVDB cannot hold, e.g. a transform beyond the float32 range);
- ``inconsistent``: it opened but broke one of those rules (a bug);
- ``error``: any other exception (a bug); ``crash``: the subprocess died (a bug).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ROOT / "tests" / "data" / "openvdb"
BOUNDARY = (0, 1, 2, 7, 8, 63, 64, 255, 256, 511, 512, 4095, 4096, 32768, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1)


# -- seeds and their fields -----------------------------------------------------------------------------
def seed_files() -> list[bytes]:
    return [p.read_bytes() for p in sorted(SEEDS.glob("*.vdb"))]


def fields(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every number the reader reads from ``data``: its cursor instrumented while
    every grid is listed and opened."""
    import vdbflow
    from vdbflow.io.openvdb.stream import Cursor

    seen: list[tuple[int, int]] = []
    unpack, array, byte_at = Cursor.unpack, Cursor.array, Cursor.byte_at

    def record_unpack(self, form, what):
        seen.append((self.pos, struct.calcsize(form)))
        return unpack(self, form, what)

    def record_array(self, dtype, count, what):
        if count * np.dtype(dtype).itemsize <= 16:
            seen.append((self.pos, count * np.dtype(dtype).itemsize))
        return array(self, dtype, count, what)

    def record_byte(self, pos):
        seen.append((pos, 1))
        return byte_at(self, pos)

    Cursor.unpack, Cursor.array, Cursor.byte_at = record_unpack, record_array, record_byte
    try:
        infos = vdbflow.list_grids(data)
        for k in range(len(infos)):
            vdbflow.open(data, grid=k)
    finally:
        Cursor.unpack, Cursor.array, Cursor.byte_at = unpack, array, byte_at
    return sorted(set(seen))


def _number(rng: np.random.Generator, size: int, old: int) -> int:
    pick = rng.integers(5)
    if pick == 0:
        return int(rng.choice(BOUNDARY))
    if pick == 1:
        return old + int(rng.integers(-9, 10))
    if pick == 2:
        return -int(rng.choice(BOUNDARY))
    if pick == 3:
        return old * 2 + 1
    return int(rng.integers(0, 2 ** min(8 * size, 63)))


def mutate(seed: bytes, spots: list[tuple[int, int]], rng: np.random.Generator) -> bytes:
    buf = bytearray(seed)
    for _ in range(int(rng.integers(1, 4))):
        kind = rng.integers(10)
        if kind < 5 and spots:  # a number the reader reads
            at, size = spots[int(rng.integers(len(spots)))]
            old = int.from_bytes(buf[at : at + size], "little", signed=True)
            new = _number(rng, size, old) % (1 << (8 * size))
            buf[at : at + size] = new.to_bytes(size, "little")
        elif kind == 5:  # bit flips
            for _ in range(int(rng.integers(1, 9))):
                at = int(rng.integers(len(buf)))
                buf[at] ^= 1 << int(rng.integers(8))
        elif kind == 6:  # a random span
            at = int(rng.integers(len(buf)))
            n = int(rng.integers(1, 64))
            buf[at : at + n] = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        elif kind == 7:  # a splice: a span copied elsewhere
            a, b = (int(v) for v in rng.integers(len(buf), size=2))
            n = int(rng.integers(1, 512))
            buf[b : b + n] = buf[a : a + n]
        elif kind == 8:  # truncation, at a field boundary or anywhere
            if spots and rng.integers(2):
                at, size = spots[int(rng.integers(len(spots)))]
                cut = at + int(rng.integers(size + 1))
            else:
                cut = int(rng.integers(len(buf)))
            del buf[cut:]
        elif spots:  # a zip bomb where a chunk size is read
            at, size = spots[int(rng.integers(len(spots)))]
            if size == 8:
                bomb = zlib.compress(b"\0" * int(rng.integers(1 << 16, 1 << 24)))
                buf[at : at + 8 + len(bomb)] = struct.pack("<q", len(bomb)) + bomb
    return bytes(buf)


def crafted(seed: bytes, rng: np.random.Generator) -> bytes:
    """A header that is right up to one absurd number, then little or nothing."""
    head = bytearray(seed[: int(rng.integers(8, 200))])
    head += struct.pack("<I", int(rng.choice(BOUNDARY)) % 2**32) * int(rng.integers(1, 8))
    return bytes(head)


def case_bytes(seeds: list[bytes], spots: list[list[tuple[int, int]]], seed: int, case: int) -> bytes:
    """The mutant of (seed, case): deterministic, so that every outcome can be replayed."""
    rng = np.random.default_rng([seed, case])
    k = int(rng.integers(len(seeds)))
    if case % 40 == 39:
        return crafted(seeds[k], rng)
    return mutate(seeds[k], spots[k], rng)


# -- the oracle ---------------------------------------------------------------------------------------------
def check(data: bytes, folder: Path, roundtrip: bool = True) -> tuple[str, str]:
    """(outcome, detail) of reading one mutant."""
    import vdbflow

    path = folder / "case.vdb"
    path.write_bytes(data)
    try:
        infos = vdbflow.list_grids(str(path))
        grids = [vdbflow.open(str(path), grid=k) for k in range(len(infos))]
    except vdbflow.VdbflowError as err:
        return "rejected", f"{type(err).__name__}: {str(err)[:160]}"
    except Exception as err:  # noqa: BLE001 - anything else is a reader bug
        return "error", f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=8)}"
    try:
        for k, (info, grid) in enumerate(zip(infos, grids, strict=True)):
            problem = _inconsistency(info, grid, data, k, folder / f"again{k}.nvdb", roundtrip)
            if problem:
                return "inconsistent", f"grid {k}: {problem}"
    except vdbflow.VdbflowError as err:
        return "inconsistent", f"accepted, then {type(err).__name__}: {str(err)[:200]}"
    except Exception as err:  # noqa: BLE001
        return "error", f"after opening: {type(err).__name__}: {err}\n{traceback.format_exc(limit=8)}"
    return "accepted", f"{len(grids)} grid(s)"


def _inconsistency(info, grid, data: bytes, k: int, again: Path, roundtrip: bool) -> str:
    import vdbflow

    ijk = grid.active_voxels()
    if len(ijk) != grid.active_voxel_count:
        return f"{len(ijk)} active voxels listed, {grid.active_voxel_count} counted"
    if info.leaf_count != len(grid.leaf_origins if isinstance(grid, vdbflow.Topology) else grid.topology.leaf_origins):
        return "list_grids and open disagree on the leaf count"
    if info.active_voxel_count < len(ijk):
        return "list_grids counts fewer active voxels than the grid's leaves hold"
    from_bytes = vdbflow.open(data, grid=k)
    if isinstance(grid, vdbflow.Topology):
        return "" if np.array_equal(from_bytes.masks, grid.masks) else "bytes and file read differently"
    if not np.array_equal(np.asarray(from_bytes.voxel_data), np.asarray(grid.voxel_data), equal_nan=True):
        return "bytes and file read differently"
    pick = ijk[:: max(1, len(ijk) // 256)]
    got, _ = vdbflow.sample_grad_arrays(grid, pick, "closest", jacobian=False)
    want = grid.active_values()[:: max(1, len(ijk) // 256)]
    if not np.array_equal(got, want, equal_nan=True):
        return "closest sampling at active voxels differs from their stored values"
    if len(ijk):
        lo, hi = ijk.min(axis=0) - 2, ijk.max(axis=0) + 2
        vdbflow.sample_grad_arrays(grid, np.random.default_rng(0).uniform(lo, hi, (64, 3)), "linear")
    if not roundtrip:
        return ""
    try:
        grid.to_nvdb(str(again), name=grid.name or "v")
    except vdbflow.NanoVDBError:
        return ""  # a grid .nvdb cannot hold (a transform beyond float32, say): refused by the writer, fine
    back = vdbflow.open(str(again))
    if not np.array_equal(back.active_voxels(), ijk):
        return "active voxels changed in a write + read round trip"
    if not np.array_equal(back.active_values(), grid.active_values(), equal_nan=True):
        return "values changed in a write + read round trip"
    return ""


# -- batches in subprocesses -----------------------------------------------------------------------------------
def worker(seed: int, first: int, count: int, report: Path, roundtrip_every: int = 1) -> None:
    """Runs cases [first, first + count) of ``seed``, one JSON line each (flushed, so that a crash
    leaves the cases before it on record)."""
    folder = Path(tempfile.mkdtemp(prefix="vdbflow-fuzz-vdb-"))
    try:
        seeds = seed_files()
        spots = [fields(s) for s in seeds]
        with report.open("a") as out:
            for case in range(first, first + count):
                outcome, detail = check(case_bytes(seeds, spots, seed, case), folder, case % roundtrip_every == 0)
                out.write(json.dumps({"seed": seed, "case": case, "outcome": outcome, "detail": detail}) + "\n")
                out.flush()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def campaign(
    cases: int,
    batch: int,
    seed: int,
    jobs: int,
    memory_gib: float | None,
    report: Path | None,
    roundtrip_every: int = 1,
) -> Counter:
    """Runs ``cases`` mutants in subprocess batches, ``jobs`` at a time; returns the count per outcome."""
    counts: Counter = Counter()
    bugs: list[dict] = []
    folder = Path(tempfile.mkdtemp(prefix="vdbflow-fuzz-vdb-run-"))
    limit = None if memory_gib is None else int(memory_gib * (1 << 30))

    def start(first: int, stop: int) -> tuple[subprocess.Popen, Path, int, int]:
        lines = folder / f"batch{first}.jsonl"
        args = [str(seed), str(first), str(stop - first), str(lines), str(roundtrip_every)]
        proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=None if limit is None else lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        )
        return proc, lines, first, stop

    running: list = []
    nxt = 0
    try:
        while nxt < cases or running:
            while nxt < cases and len(running) < jobs:
                running.append(start(nxt, min(nxt + batch, cases)))
                nxt += batch
            proc, lines, first, stop = running.pop(0)
            _, err = proc.communicate()
            done = [json.loads(x) for x in lines.read_text().splitlines()] if lines.exists() else []
            lines.unlink(missing_ok=True)
            for rec in done:
                counts[rec["outcome"]] += 1
                if rec["outcome"] in ("inconsistent", "error"):
                    bugs.append(rec)
            if proc.returncode != 0:
                case = first + len(done)
                counts["crash"] += 1
                bugs.append({"seed": seed, "case": case, "outcome": "crash", "detail": err.decode()[-3000:]})
                if case + 1 < stop:  # go on after the case that died
                    running.append(start(case + 1, stop))
            total = sum(counts.values())
            print(f"\r{total:,}/{cases:,}: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())), end="")
        print()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if report is not None:
        report.write_text(json.dumps({"counts": dict(counts), "bugs": bugs}, indent=1))
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--memory-gib", type=float, default=4.0)
    ap.add_argument("--roundtrip-every", type=int, default=4)
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--replay", type=int, nargs=2, metavar=("SEED", "CASE"))
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        s, first, count, report, every = args.worker
        worker(int(s), int(first), int(count), Path(report), int(every))
        return
    if args.replay:
        seeds = seed_files()
        data = case_bytes(seeds, [fields(s) for s in seeds], *args.replay)
        with tempfile.TemporaryDirectory() as folder:
            print(*check(data, Path(folder)), sep="\n")
        return
    t0 = time.perf_counter()
    counts = campaign(args.cases, args.batch, args.seed, args.jobs, args.memory_gib, args.report, args.roundtrip_every)
    print(f"{sum(counts.values()):,} cases in {time.perf_counter() - t0:.0f} s: {dict(counts)}")
    if any(counts[k] for k in ("inconsistent", "error", "crash")):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
