"""``vdbflow convert``: a dense NetCDF/Zarr field, an OpenVDB file or a NanoVDB file to a .nvdb volume."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click
import numpy as np

from vdbflow.core.periodic import Periodicity, resolve_periodic
from vdbflow.errors import StorageError, VdbflowError
from vdbflow.io.dense import convert as to_volume
from vdbflow.io.dense import default_name, open_dense
from vdbflow.io.location import RemoteFile, is_url
from vdbflow.io.nanovdb import format as fmt
from vdbflow.io.nanovdb import save
from vdbflow.io.nanovdb.write import write_format
from vdbflow.io.openvdb import is_openvdb
from vdbflow.io.volumes import list_grids, open_volume
from vdbflow.jobs.cli.console import say as _say
from vdbflow.jobs.cli.console import stderr as _stderr
from vdbflow.jobs.cli.info import storage_options_callback


class _ConvertCommand(click.Command):
    """``--voxel-size`` takes three values like ``--origin``, or one for cubic voxels (``--voxel-size 0.1``
    is read as ``--voxel-size 0.1 0.1 0.1``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        def numbers(values: list[str]) -> int:
            n = 0
            for text in values:
                try:
                    float(text)
                except ValueError:
                    break
                n += 1
            return n

        args, out, i = list(args), [], 0
        while i < len(args):
            if args[i] == "--":
                out += args[i:]
                break
            if args[i].startswith("--voxel-size="):
                args[i : i + 1] = ["--voxel-size", args[i].partition("=")[2]]
            if args[i] == "--voxel-size" and numbers(args[i + 1 : i + 4]) == 2:
                raise click.BadParameter(
                    f"expected 1 or 3 numbers (DX or DX DY DZ), got 2: {args[i + 1 : i + 3]}",
                    ctx,
                    param_hint="'--voxel-size'",
                )
            if args[i] == "--voxel-size" and numbers(args[i + 1 : i + 4]) == 1:
                out += ["--voxel-size", *[args[i + 1]] * 3]
                i += 2
                continue
            out.append(args[i])
            i += 1
        return super().parse_args(ctx, out)


def _local_or_url(ctx: click.Context, param: click.Parameter, source: str) -> str:
    """A local SOURCE must exist (as click.Path checks); a URL is read through fsspec."""
    return source if is_url(source) else click.Path(exists=True).convert(source, param, ctx)


@click.command(cls=_ConvertCommand)
@click.argument("source", callback=_local_or_url)
@click.argument("output", type=click.Path(dir_okay=False))
@click.option(
    "--variable",
    "variables",
    multiple=True,
    help="NetCDF/Zarr variable(s); several (u, v, w) become one vec3 grid. Default: the first 3-D one.",
)
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="Active where |value| (vector norm) > THRESHOLD. Default: where value != background.",
)
@click.option("--mask-variable", default=None, help="A NetCDF/Zarr variable: active where it is non-zero.")
@click.option("--background", type=float, default=0.0, show_default=True, help="Value of inactive voxels.")
@click.option(
    "--voxel-size",
    type=float,
    nargs=3,
    default=None,
    metavar="DX [DY DZ]",
    help="World size of a voxel along x, y, z (one value: cubic voxels). Default: the coordinates' spacing, else 1.",
)
@click.option("--origin", type=float, nargs=3, default=None, metavar="X Y Z", help="World position of voxel (0, 0, 0).")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default=None, help="Stored value type.")
@click.option(
    "--name",
    default=None,
    help="Grid name. Default: the variable's name, else 'velocity' for a vec3 grid and 'density' otherwise.",
)
@click.option(
    "--units",
    default=None,
    help="Units of the values (e.g. m/s). Default: the variables' CF 'units' attr.",
)
@click.option(
    "--length-units",
    default=None,
    help="Units of the coordinates (e.g. m). Default: the x, y, z coordinates' CF 'units' attr.",
)
@click.option("--codec", type=click.Choice(["none", "zip", "blosc"]), default="none", show_default=True)
@click.option(
    "--nvdb-version",
    default=None,
    metavar="VERSION",
    help="NanoVDB version whose layout, magic numbers and checksum rules OUTPUT follows (32.4, 32.6, 32.7, "
    "32.8, 32.9). Default: the one NanoVDB's tools since OpenVDB 10, Warp and vdbflow all open (see docs/nanovdb.md).",
)
@click.option(
    "--slab",
    type=click.IntRange(8, None),
    default=64,
    show_default=True,
    help="X-planes held dense at a time (a multiple of 8).",
)
@click.option(
    "--periodic",
    default=None,
    metavar="AXES",
    help="Periodic axes, e.g. x,y,z or xz: a dense SOURCE is one period along them (voxel X is voxel 0 again); "
    "a .vdb grid's period is its active box. Stored in OUTPUT (docs/periodic.md).",
)
@click.option(
    "--storage-options",
    default=None,
    callback=storage_options_callback,
    metavar="JSON",
    help="fsspec's options for a SOURCE URL (s3://...), a JSON object (default: the environment's credentials).",
)
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
def convert(
    source: str,
    output: str,
    variables: tuple[str, ...],
    threshold: float | None,
    mask_variable: str | None,
    background: float,
    voxel_size: tuple[float, float, float] | None,
    origin: tuple[float, float, float] | None,
    dtype: str | None,
    name: str | None,
    units: str | None,
    length_units: str | None,
    codec: str,
    nvdb_version: str | None,
    slab: int,
    periodic: str | None,
    storage_options: dict | None,
    overwrite: bool,
) -> None:
    """Convert a dense array (SOURCE: .npy, NetCDF or Zarr) to a sparse .nvdb grid (OUTPUT), one slab at a time,
    or the grids of an OpenVDB .vdb file or a NanoVDB .nvdb file (SOURCE; --variable picks grids by name) to a
    .nvdb file (another --codec or --nvdb-version: the same grids, tiles and active voxels)."""
    from rich.progress import Progress

    out = Path(output)
    if out.exists() and not overwrite:
        _say("error", f"{out} exists (pass --overwrite to replace it)")
        raise SystemExit(2)
    vdb = _remote_vdb(source, storage_options)  # a .vdb file at a URL, read whole (or None)
    if vdb is not None or is_openvdb(source) or _is_nanovdb(source):
        _convert_sparse(source, out, variables, codec, nvdb_version, periodic, data=vdb)
        return
    try:
        if nvdb_version is not None:  # an unknown version is refused before anything is read
            write_format(nvdb_version, {})
        src = open_dense(source, variables, mask_variable, units, length_units, storage_options=storage_options)
        grid_name = name or default_name(src, variables)
        console = _stderr()
        with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("converting", total=src.shape[0])
            vol = to_volume(
                src,
                threshold,
                background,
                dtype,
                voxel_size,
                origin,
                slab,
                grid_name,
                progress=lambda done, total: bar.update(task, completed=done),
                units=units,
                length_units=length_units,
            )
        if periodic is not None:  # the dense array is one period along these axes, whatever is active
            vol = vol.with_periodic(dense_periods(periodic, src.shape[:3]))
        vol.to_nvdb(str(out), codec=codec, version=nvdb_version)  # atomic: a private directory beside it, then a rename
    except VdbflowError as err:
        _say("error", str(err))
        raise SystemExit(2) from None
    dense = int(np.prod(src.shape[:3]))
    if src.others and not variables:
        stack = " ".join(f"--variable {v}" for v in (*src.variables, *src.others[: 4 - len(src.variables)]))
        _say(
            "note",
            f"converted {', '.join(src.variables)} only; {source} also holds {', '.join(src.others)} "
            f"(3-D variables; `{stack}` stacks several as the components of one grid)",
            style="yellow",
        )
    stated = f"units {vol.units or '(none)'}, length units {vol.length_units or '(none)'}"
    if vol.periodic is not None:
        stated += f"; periodic {vol.periodic.describe()}"
    click.echo(
        f"wrote {out}: grid {grid_name!r}, {vol.value_type.name}, {vol.active_voxel_count:,} active voxels "
        f"of {dense:,} ({vol.active_voxel_count / max(dense, 1):.1%}), {vol.leaf_count:,} leaves; {stated}"
    )


def dense_periods(axes: str, shape: tuple[int, ...]) -> Any:
    """The periods of a dense array of ``shape`` (X, Y, Z) that is one period along ``axes`` ("x,y,z", "xz")."""
    chosen = resolve_periodic(axes, np.array([[0, 0, 0], np.subtract(shape, 1)]))
    return chosen if chosen is not None else Periodicity((0, 0, 0), (0, 0, 0))


def _remote_vdb(source: str, storage_options: dict | None) -> bytes | None:
    """The bytes of an OpenVDB file at the URL ``source`` (a stream: read whole), None for anything else."""
    if not is_url(source):
        return None
    try:
        if source.rstrip("/").lower().endswith(".zarr"):
            return None
        remote = RemoteFile.open(source, storage_options)
        head = remote.read_ranges([(0, min(8, remote.size))]) if remote.size else []
        return remote.read() if head and is_openvdb(head[0][1]) else None
    except StorageError as err:
        if "found a directory" in str(err):  # a Zarr store without the suffix
            return None
        _say("error", str(err))
        raise SystemExit(2) from None


def _is_nanovdb(source: str) -> bool:
    """Whether ``source`` is a local file that starts as a NanoVDB file does."""
    if is_url(source) or not os.path.isfile(source):
        return False
    with open(source, "rb") as fh:
        head = fh.read(8)
    return len(head) == 8 and int.from_bytes(head, "little") in fmt.FILE_MAGICS


def _convert_sparse(
    source: str,
    out: Path,
    names: tuple[str, ...],
    codec: str,
    version: str | None,
    periodic: str | None = None,
    data: bytes | None = None,
) -> None:
    """The grids of an OpenVDB or NanoVDB file (all, or those ``names``) written to one .nvdb file: value grids
    as value grids, bool, mask and index grids as OnIndex grids; a repeated .vdb name gets its number
    (``density_1``)."""
    try:
        infos = list_grids(source if data is None else data)
        known = {g.name.split("\x1e")[0] for g in infos} | {g.name for g in infos}
        missing = [n for n in names if n not in known]
        if missing:
            raise VdbflowError(f"expected grid names of {source} ({sorted(known)}), got {missing}")
        grids = {}
        for g in infos:
            base, _, number = g.name.partition("\x1e")
            if names and base not in names and g.name not in names:
                continue
            grid = open_volume(source if data is None else data, g.index)
            grids[f"{base}_{number}" if number and number != "0" else base] = (
                grid if periodic is None else grid.with_periodic(periodic)
            )
        save(out, grids, codec=codec, version=version)  # atomic: a private directory beside it, then a rename
    except VdbflowError as err:
        _say("error", str(err))
        raise SystemExit(2) from None
    for name, vol in grids.items():
        values = vol.value_type.name if hasattr(vol, "value_type") else "index (no values)"
        click.echo(
            f"wrote {out}: grid {name!r}, {values}, {vol.active_voxel_count:,} active voxels, {vol.leaf_count:,} "
            f"leaves, {vol.topology.tiles_described if hasattr(vol, 'topology') else vol.tiles_described}; "
            f"units {getattr(vol, 'units', None) or '(none)'}, length units {vol.length_units or '(none)'}"
            + (f"; periodic {vol.periodic.describe()}" if vol.periodic is not None else "")
        )
