"""The ``vdbflow`` command line."""

from __future__ import annotations

import time

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from . import __version__, synthetic


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vdbflow")
def main() -> None:
    """Sample values and Jacobians from sparse NanoVDB-style volumes."""


@main.command()
@click.option("--field", type=click.Choice(["taylor_green", "abc"]), default="taylor_green", show_default=True,
              help="Synthetic flow field.")
@click.option("--resolution", type=click.IntRange(8, 1024), default=64, show_default=True,
              help="Voxels per edge of the bounding cube.")
@click.option("--points", "n_points", type=click.IntRange(1, 10**9), default=100_000, show_default=True,
              help="Random points to sample.")
@click.option("--show", type=click.IntRange(0, 100), default=5, show_default=True, help="Rows in the table.")
@click.option("--seed", type=int, default=0, show_default=True)
def demo(field: str, resolution: int, n_points: int, show: int, seed: int) -> None:
    """Build a sparse synthetic vec3 flow field, sample values and Jacobians, print a table."""
    console = Console()
    flow = synthetic.taylor_green() if field == "taylor_green" else synthetic.abc_flow()
    t0 = time.perf_counter()
    vol = synthetic.flow_volume(flow, resolution=resolution)
    t_build = time.perf_counter() - t0
    console.print(f"[bold]vdbflow {__version__}[/bold] demo: {vol!r} (built in {t_build:.2f} s)")

    # Points at random inside the shell's active voxels, in world space.
    rng = np.random.default_rng(seed)
    active = vol.active_voxels()
    ijk = active[rng.integers(0, len(active), n_points)] + rng.uniform(-0.5, 0.5, (n_points, 3))
    world = vol.transform.apply(ijk)
    vol.sample_grad(world[:1])  # first call: thread pool and xarray start-up, not sampling
    t0 = time.perf_counter()
    ds = vol.sample_grad(world, mode="linear", space="world")
    t_sample = time.perf_counter() - t0

    table = Table(title=f"{field}: velocity and velocity gradient at {min(show, n_points)} of {n_points} points")
    for col in ("point (x, y, z)", "velocity (u, v, w)", "jacobian d(u,v,w)/d(x,y,z)", "analytic"):
        table.add_column(col)
    fmt = lambda a: np.array2string(np.asarray(a), precision=3, suppress_small=True, floatmode="fixed")  # noqa: E731
    exact = flow.jacobian(world[:show])
    for n in range(min(show, n_points)):
        table.add_row(fmt(world[n]), fmt(ds["velocity"].values[n]), fmt(ds["velocity_jacobian"].values[n]),
                      fmt(exact[n]))
    console.print(table)
    # Interior points (whole stencil active) measure the discretisation error against the analytic field.
    err = np.abs(ds["velocity_jacobian"].values - flow.jacobian(world)).max(axis=(1, 2))
    console.print(
        f"{n_points} points in {t_sample * 1e3:.1f} ms ({n_points / t_sample / 1e6:.2f} M samples/s); "
        f"median |J - J_exact|max = {np.median(err):.3g} (trilinear, h = {vol.voxel_size[0]:.3g})"
    )


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
def info(path: str) -> None:
    """List the grids of a NanoVDB (.nvdb) file."""
    from .errors import NanoVDBError
    from .nanovdb import list_grids

    console = Console()
    try:
        grids = list_grids(path)
    except NanoVDBError as err:
        console.print(f"[red]error:[/red] {err}")
        raise SystemExit(2) from None
    table = Table(title=f"{path}: {len(grids)} grid(s)")
    for col in ("#", "name", "type", "class", "leaves", "tiles (8³/128³/4096³)", "active voxels",
                "index bbox", "voxel size", "codec", "version"):
        table.add_column(col)
    for g in grids:
        table.add_row(str(g.index), g.name or "-", g.grid_type, g.grid_class, f"{g.leaf_count:,}",
                      "/".join(str(c) for c in g.tile_counts), f"{g.active_voxel_count:,}",
                      f"{list(g.index_bbox[0])} .. {list(g.index_bbox[1])}",
                      " ".join(f"{v:.4g}" for v in g.voxel_size), g.codec, g.version)
    console.print(table)


if __name__ == "__main__":  # pragma: no cover
    main()
