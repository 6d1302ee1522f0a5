"""NVRTC, the CUDA run-time compiler, called directly through ctypes: no GPU and no CuPy needed.

vdbflow compiles ``kernels/sample.cu`` with this binding (:mod:`vdbflow.devices.cuda_build`) and loads the
machine code it returns with CuPy, so the compile that CI runs on a machine without a GPU is the one a GPU
worker runs.  ``libnvrtc`` is found in the ``nvidia-cuda-nvrtc-cu12`` (CUDA 12) or ``nvidia-cuda-nvrtc``
(CUDA 13) wheel, then under ``$CUDA_PATH`` / ``$CUDA_HOME``, then on the loader's path; ``VDBFLOW_NVRTC``
names a library file explicitly.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from vdbflow.errors import DeviceError

_c_char_pp = ctypes.POINTER(ctypes.c_char_p)


class NvrtcError(DeviceError):
    """NVRTC refused a program (the message holds its log) or could not be loaded."""


@dataclass(frozen=True)
class Compiled:
    """One NVRTC compile: ``image`` (cubin, or PTX text when ``kind == "ptx"``), the lowered (mangled) name
    of each name expression, the compiler's log and its version."""

    image: bytes
    kind: str  # "cubin" or "ptx"
    lowered: dict[str, str]
    log: str
    version: tuple[int, int]


def _wheel_libraries(major: int | None) -> list[Path]:
    """libnvrtc files of the NVIDIA wheels installed here (CUDA 12: nvidia/cuda_nvrtc, 13: nvidia/cu13)."""
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    found = []
    for sub, lib_major in (("cu13", 13), ("cuda_nvrtc", 12)):
        if major is not None and lib_major != major:
            continue
        found += [lib for root in roots if (lib := Path(root) / sub / "lib" / f"libnvrtc.so.{lib_major}").is_file()]
    return found


def library_candidates(major: int | None = None) -> list[str]:
    """Where libnvrtc is looked for, in order (``major``: only that CUDA major version's)."""
    explicit = os.environ.get("VDBFLOW_NVRTC")
    if explicit:
        return [explicit]
    out = [str(p) for p in _wheel_libraries(major)]
    for var in ("CUDA_PATH", "CUDA_HOME"):
        root = os.environ.get(var)
        if root:
            for lib in sorted(Path(root).glob("lib64/libnvrtc.so.*")):
                if major is None or lib.name == f"libnvrtc.so.{major}":
                    out.append(str(lib))
    system = ctypes.util.find_library("nvrtc")
    if system and major is None:
        out.append(system)
    return out


@functools.cache
def load(path: str | None = None) -> Nvrtc:
    """The NVRTC at ``path``, or the first one found (:func:`library_candidates`)."""
    paths = [path] if path else library_candidates()
    errors = []
    for candidate in paths:
        try:
            return Nvrtc(ctypes.CDLL(candidate))
        except OSError as err:
            errors.append(f"{candidate}: {err}")
    raise NvrtcError(
        "expected libnvrtc (pip install nvidia-cuda-nvrtc-cu12, or a CUDA toolkit under $CUDA_PATH), "
        f"found {'; '.join(errors) or 'none'}"
    )


def load_for(cuda_major: int | None) -> Nvrtc:
    """The NVRTC of CUDA ``cuda_major`` (CuPy's runtime: its machine code loads on that driver), else any."""
    if cuda_major is not None and not os.environ.get("VDBFLOW_NVRTC"):
        for candidate in library_candidates(cuda_major):
            try:
                return load(candidate)
            except NvrtcError:
                continue
    return load()


class Nvrtc:
    """One loaded libnvrtc."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        self.path = getattr(lib, "_name", "?")
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        self.version = (major.value, minor.value)

    def _check(self, status: int, what: str, log: str = "") -> None:
        if status != 0:
            message = self.lib.nvrtcGetErrorString(status).decode()
            raise NvrtcError(f"{what} failed: {message}" + (f"\n{log}" if log else ""))

    def supported_archs(self) -> tuple[int, ...]:
        """The ``sm_XX`` numbers this NVRTC compiles machine code (cubin) for."""
        count = ctypes.c_int()
        self._check(self.lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)), "nvrtcGetNumSupportedArchs")
        archs = (ctypes.c_int * count.value)()
        self._check(self.lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
        return tuple(archs)

    def compile(
        self, source: str, name: str, options: tuple[str, ...], name_expressions: tuple[str, ...], kind: str = "cubin"
    ) -> Compiled:
        """Compiles ``source`` with ``options`` (which choose the architecture), returning the cubin
        (``kind="cubin"``, options with ``-arch=sm_XX``) or PTX and the lowered name of each expression."""
        lib = self.lib
        prog = ctypes.c_void_p()
        self._check(
            lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            for expr in name_expressions:
                self._check(lib.nvrtcAddNameExpression(prog, expr.encode()), f"nvrtcAddNameExpression({expr})")
            opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
            status = lib.nvrtcCompileProgram(prog, len(options), opts)
            log = self._log(prog)
            self._check(status, f"NVRTC {self.version[0]}.{self.version[1]} compiling {name}", log)
            lowered = {}
            for expr in name_expressions:
                out = ctypes.c_char_p()
                self._check(lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out)), "nvrtcGetLoweredName")
                lowered[expr] = out.value.decode()
            get_size, get = (
                ("nvrtcGetCUBINSize", "nvrtcGetCUBIN") if kind == "cubin" else ("nvrtcGetPTXSize", "nvrtcGetPTX")
            )
            size = ctypes.c_size_t()
            self._check(getattr(lib, get_size)(prog, ctypes.byref(size)), get_size)
            buf = ctypes.create_string_buffer(size.value)
            self._check(getattr(lib, get)(prog, buf), get)
            image = buf.raw[: size.value]
            if kind == "ptx":
                image = image.rstrip(b"\0")
            return Compiled(image, kind, lowered, log, self.version)
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _log(self, prog: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        if self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != 0 or size.value <= 1:
            return ""
        buf = ctypes.create_string_buffer(size.value)
        self.lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace")
