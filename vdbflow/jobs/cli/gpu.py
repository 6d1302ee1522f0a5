"""``vdbflow build-cuda``: the CUDA entries compiled ahead of time into the build cache (a cluster image, a
shared cache folder), with the resources ptxas reports for each (vdbflow.devices.cuda_build)."""

from __future__ import annotations

import json
import os
import time

import click

from vdbflow.devices import cuda, cuda_build, cuda_occupancy, nvrtc
from vdbflow.errors import DeviceError


def _cupy_cuda_major() -> int | None:
    """CuPy's CUDA major version (12, 13), or None without CuPy: the NVRTC a worker compiles with."""
    try:
        import cupy

        return int(cupy.cuda.runtime.runtimeGetVersion()) // 1000
    except Exception:  # no CuPy: the first NVRTC found (VDBFLOW_NVRTC, the wheels, the toolkit)
        return None


def _visible_archs() -> list[int]:
    """Compute capabilities of the GPUs CuPy sees here (none without CuPy or a GPU)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
        return sorted({int(cupy.cuda.Device(d).compute_capability) for d in range(count)})
    except Exception:  # no CuPy, no driver: the caller names the architecture
        return []


@click.command("build-cuda")
@click.option(
    "--arch",
    "archs",
    multiple=True,
    metavar="sm_XX",
    help="Architecture to build for (repeatable; sm_80 A100, sm_90 H100/H200, sm_100 B200). Default: the GPUs "
    "visible here. Each entry's registers, stack, spills and blocks a multiprocessor (256 threads) are reported.",
)
@click.option("--nvrtc", "nvrtc_path", default=None, help="libnvrtc to compile with (default: CuPy's CUDA major's).")
@click.option(
    "--cache", "cache", default=None, type=click.Path(file_okay=False), help="Cache folder (VDBFLOW_CUDA_CACHE)."
)
@click.option("-j", "--jobs", default=None, type=int, help="Programs compiled at once (default: one a core).")
@click.option("--json", "as_json", is_flag=True, help="Print the entries as JSON.")
@click.option(
    "--entry",
    "entries",
    multiple=True,
    metavar="NAME",
    help="Build only this entry (repeatable; a name expression such as 'vdbflow::sample_kernel<float, 3>').",
)
def build_cuda(
    archs: tuple[str, ...],
    nvrtc_path: str | None,
    cache: str | None,
    jobs: int | None,
    as_json: bool,
    entries: tuple[str, ...],
) -> None:
    """Compile every CUDA entry into the build cache, so that GPU workers start in under a second."""
    from rich.console import Console
    from rich.table import Table

    THREADS = cuda_build.THREADS_PER_BLOCK  # noqa: N806 - the launches' block size

    def _blocks(r: cuda_build.Resources | None, arch: str) -> int | None:
        """Blocks an SM at the launches' block size (None: PTX, or an architecture without a known table)."""
        if r is None or cuda_occupancy.arch_number(arch) not in cuda_occupancy.LIMITS:
            return None
        return cuda_occupancy.blocks_per_sm(r, arch, THREADS)

    if cache:
        os.environ["VDBFLOW_CUDA_CACHE"] = cache
    try:
        # the NVRTC a worker would take (CuPy's CUDA major), so that the workers find these builds
        compiler = nvrtc.load(nvrtc_path) if nvrtc_path else nvrtc.load_for(_cupy_cuda_major())
        targets = list(archs) or [cuda_build.choose_arch(cc, compiler) for cc in _visible_archs()]
        if not targets:
            raise DeviceError("expected --arch (e.g. --arch sm_90): no GPU is visible here to take it from")
        for arch in targets:
            if not arch.startswith(("sm_", "compute_")) or not arch.split("_", 1)[1].isdigit():
                raise DeviceError(f"expected an architecture like sm_90 or compute_90, got {arch!r}")
        names = (*cuda.name_expressions(), *cuda_build.EXTERN_ENTRIES)
        unknown = sorted(set(entries) - set(names))
        if unknown:
            raise DeviceError(f"expected entries among `vdbflow build-cuda --json`'s, got {unknown}")
        names = tuple(n for n in names if n in entries) if entries else names
        report = []
        for arch in targets:
            start = time.perf_counter()
            built = cuda_build.build_all(names, arch, compiler, workers=jobs)
            seconds = time.perf_counter() - start
            for name, b in sorted(built.items()):
                meta = json.loads(b.path.with_suffix(".json").read_text())
                r = cuda_build.resources(meta.get("log", "")).get(b.lowered[name])
                blocks = _blocks(r, arch)
                report.append(
                    {
                        "arch": arch,
                        "entry": name,
                        "how": b.source,
                        "compile_seconds": round(float(meta.get("compile_seconds", 0.0)), 2),
                        "registers": r.registers if r else None,
                        "stack_bytes": r.stack if r else None,
                        "spill_bytes": (r.spill_stores + r.spill_loads) if r else None,
                        "shared_bytes": r.shared if r else None,
                        "blocks_per_sm": blocks,
                        "occupancy": None if blocks is None else round(cuda_occupancy.occupancy(r, arch, THREADS), 4),
                    }
                )
            report.append({"arch": arch, "entry": None, "seconds": round(seconds, 2)})
    except DeviceError as err:
        click.echo(f"error: {err}", err=True)
        raise SystemExit(2) from None
    if as_json:
        click.echo(
            json.dumps({"nvrtc": list(compiler.version), "cache": str(cuda_build.cache_dir()), "entries": report})
        )
        return
    table = Table(
        title=f"CUDA entries (NVRTC {compiler.version[0]}.{compiler.version[1]}, cache {cuda_build.cache_dir()})"
    )
    for column in ("arch", "entry", "build", "compile s", "registers", "stack B", "spill B", "blocks/SM"):
        table.add_column(column, justify="left" if column in ("arch", "entry", "build") else "right")
    for row in report:
        if row["entry"] is None:
            continue
        table.add_row(
            row["arch"],
            row["entry"],
            row["how"],
            f"{row['compile_seconds']:.1f}",
            *(
                str(row[k]) if row[k] is not None else "-"
                for k in ("registers", "stack_bytes", "spill_bytes", "blocks_per_sm")
            ),
        )
    Console(width=120).print(table)
    for row in report:
        if row["entry"] is None:
            click.echo(f"{row['arch']}: {len(names)} entries ready in {row['seconds']:.1f} s")
