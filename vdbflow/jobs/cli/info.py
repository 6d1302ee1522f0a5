"""``vdbflow info``: the grids of NanoVDB (.nvdb) and OpenVDB (.vdb) files, as tables or JSON."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from vdbflow.core import schema
from vdbflow.errors import NanoVDBError, OpenVDBError, StorageError
from vdbflow.io.location import is_url
from vdbflow.io.volumes import list_grids_read
from vdbflow.jobs.cli.console import rows_table as _rows_table
from vdbflow.jobs.cli.console import say as _say
from vdbflow.jobs.cli.console import stdout as _stdout


def _format_version(version: str) -> str:
    """'NanoVDB 32.6.0' for .nvdb grids; .vdb grids' version already names OpenVDB."""
    return version if version.startswith("OpenVDB") else f"NanoVDB {version}"


def _box_text(box: Any) -> str:
    if box is None:
        return "(empty)"
    return f"{[float(f'{v:.6g}') for v in box[0]]} .. {[float(f'{v:.6g}') for v in box[1]]}"


def _grid_rows(g: Any) -> list[tuple[str, str]]:
    """One grid of ``vdbflow info``, as (key, value) rows; its box is the data's, that of the voxel centres
    (docs/design.md, "Boxes"), in index and world space."""
    i0, i1 = g.index_bbox
    centres = " (voxel centres)" if g.centre_bbox is not None else ""  # the box of the data: docs/design.md
    variable = schema.value_name(g.name)
    renamed = [("values", f"sampled as {variable!r} ({g.name!r} is a name results give their own coordinates)")]
    return [
        (f"grid {g.index}", repr(g.name) if g.name else "(unnamed)"),
        *(renamed if variable != g.name else []),
        ("type", f"{g.grid_type}, class {g.grid_class}"),
        ("active voxels", f"{g.active_voxel_count:,}"),
        ("nodes", f"{g.leaf_count:,} leaves, {g.lower_count:,} lower, {g.upper_count:,} upper"),
        ("active tiles", "/".join(f"{c:,}" for c in g.tile_counts) + " (lower/upper/root: 8³/128³/4096³ voxels)"),
        ("data box (index)", f"{list(i0)} .. {list(i1)}{centres}" if centres else "(empty)"),
        ("data box (world)", _box_text(g.centre_bbox) + centres),
        ("voxel size", " ".join(f"{v:.6g}" for v in g.voxel_size) + (f" {g.length_units}" if g.length_units else "")),
        ("units", g.units or "(none stored)"),
        *([("components", ", ".join(g.component_names))] if g.component_names else []),
        ("periodic", g.periodic.describe() if getattr(g, "periodic", None) is not None else "no"),
        ("stored", f"{g.grid_size:,} bytes uncompressed, codec {g.codec}, {_format_version(g.version)}"),
    ]


def _json_value(value: Any) -> Any:
    """GridInfo fields as JSON: arrays and tuples as lists, bytes as hex."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "__dataclass_fields__"):
        return _json_value({k: getattr(value, k) for k in value.__dataclass_fields__})
    return str(value)


def _local_file(ctx: click.Context, param: click.Parameter, paths: tuple[str, ...]) -> tuple[str, ...]:
    """Local paths must be files that exist (as click.Path checks); URLs are read through fsspec."""
    check = click.Path(exists=True, dir_okay=False)
    return tuple(p if is_url(p) else check.convert(p, param, ctx) for p in paths)


def storage_options_callback(ctx: click.Context, param: click.Parameter, text: str | None) -> dict | None:
    """``--storage-options`` as a dict (JSON text)."""
    if text is None:
        return None
    try:
        options = json.loads(text)
    except ValueError as err:
        raise click.BadParameter(f"expected a JSON object, got {text[:80]!r} ({err})") from None
    if not isinstance(options, dict):
        raise click.BadParameter(f"expected a JSON object, got a JSON {type(options).__name__}")
    return options


@click.command()
@click.argument("paths", nargs=-1, required=True, callback=_local_file)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (a list: path and grids of each file, or its error) instead of tables.",
)
@click.option(
    "--storage-options",
    default=None,
    callback=storage_options_callback,
    metavar="JSON",
    help="fsspec's options for URL paths, e.g. '{\"anon\": true}' (default: the environment's credentials).",
)
def info(paths: tuple[str, ...], as_json: bool, storage_options: dict | None) -> None:
    """List the grids of NanoVDB (.nvdb) and OpenVDB (.vdb) files, local or at URLs (s3://..., read by byte
    ranges: the bytes read are shown).  Exit code 2: a file could not be read (the others are still listed)."""
    console, failed, listing = _stdout(), False, []
    for path in paths:
        try:
            grids, stats = list_grids_read(path, storage_options if is_url(path) else None)
        except (NanoVDBError, OpenVDBError, StorageError) as err:
            failed = True
            if as_json:
                listing.append({"path": path, "error": str(err)})
            else:
                _say("error", str(err) if path in str(err) else f"{path}: {err}")
            continue
        if as_json:
            listing.append(
                {
                    "path": path,
                    **({"read": {"bytes": stats.bytes_read, "file_bytes": stats.file_size}} if stats else {}),
                    "grids": [
                        {
                            **_json_value(g),
                            "data_box": _json_value(g.centre_bbox),
                            "variable": schema.value_name(g.name),
                        }
                        for g in grids
                    ],
                }
            )
            continue
        rows, sections = [], []
        for g in grids:
            sections.append(len(rows))
            rows += _grid_rows(g)
        size = "" if stats or is_url(path) else f", {os.path.getsize(path):,} bytes"
        click.echo(f"{path}: {len(grids)} grid(s){size}" + (f", read {stats}" if stats else ""))  # not wrapped
        console.print(_rows_table(None, rows, tuple(sections[1:])))
    if as_json:
        click.echo(json.dumps(listing, indent=2))
    if failed:
        raise SystemExit(2)
