"""Building the CUDA entry points: one NVRTC program per name expression, compiled once into a cache on disk.

A process compiles only the entries it calls (a few seconds each, where the whole module took minutes), and
only once per machine: each build is stored under a key of (the kernels' sources, the name expression, the
options, the architecture, NVRTC's version) in :func:`cache_dir` (``$VDBFLOW_CUDA_CACHE``, else
``$XDG_CACHE_HOME/vdbflow/cuda`` or ``~/.cache/vdbflow/cuda``), shared by every process of the machine: a
lock file makes the workers that want the same entry wait for one compile (at most
``$VDBFLOW_CUDA_LOCK_TIMEOUT`` seconds, 600 by default), the image and its record are written under
temporary names and renamed into place, and an entry whose image does not match the digest in its record
is rebuilt.  ``vdbflow build-cuda --arch sm_90`` fills the cache ahead of time (a cluster image).

A cached image is code this process runs, so an entry is trusted only where no other user could have
written it (:func:`cache_problem`, :func:`entry_problem`): the folder must belong to this user or root and
be writable by no one else (else a :class:`DeviceError`), and the image and its record must be regular
files (not symbolic links) of this user or root that no one else may write, whose record names this very
key; any other entry is built again, privately.

Under ``VDBFLOW_CUDA_EMULATE=1`` the same sources are compiled by the host's C++ compiler into one shared
library (:func:`emulated_library`), which :mod:`vdbflow.devices.emulation` loads in place of a CUDA module.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from vdbflow.core.atomic import atomic_file
from vdbflow.core.kernel import GPU_STEPS, OPERATIONS
from vdbflow.devices import nvrtc
from vdbflow.errors import DeviceError

log = logging.getLogger("vdbflow.devices")
THREADS_PER_BLOCK = 256  # every launch's block size; the kernels' launch bounds (launch.h VDB_BOUNDS)
# the entries of sample.cu that are not templates (operations.h rows with untyped values): compiled in every
# program, built alone as the unit ""
EXTERN_ENTRIES = tuple(
    op.gpu_entry for op in (*OPERATIONS.values(), *GPU_STEPS.values()) if op.value_types == "untyped"
)
# the templates of sample.cu whose threads synchronize (__syncthreads, shared memory): the emulation launches
# each of their blocks as one host thread a CUDA thread (emulate/cuda_host.h launch_synchronized)
BLOCK_SYNCHRONIZED = ("reduce_kernel",)
EMULATION_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-ffp-contract=off", "-pthread")


@dataclass(frozen=True)
class Built:
    """One cached build: the image file (cubin, PTX, or the emulation's shared library), the lowered name
    of each entry it holds, and how it was obtained (``compiled`` or ``cached``, seconds spent)."""

    path: Path
    lowered: dict[str, str]
    source: str  # "compiled" or "cached"
    seconds: float


_log_lock = threading.Lock()
BUILD_LOG: list[tuple[str, str, float]] = []  # (unit, "compiled" | "cached", seconds) of this process


def _note(unit: str, built: Built) -> Built:
    with _log_lock:
        BUILD_LOG.append((unit, built.source, built.seconds))
    return built


def build_records(since: dict[int, int] | None = None) -> tuple[int, list[tuple[str, str, float]]]:
    """This process's id and its builds (``(unit, "compiled" | "cached", seconds)`` each), those after
    ``since[pid]`` (a count :func:`build_records` gave earlier) where given: what one job added."""
    with _log_lock:
        log = list(BUILD_LOG)
    pid = os.getpid()
    return pid, log[(since or {}).get(pid, 0) :]


def worker_builds(results: dict) -> list[tuple[str, str, float]]:
    """The builds of every process in ``client.run(build_records, since)``'s answer, once a process (the
    workers of one process, as in a threads-only cluster, share its log)."""
    by_pid = dict(results.values())
    return [r for pid in sorted(by_pid) for r in by_pid[pid]]


def build_summary(records: list[tuple[str, str, float]] | None = None) -> str:
    """One line on builds (this process's by default): how many entries were compiled or loaded from the
    cache, and the seconds spent on each kind (empty when there were none)."""
    log = build_records()[1] if records is None else records
    if not log:
        return ""
    parts = []
    for kind, said in (("compiled", "compiled"), ("cached", "loaded from the cache")):
        done = [s for _, k, s in log if k == kind]
        if done:
            parts.append(f"{len(done)} {said} in {sum(done):.2f} s")
    return ", ".join(parts)


def kernel_dir() -> Path:
    """The kernels/ folder: installed inside the package, or at the root of a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if (candidate / "sample.cu").is_file():
            return candidate
    raise DeviceError(f"expected kernels/sample.cu next to the vdbflow package, found none under {here}")


def source_digest() -> str:
    """sha256 of every file sample.cu may include (its headers and the emulation's), in name order."""
    root = kernel_dir()
    files = [root / "sample.cu", *sorted((root / "vdbflow").glob("*.h")), *sorted((root / "emulate").glob("*.h"))]
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def cache_dir() -> Path:
    """Where builds are kept (created on first use)."""
    explicit = os.environ.get("VDBFLOW_CUDA_CACHE")
    if explicit:
        root = Path(explicit)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(base) / "vdbflow" / "cuda"
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        root.mkdir(mode=0o755, exist_ok=True)  # writable by its owner only, whatever the umask
    except OSError as err:
        raise DeviceError(f"expected a writable CUDA build cache at {root} (VDBFLOW_CUDA_CACHE), got {err}") from None
    problem = cache_problem(root)
    if problem is not None:
        raise DeviceError(
            f"expected a CUDA build cache that only its owner (this user or root) can write, found {root} {problem}: "
            "another user could plant code there that this process would run; make it private (chmod go-w) or "
            "set VDBFLOW_CUDA_CACHE to a folder of your own"
        )
    return root


def _trusted_owners() -> set[int]:
    """The users whose cache files this process runs: itself and root (a cache baked into an image)."""
    return {os.geteuid(), 0}


def cache_problem(root: Path) -> str | None:
    """Why the cache folder ``root`` may hold another user's code (None: it cannot)."""
    try:
        st = os.stat(root)
    except OSError as err:
        return f"cannot be read ({err})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if st.st_uid not in _trusted_owners():
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"is writable by {'others' if st.st_mode & 0o002 else 'its group'} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def entry_problem(path: Path) -> str | None:
    """Why the cache file ``path`` may not be trusted (None: a regular file of this user or root that no one
    else can write); not followed if it is a symbolic link."""
    try:
        st = os.lstat(path)
    except OSError as err:
        return f"cannot be read ({err})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid not in _trusted_owners():
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def exact() -> bool:
    """Whether ``VDBFLOW_CUDA_EXACT=1``: entries compiled with ``--fmad=false`` (no multiply-add contracted into
    an FMA), bit for bit the CPU's baseline target (docs/gpu.md "Bits"); a key of its own in the cache."""
    return os.environ.get("VDBFLOW_CUDA_EXACT", "0") == "1"


def nvrtc_options(arch: str) -> tuple[str, ...]:
    """NVRTC's options for ``arch`` (``sm_90``: machine code; ``compute_90``: PTX); ``--fmad=false`` under
    ``VDBFLOW_CUDA_EXACT=1``."""
    options = ("-std=c++17", f"-I{kernel_dir()}", f"-arch={arch}", f"-DVDB_THREADS_PER_BLOCK={THREADS_PER_BLOCK}")
    if exact():
        options = (*options, "--fmad=false")
    # machine code: ptxas reports each entry's registers, stack and spills into the log (resources())
    return (*options, "--ptxas-options=-v") if arch.startswith("sm_") else options


def choose_arch(compute_capability: int, compiler: nvrtc.Nvrtc) -> str:
    """``sm_XX`` when this NVRTC makes machine code for the device, else PTX (``compute_XX``) for the newest
    architecture it knows below the device's (the driver compiles that PTX on load)."""
    supported = compiler.supported_archs()
    if compute_capability in supported:
        return f"sm_{compute_capability}"
    older = [a for a in supported if a <= compute_capability]
    if not older:
        raise DeviceError(
            f"expected an NVRTC that compiles for compute capability {compute_capability}, "
            f"NVRTC {compiler.version[0]}.{compiler.version[1]} supports {supported}"
        )
    return f"compute_{max(older)}"


@dataclass(frozen=True)
class Resources:
    """What ptxas reports of one entry: registers a thread, stack frame, spills and static shared memory in bytes."""

    registers: int
    stack: int
    spill_stores: int
    spill_loads: int
    shared: int = 0


def resources(log: str) -> dict[str, Resources]:
    """Each entry's resources, by lowered name, from a log of ``--ptxas-options=-v``."""
    found: dict[str, Resources] = {}
    entry, frame = None, (0, 0, 0)
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            entry = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and entry:
            frame = tuple(int(g) for g in m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and entry:
            smem = re.search(r"(\d+) bytes smem", line)
            found[entry] = Resources(int(m.group(1)), *frame, shared=int(smem.group(1)) if smem else 0)
            entry, frame = None, (0, 0, 0)
    return found


def unit_of(name: str) -> str:
    """The program an entry is built in: its own name expression, or ``""`` for the extern "C" entries."""
    return "" if name in EXTERN_ENTRIES else name


def lock_timeout() -> float:
    """Seconds a process waits for another's compile of the same entry (``$VDBFLOW_CUDA_LOCK_TIMEOUT``)."""
    text = os.environ.get("VDBFLOW_CUDA_LOCK_TIMEOUT", "600")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise DeviceError(f"expected VDBFLOW_CUDA_LOCK_TIMEOUT to be a positive number of seconds, found {text!r}")
    return seconds


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (a file beside the entry, never followed if it is a link), held by one
    process of the machine at a time, waited for at most :func:`lock_timeout` seconds; a cache where the
    lock cannot be made (read-only, another user's) is a :class:`DeviceError`."""
    timeout = lock_timeout()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise DeviceError(
            f"expected a writable CUDA build cache at {path.parent} to build an entry into "
            f"(VDBFLOW_CUDA_CACHE, or fill it ahead with vdbflow build-cuda), got {err}"
        ) from None
    with os.fdopen(fd, "r+b") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DeviceError(f"expected the CUDA build cache's lock {path} to be a regular file, found another kind")
        deadline, pause = time.monotonic() + timeout, 0.01
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise DeviceError(
                        f"expected to lock {path} within {timeout:g} s to build a CUDA entry, found it held by "
                        "another process all that time (a hung compile?); VDBFLOW_CUDA_LOCK_TIMEOUT sets the wait"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.5)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_entry(record: Path, image: Path, key_parts: dict, say: bool = False) -> dict | None:
    """The record of a complete, intact, trusted entry of ``key_parts``, or None: missing, unreadable, an
    image that does not match its digest (a corrupt entry), a record of another key, or a file another user
    could have written (:func:`entry_problem`): each is built again."""
    for path in (record, image):
        problem = entry_problem(path)
        if problem is not None:
            if say and os.path.lexists(path):
                log.warning("not using the CUDA build cache's %s: it %s; building the entry again", path, problem)
            return None
    try:
        meta = json.loads(record.read_text())
        data = image.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or hashlib.sha256(data).hexdigest() != meta.get("image_sha256"):
        return None
    if meta.get("key") != json.loads(json.dumps(key_parts)):  # an entry renamed to another key's name
        return None
    return meta


def _cached_build(key_parts: dict, suffix: str, make: callable) -> tuple[Path, dict, str, float]:
    """The entry of ``key_parts`` in the cache, made by ``make() -> (image bytes, record dict)`` if absent."""
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True).encode()).hexdigest()[:32]
    root = cache_dir()
    image, record = root / f"{key}{suffix}", root / f"{key}.json"
    start = time.perf_counter()
    meta = _read_entry(record, image, key_parts)
    if meta is not None:
        return image, meta, "cached", time.perf_counter() - start
    with _locked(root / f"{key}.lock"):
        meta = _read_entry(record, image, key_parts, say=True)  # another process may have built it meanwhile
        if meta is not None:
            return image, meta, "cached", time.perf_counter() - start
        data, meta = make()
        meta = {**meta, "key": key_parts, "image_sha256": hashlib.sha256(data).hexdigest()}
        try:
            for path, content in ((image, data), (record, json.dumps(meta, indent=1).encode())):
                with atomic_file(path, mode=0o644) as fh:  # read by other users of a cluster image, written by one
                    fh.write(content)
        except OSError as err:  # a folder or another user's file in the entry's place, a full disk
            raise DeviceError(
                f"expected to write the CUDA build cache's entry {image.name} in {root}, got {err}"
            ) from None
    return image, meta, "compiled", time.perf_counter() - start


def build_nvrtc(name: str, arch: str, compiler: nvrtc.Nvrtc | None = None) -> Built:
    """The cubin (``sm_XX``) or PTX (``compute_XX``) of the program holding entry ``name``."""
    compiler = compiler or nvrtc.load()
    unit = unit_of(name)
    options = nvrtc_options(arch)
    kind = "cubin" if arch.startswith("sm_") else "ptx"
    exprs = (unit,) if unit else ()
    parts = {"source": source_digest(), "unit": unit, "options": options, "nvrtc": compiler.version, "kind": kind}

    def make() -> tuple[bytes, dict]:
        source = (kernel_dir() / "sample.cu").read_text()
        t0 = time.perf_counter()
        out = compiler.compile(source, "sample.cu", options, exprs, kind)
        lowered = {**out.lowered, **{n: n for n in EXTERN_ENTRIES}}
        return out.image, {"lowered": lowered, "log": out.log, "compile_seconds": time.perf_counter() - t0}

    path, meta, how, seconds = _cached_build(parts, f".{kind}", make)
    return _note(unit or "extern", Built(path, meta["lowered"], how, seconds))


def build_all(
    names: tuple[str, ...], arch: str, compiler: nvrtc.Nvrtc | None = None, workers: int | None = None
) -> dict[str, Built]:
    """Every program holding ``names``, ``workers`` compiles at a time (NVRTC runs outside the GIL)."""
    compiler = compiler or nvrtc.load()
    units = sorted({unit_of(n) for n in names})
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        made = pool.map(lambda u: build_nvrtc(u or EXTERN_ENTRIES[0], arch, compiler), units)
        built = dict(zip(units, made, strict=True))
    return {n: built[unit_of(n)] for n in names}


# --- the host emulation: every entry in one shared library -------------------------------------------------


def _emulation_macro(name: str) -> str:
    """The emulation table's macro of entry ``name``: synchronized launches for BLOCK_SYNCHRONIZED templates."""
    synchronized = any(name.startswith(f"vdbflow::{t}<") for t in BLOCK_SYNCHRONIZED)
    return "VDB_EMULATE_SYNCHRONIZED_ENTRY" if synchronized else "VDB_EMULATE_ENTRY"


def _emulation_source(names: tuple[str, ...], source: Path) -> str:
    # the kernels' extern "C" entries are functions of namespace vdbflow, as their templates are
    rows = [f'    {_emulation_macro(n)}("{n}", &{"vdbflow::" + n if n in EXTERN_ENTRIES else n}),' for n in names]
    return "\n".join(
        [
            "// generated by vdbflow/devices/cuda_build.py: CUDA entries for the host emulation of CUDA",
            '#include "emulate/cuda_host.h"',
            f'#include "{source.as_posix()}"',
            "thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;",
            "static const vdb_emulate::Entry entries[] = {",
            *rows,
            "};",
            'extern "C" int vdbflow_emulate_count() { return (int)(sizeof(entries) / sizeof(entries[0])); }',
            'extern "C" const char* vdbflow_emulate_name(int e) { return entries[e].name; }',
            'extern "C" const char* vdbflow_emulate_signature(int e) { return entries[e].signature(); }',
            'extern "C" void vdbflow_emulate_launch(int e, unsigned grid, unsigned block, void** args, int threads) {',
            "  entries[e].launch(grid, block, args, threads);",
            "}",
            "",
        ]
    )


def emulation_flags() -> tuple[str, ...]:
    """The emulation's compiler flags: no contraction (the CPU's baseline target, and the GPU under
    ``VDBFLOW_CUDA_EXACT=1``), or under ``VDBFLOW_CUDA_EMULATE_FMA=1`` multiply-adds contracted into FMAs where
    the host compiler sees them, as NVRTC does by default (``-ffp-contract=fast -mfma``; docs/gpu.md "Bits")."""
    if os.environ.get("VDBFLOW_CUDA_EMULATE_FMA", "0") == "1" and not exact():
        return tuple("-ffp-contract=fast" if f == "-ffp-contract=off" else f for f in EMULATION_FLAGS) + ("-mfma",)
    return EMULATION_FLAGS


def host_compiler() -> str:
    """The C++ compiler of the emulation: ``$CXX``, else c++ / g++ / clang++ on the path."""
    for candidate in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if candidate and shutil.which(candidate):
            return candidate
    raise DeviceError("expected a C++17 compiler for VDBFLOW_CUDA_EMULATE (c++, g++ or clang++; or $CXX), found none")


def emulated_library(names: tuple[str, ...], source: Path | None = None) -> Built:
    """The shared library of the emulation holding entries ``names`` of ``source`` (default: sample.cu, whose
    extern "C" entries are always added), compiled by the host's C++ compiler with kernels/ on the include path."""
    cxx = host_compiler()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    if source is None:
        source, names = kernel_dir() / "sample.cu", (*names, *EXTERN_ENTRIES)
        digest = source_digest()
    else:
        source = Path(source).resolve()
        digest = hashlib.sha256(
            source.read_bytes() + (kernel_dir() / "emulate" / "cuda_host.h").read_bytes()
        ).hexdigest()
    table = _emulation_source(names, source)
    flags = (*emulation_flags(), f"-DVDB_THREADS_PER_BLOCK={THREADS_PER_BLOCK}")
    parts = {"source": digest, "table": table, "compiler": version, "flags": flags, "kind": "emulation"}

    def make() -> tuple[bytes, dict]:
        with tempfile.TemporaryDirectory(prefix="vdbflow-emulate-") as tmp:
            cpp, lib = Path(tmp) / "entries.cpp", Path(tmp) / "entries.so"
            cpp.write_text(table)
            cmd = [cxx, *flags, f"-I{kernel_dir()}", str(cpp), "-o", str(lib)]
            t0 = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise DeviceError(
                    f"expected the emulation of {source.name} to compile, {cxx} said:\n{done.stderr[-4000:]}"
                )
            return lib.read_bytes(), {"compile_seconds": time.perf_counter() - t0, "command": cmd[:-3]}

    path, meta, how, seconds = _cached_build(parts, ".so", make)
    return _note("emulation", Built(path, {n: n for n in names}, how, seconds))
