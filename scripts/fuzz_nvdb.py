"""Structure-aware fuzzing of vdbflow's NanoVDB reader.

    python scripts/fuzz_nvdb.py --cases 100000 [--batch 500] [--sanitize] [--jobs 2] [--seed 0] [--checksums off]

Seed files (vdbflow-written grids of every value type, index grids with blind data, tiles, several
grids per file, zip and blosc codecs, and the .nvdb files warp-lang ships when it is installed) are
mutated where the format keeps its numbers: file header and grid metadata, grid header, tree node
offsets and counts, root tiles, internal-node tables, leaf origins, masks and index offsets, blind-data
records; plus bit flips, random spans, truncation and splices anywhere.  Most mutants get their grid
checksum cleared to "none", so that the mutation reaches the code behind the checksum.  With
``--checksums off`` no checksum is cleared and every file is read with ``checksum=False``: the
structural checks alone must refuse what is inconsistent (a stale checksum is only a warning by default).

Each batch runs in its own subprocess under an address-space limit.  A case ends as

- ``rejected``: a ``VdbflowError`` (the reader said what is wrong);
- ``accepted``: it opened, and what it holds is self-consistent: every active voxel samples (closest)
  to its stored value, linear sampling runs, and the volume survives a write + read round trip;
- ``inconsistent``: it opened but broke one of those rules (a bug);
- ``error``: any other exception (a bug); ``crash``: the subprocess died (a bug); ``sanitizer``: with
  ``--sanitize`` the extension is built with AddressSanitizer + UBSan and any report is a bug.

The run prints counts per outcome and writes every bug as ``(seed, case)`` to ``--report`` (JSON);
``python scripts/fuzz_nvdb.py --replay SEED CASE`` reproduces one in the foreground.
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
import traceback
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BOUNDARY = (
    0,
    1,
    2,
    7,
    8,
    255,
    256,
    511,
    512,
    513,
    4095,
    4096,
    2**15,
    2**16 - 1,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**48,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
)
FORMATS = {"B": 1, "H": 2, "I": 4, "i": 4, "Q": 8, "q": 8}


# -- seeds -------------------------------------------------------------------------------------------
def seed_files(folder: Path) -> list[bytes]:
    """Small valid files covering the format's features, written by vdbflow (and warp-lang's assets)."""
    import vdbflow

    rng = np.random.default_rng(1234)
    ijk = np.unique(rng.integers(-12, 20, (180, 3)), axis=0)
    tiles = (np.array([[128, 0, 0], [-8, 64, 0]]), np.array([128, 8]))
    grids: list[dict] = []
    for dtype, C in (
        (np.float32, 1),
        (np.float64, 1),
        (np.int32, 1),
        (np.float32, 3),
        (np.float64, 3),
        (np.float32, 4),
        (np.uint32, 1),
    ):
        data = (rng.standard_normal((len(ijk), C)) * 10).astype(dtype)
        tile_values = np.ones((2, C), dtype)
        grids.append(
            {
                "field": vdbflow.Volume.from_voxels(
                    ijk,
                    data[:, 0] if C == 1 else data,
                    1,
                    tiles=(*tiles, tile_values[:, 0] if C == 1 else tile_values),
                    voxel_size=0.5,
                )
            }
        )
    topo = vdbflow.Volume.from_active(ijk, tiles=tiles)
    grids.append({"index": topo})
    grids.append({"vel": topo.with_data(rng.standard_normal((topo.value_count, 3)).astype(np.float32))})
    grids.append({"a": grids[0]["field"], "bb": grids[3]["field"], "ccc": topo})  # several grids per file
    out = []
    for k, g in enumerate(grids):
        for codec in ("none", "zip", "blosc") if k in (0, 3, 8, 9) else ("none",):
            path = folder / f"seed{k}_{codec}.nvdb"
            vdbflow.save(path, g, codec=codec)
            out.append(path.read_bytes())
    try:
        import warp

        assets = Path(warp.__file__).parent
        for path in sorted(assets.glob("**/*.nvdb")):
            if path.stat().st_size <= 4 << 20:
                out.append(path.read_bytes())
    except ImportError:
        pass
    return out


# -- the format's numbers, found in a (valid) seed ------------------------------------------------------
def _u(buf: bytes, at: int, form: str) -> int:
    return struct.unpack_from("<" + form, buf, at)[0] if 0 <= at and at + FORMATS[form] <= len(buf) else 0


def grid_starts(buf: bytes) -> list[int]:
    """Byte offsets of the uncompressed grids of a file (segments of codec none)."""
    from vdbflow.io.nanovdb import format as fmt

    starts, pos = [], 0
    while pos + fmt.FILE_HEADER_SIZE <= len(buf):
        count, codec = _u(buf, pos + 12, "H"), _u(buf, pos + 14, "H")
        meta = pos + fmt.FILE_HEADER_SIZE
        sizes = []
        for _ in range(count):
            sizes.append(_u(buf, meta, "Q"))
            meta += fmt.FILE_METADATA_SIZE + _u(buf, meta + 136, "I")
        if codec != 0 or not sizes:
            return starts
        pos = meta
        for size in sizes:
            starts.append(pos)
            pos += size
    return starts


def fields(buf: bytes) -> list[tuple[int, str]]:
    """(byte offset, struct code) of the numbers a reader trusts: headers, node offsets, tables."""
    from vdbflow.io.nanovdb import format as fmt

    out: list[tuple[int, str]] = [(8, "I"), (12, "H"), (14, "H")]  # the first segment's header
    meta = fmt.FILE_HEADER_SIZE
    for _ in range(min(_u(buf, 12, "H"), 8)):  # its grid metadata: sizes, voxel count, types, name size
        out += [(meta, "Q"), (meta + 8, "Q"), (meta + 24, "Q"), (meta + 32, "I"), (meta + 36, "I"), (meta + 136, "I")]
        meta += fmt.FILE_METADATA_SIZE + _u(buf, meta + 136, "I")
    for g in grid_starts(buf):
        out += [
            (g + 8, "Q"),
            (g + 16, "I"),
            (g + 20, "I"),
            (g + 24, "I"),
            (g + 28, "I"),
            (g + 32, "Q"),
            (g + fmt.GRID_OFF_CLASS, "I"),
            (g + fmt.GRID_OFF_TYPE, "I"),
            (g + fmt.GRID_OFF_BLIND_OFFSET, "q"),
            (g + fmt.GRID_OFF_BLIND_COUNT, "I"),
            (g + fmt.GRID_OFF_DATA1, "Q"),
        ]
        t = g + fmt.GRID_SIZE
        out += [(t + 8 * k, "Q") for k in range(4)] + [(t + 32 + 4 * k, "I") for k in range(6)] + [(t + 56, "Q")]
        layout = fmt.LAYOUTS.get(_u(buf, g + fmt.GRID_OFF_TYPE, "I"))
        if layout is None:
            continue
        offsets = [_u(buf, t + 8 * k, "Q") for k in range(4)]
        counts = [_u(buf, t + 32 + 4 * k, "I") for k in range(3)]
        root = t + offsets[3]
        tiles = _u(buf, root + fmt.ROOT_OFF_TABLE_SIZE, "I")
        out.append((root + fmt.ROOT_OFF_TABLE_SIZE, "I"))
        for k in range(min(tiles, 64)):
            tile = root + layout.root_size + k * layout.root_tile_size
            out += [(tile, "Q"), (tile + 8, "q"), (tile + 16, "I")]
        for level, size, table in (
            (2, layout.upper_size, layout.upper_off_table),
            (1, layout.lower_size, layout.lower_off_table),
        ):
            for n in range(min(counts[level], 8)):
                node = t + offsets[level] + n * size
                out += [(node + 4 * k, "i") for k in range(6)] + [(node + 24, "Q")]
                out += [(node + table + layout.table_stride * e, "q") for e in range(0, 4096, 97)]
        for n in range(min(counts[0], 64)):
            leaf = t + offsets[0] + n * layout.leaf_size
            out += [(leaf + 4 * k, "i") for k in range(3)] + [(leaf + 12, "I")]
            out += [(leaf + 16 + 8 * w, "Q") for w in range(8)]
            if layout.is_index:
                out += [(leaf + fmt.INDEX_LEAF_OFF_OFFSET, "Q"), (leaf + fmt.INDEX_LEAF_OFF_PREFIX, "Q")]
        blind = g + _u(buf, g + fmt.GRID_OFF_BLIND_OFFSET, "q")
        for k in range(min(_u(buf, g + fmt.GRID_OFF_BLIND_COUNT, "I"), 4)):
            rec = blind + k * fmt.BLIND_META_SIZE
            out += [(rec, "q"), (rec + 8, "Q"), (rec + 16, "I"), (rec + 20, "I"), (rec + 24, "I"), (rec + 28, "I")]
    return [(at, form) for at, form in out if 0 <= at and at + FORMATS[form] <= len(buf)]


# -- mutations --------------------------------------------------------------------------------------------
def mutate(seed: bytes, rng: np.random.Generator, clear_checksums: bool = True) -> bytes:
    """One mutant of a seed file: 1-3 structure-aware or byte-level changes (and, with
    ``clear_checksums``, most of them with their checksums cleared)."""
    buf = bytearray(seed)
    known = fields(seed)
    for _ in range(int(rng.integers(1, 4))):
        kind = rng.choice(
            ["field", "flip", "span", "truncate", "splice", "extend"], p=[0.6, 0.15, 0.1, 0.05, 0.05, 0.05]
        )
        if kind == "field" and known:
            at, form = known[int(rng.integers(len(known)))]
            width = FORMATS[form]
            old = int.from_bytes(buf[at : at + width], "little")
            choice = rng.integers(5)
            if choice == 0:
                new = int(rng.choice(BOUNDARY))
            elif choice == 1:
                new = old + int(rng.choice([-1, 1, -8, 8, 512, -512]))
            elif choice == 2:
                new = old * 2 + 1
            elif choice == 3:
                new = len(buf) + int(rng.integers(-64, 64))
            else:
                new = int(rng.integers(0, 2**63)) >> int(rng.integers(0, 63))
            buf[at : at + width] = (new % (1 << (8 * width))).to_bytes(width, "little")
        elif kind == "flip" and buf:
            for _ in range(int(rng.integers(1, 9))):
                at = int(rng.integers(len(buf)))
                buf[at] ^= 1 << int(rng.integers(8))
        elif kind == "span" and buf:
            at = int(rng.integers(len(buf)))
            n = int(min(len(buf) - at, rng.integers(1, 64)))
            fill = rng.choice(["zero", "ones", "random"])
            buf[at : at + n] = (
                bytes(n)
                if fill == "zero"
                else b"\xff" * n
                if fill == "ones"
                else rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            )
        elif kind == "truncate" and len(buf) > 1:
            del buf[int(rng.integers(len(buf))) :]
        elif kind == "splice" and len(buf) > 16:
            a, b = sorted(int(x) for x in rng.integers(0, len(buf), 2))
            dest = int(rng.integers(len(buf)))
            buf[dest : dest + (b - a)] = buf[a:b]
        elif kind == "extend":
            buf += rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
    if rng.random() < 0.75 and clear_checksums:  # clear grid checksums ("none"): the mutation is read further
        for g in grid_starts(bytes(buf)):
            if g + 16 <= len(buf):
                buf[g + 8 : g + 16] = b"\xff" * 8
    return bytes(buf)


def case_bytes(seeds: list[bytes], seed: int, case: int, clear_checksums: bool = True) -> bytes:
    """The mutant of (seed, case): deterministic, so that every outcome can be replayed."""
    rng = np.random.default_rng([seed, case])
    if case % 50 == 49:  # now and then a compressed bomb: a tiny payload that inflates a lot
        base = seeds[int(rng.integers(len(seeds)))]
        return base[:16] + zlib.compress(b"\0" * int(rng.integers(1 << 20, 1 << 24)))
    return mutate(seeds[int(rng.integers(len(seeds)))], rng, clear_checksums)


# -- the oracle ---------------------------------------------------------------------------------------------
def check(data: bytes, folder: Path, roundtrip: bool = True, checksum: bool | str = True) -> tuple[str, str]:
    """(outcome, detail) of reading one mutant (``checksum`` as ``vdbflow.open`` takes it): rejected,
    accepted, inconsistent or error.  Accepted grids are checked for consistency, with a write + read
    round trip when ``roundtrip``."""
    import vdbflow

    path = folder / "case.nvdb"
    path.write_bytes(data)
    try:
        infos = vdbflow.list_grids(str(path))
        grids = [vdbflow.open(str(path), grid=k, checksum=checksum) for k in range(min(len(infos), 3))]
    except vdbflow.VdbflowError as err:
        return "rejected", f"{type(err).__name__}: {str(err)[:160]}"
    except Exception as err:  # noqa: BLE001 - anything else is a reader bug
        return "error", f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=6)}"
    try:
        for k, grid in enumerate(grids):
            problem = _inconsistency(grid, folder / f"again{k}.nvdb", roundtrip)
            if problem:
                return "inconsistent", f"grid {k}: {problem}"
    except vdbflow.VdbflowError as err:
        return "inconsistent", f"accepted, then {type(err).__name__}: {str(err)[:200]}"
    except Exception as err:  # noqa: BLE001
        return "error", f"after opening: {type(err).__name__}: {err}\n{traceback.format_exc(limit=6)}"
    return "accepted", f"{len(grids)} grid(s)"


def _inconsistency(grid, again: Path, roundtrip: bool = True) -> str:
    import vdbflow

    ijk = grid.active_voxels()
    if len(ijk) != grid.active_voxel_count:
        return f"{len(ijk)} active voxels listed, {grid.active_voxel_count} counted"
    if isinstance(grid, vdbflow.Topology):
        if not roundtrip:
            return ""
        grid.to_nvdb(str(again), name="t")
        back = vdbflow.open(str(again))
        return "" if np.array_equal(back.active_voxels(), ijk) else "topology changed in a round trip"
    pick = ijk[:: max(1, len(ijk) // 256)]
    got, _ = vdbflow.sample_grad_arrays(grid, pick, "closest", jacobian=False)
    want = grid.active_values()[:: max(1, len(ijk) // 256)]
    if not np.array_equal(got, want, equal_nan=grid.value_type.is_float):
        return "closest sampling at active voxels differs from their stored values"
    if grid.value_type.is_float and len(ijk):
        lo, hi = ijk.min(axis=0) - 2, ijk.max(axis=0) + 2
        vdbflow.sample_grad_arrays(grid, np.random.default_rng(0).uniform(lo, hi, (64, 3)), "linear")
    if not roundtrip:
        return ""
    grid.to_nvdb(str(again), name=grid.name or "v")
    back = vdbflow.open(str(again))
    if not np.array_equal(back.active_voxels(), ijk):
        return "active voxels changed in a write + read round trip"
    if not np.array_equal(back.active_values(), grid.active_values(), equal_nan=grid.value_type.is_float):
        return "values changed in a write + read round trip"
    return ""


# -- batches in subprocesses -----------------------------------------------------------------------------------
def worker(seed: int, first: int, count: int, report: Path, roundtrip_every: int = 1, checksums: bool = True) -> None:
    """Runs cases [first, first + count) of ``seed``, one JSON line each (flushed: a crash leaves the
    cases before it on record); accepted files of every ``roundtrip_every``-th case are also written
    and read back.  Without ``checksums`` the mutants keep their checksums and are read unchecked."""
    import warnings

    import vdbflow

    warnings.simplefilter("ignore", vdbflow.ChecksumWarning)
    folder = Path(tempfile.mkdtemp(prefix="vdbflow-fuzz-"))
    try:
        seeds = seed_files(folder)
        with report.open("a") as out:
            for case in range(first, first + count):
                data = case_bytes(seeds, seed, case, clear_checksums=checksums)
                outcome, detail = check(data, folder, case % roundtrip_every == 0, checksums)
                out.write(json.dumps({"seed": seed, "case": case, "outcome": outcome, "detail": detail}) + "\n")
                out.flush()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sanitized_package(build: Path) -> dict[str, str]:
    """Builds the extension with AddressSanitizer + UBSan beside a copy of the package; returns the
    environment that runs Python against it."""
    import nanobind

    pkg = build / "pkg"
    if not (pkg / "vdbflow").is_dir():
        flags = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
        subprocess.run(
            [
                "cmake",
                "-S",
                str(ROOT),
                "-B",
                str(build / "cmake"),
                f"-DCMAKE_CXX_FLAGS={flags}",
                f"-Dnanobind_DIR={nanobind.cmake_dir()}",
                f"-DPython_EXECUTABLE={sys.executable}",
                "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
            ],
            check=True,
        )
        subprocess.run(["cmake", "--build", str(build / "cmake"), "-j", str(os.cpu_count() or 1)], check=True)
        shutil.copytree(ROOT / "vdbflow", pkg / "vdbflow", ignore=shutil.ignore_patterns("_core*", "__pycache__"))
        shutil.copytree(ROOT / "kernels", pkg / "vdbflow" / "kernels")
        for lib in (build / "cmake").glob("_core*.so"):
            shutil.copy(lib, pkg / "vdbflow")
    asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    ubsan = subprocess.run(["gcc", "-print-file-name=libubsan.so"], capture_output=True, text=True).stdout.strip()
    import sysconfig

    # workers run with `python -S`: no .pth files, so an editable install of vdbflow cannot shadow the
    # sanitized copy; the site-packages folders are named explicitly instead
    site = [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    return {
        "PYTHONPATH": os.pathsep.join([str(pkg), *dict.fromkeys(site)]),
        "VDBFLOW_FUZZ_PYTHON_FLAGS": "-S",
        "LD_PRELOAD": f"{asan}:{ubsan}",
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }


def campaign(
    cases: int,
    batch: int,
    seed: int,
    jobs: int,
    memory_gib: float | None,
    env_extra: dict[str, str],
    report: Path | None,
    roundtrip_every: int = 1,
    checksums: bool = True,
) -> Counter:
    """Runs ``cases`` mutants in subprocess batches (``checksums`` False: read with the checksums
    ignored, none cleared); returns the count per outcome."""
    counts: Counter = Counter()
    bugs: list[dict] = []
    folder = Path(tempfile.mkdtemp(prefix="vdbflow-fuzz-run-"))
    limit = None if memory_gib is None else int(memory_gib * (1 << 30))

    def start(first: int) -> tuple[subprocess.Popen, Path, int, int]:
        lines = folder / f"batch{first}.jsonl"
        n = min(batch, cases - first)
        env = {**os.environ, **env_extra}
        proc = subprocess.Popen(
            [
                sys.executable,
                *env_extra.get("VDBFLOW_FUZZ_PYTHON_FLAGS", "").split(),
                __file__,
                "--worker",
                str(seed),
                str(first),
                str(n),
                str(lines),
                str(roundtrip_every),
                "on" if checksums else "off",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=None if limit is None else lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        )
        return proc, lines, first, n

    def finish(proc: subprocess.Popen, lines: Path, first: int, n: int) -> None:
        _, err = proc.communicate()
        done = [json.loads(x) for x in lines.read_text().splitlines()] if lines.exists() else []
        for rec in done:
            counts[rec["outcome"]] += 1
            if rec["outcome"] in ("inconsistent", "error"):
                bugs.append(rec)
        text = err.decode(errors="replace")
        if proc.returncode != 0 or "runtime error" in text or "AddressSanitizer" in text:
            case = first + len(done)
            kind = "sanitizer" if ("runtime error" in text or "Sanitizer" in text) else "crash"
            counts[kind] += 1
            bugs.append(
                {"seed": seed, "case": case, "outcome": kind, "detail": f"exit {proc.returncode}: {text[-3000:]}"}
            )
            if case + 1 < first + n:  # go on after the case that died
                running.append(start_range(case + 1, first + n))

    def start_range(first: int, stop: int):
        proc, lines, f, _ = start(first)
        return proc, lines, f, stop - first

    running: list = []
    nxt = 0
    try:
        while nxt < cases or running:
            while nxt < cases and len(running) < jobs:
                running.append(start(nxt))
                nxt += batch
            proc, lines, first, n = running.pop(0)
            finish(proc, lines, first, n)
            total = sum(counts.values())
            print(
                f"\r{total:,}/{cases:,} cases: " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())),
                end="",
                flush=True,
            )
        print()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if report is not None:
        report.write_text(json.dumps({"counts": dict(counts), "bugs": bugs}, indent=1))
    for bug in bugs[:10]:
        print(f"seed {bug['seed']} case {bug['case']}: {bug['outcome']}: {bug['detail'][:600]}")
    return counts


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(
            int(sys.argv[2]),
            int(sys.argv[3]),
            int(sys.argv[4]),
            Path(sys.argv[5]),
            int(sys.argv[6]),
            sys.argv[7] == "on",
        )
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--memory-gib", type=float, default=4.0, help="address-space limit of each batch")
    ap.add_argument("--sanitize", action="store_true", help="AddressSanitizer + UBSan build of the extension")
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build" / "asan")
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--replay", type=int, nargs=2, metavar=("SEED", "CASE"))
    ap.add_argument(
        "--checksums",
        choices=["on", "off"],
        default="on",
        help="off: mutants keep their checksums and are read with checksum=False (the structural checks alone)",
    )
    args = ap.parse_args()
    if args.replay:
        folder = Path(tempfile.mkdtemp(prefix="vdbflow-fuzz-"))
        on = args.checksums == "on"
        outcome, detail = check(case_bytes(seed_files(folder), *args.replay, clear_checksums=on), folder, True, on)
        print(outcome, detail)
        return 0
    env = sanitized_package(args.build_dir) if args.sanitize else {}
    # ASan reserves terabytes of address space for its shadow: it bounds the heap itself instead
    memory = None if args.sanitize else args.memory_gib
    if args.sanitize:
        env["ASAN_OPTIONS"] += f":malloc_limit_mb={int(args.memory_gib * 1024)}"
    counts = campaign(
        args.cases, args.batch, args.seed, args.jobs, memory, env, args.report, checksums=args.checksums == "on"
    )
    bad = sum(counts[k] for k in ("inconsistent", "error", "crash", "sanitizer"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
