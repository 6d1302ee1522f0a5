"""The ``vdbflow`` command line."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from . import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vdbflow")
def main() -> None:
    """Sample values and Jacobians from sparse NanoVDB-style volumes."""


def _logging(verbose: int, console: Console) -> None:
    import distributed  # noqa: F401 - sets its loggers up on import; ours come after
    from rich.logging import RichHandler

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = RichHandler(console=console, show_path=False, rich_tracebacks=verbose > 1)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], format="%(message)s", force=True)
    logging.getLogger("vdbflow").setLevel(level)
    for name in ("distributed", "dask_jobqueue", "dask_cuda"):
        logging.getLogger(name).setLevel(logging.INFO if verbose > 1 else logging.ERROR)


def _print_plan(plan, console: Console) -> None:
    from .job import REFERENCE_POINTS_PER_S, human_bytes, human_seconds

    cfg = plan.config
    table = Table(title="vdbflow run: plan (nothing has run)", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for g in plan.grids:
        voxels = f"{g.active_voxels:,} active voxels" + (f", {g.leaves:,} leaves" if g.leaves >= 0 else " (about)")
        table.add_row(f"grid {g.name!r}", f"{g.value_type}, {voxels}; {g.source}")
    count = f"{plan.point_count:,}" if plan.point_count is not None else "counted when read"
    chunks = f" in {plan.point_chunks} chunk(s)" if plan.point_chunks else ""
    table.add_row("points", f"{count} ({cfg.points.kind}, {cfg.points.space} space){chunks}")
    table.add_row("sampling", f"mode {cfg.sampling.mode} (halo {plan.halo} voxel(s)), outputs "
                              f"{', '.join(cfg.sampling.outputs)}, device {cfg.sampling.device}")
    if plan.output_bytes is not None:
        table.add_row("size", f"about {human_bytes(plan.output_bytes)} of results before compression "
                              f"({plan.bytes_per_point} bytes a point); about {human_seconds(plan.seconds)} of "
                              f"sampling + writing at {REFERENCE_POINTS_PER_S / 1e6:g} M points/s (the demo's "
                              "rate on one workstation; yours depends on the workers)")
    table.add_row("limits", f"{cfg.limits.max_points:,} points, {cfg.limits.max_output_bytes} of results "
                            "(limits.max_points, limits.max_output_bytes; --force runs larger jobs)")
    table.add_row("partitions", plan.partitions)
    table.add_row("cluster", plan.cluster)
    table.add_row("output", f"{cfg.output.path} ({cfg.output.resolved_format}, overwrite {cfg.output.overwrite})")
    for note in plan.notes:
        table.add_row("note", note)
    console.print(table)
    if plan.job_script:
        console.print("[bold]SLURM job script[/bold] (one per job; the scheduler address is filled in at run time):")
        console.print(plan.job_script, markup=False, highlight=False)


def _print_summary(result, console: Console) -> None:
    from .job import ANALYTIC_CHECK_PER_CHUNK

    table = Table(title="vdbflow run: summary", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="left")
    t = result.timings
    table.add_row("points", f"{result.points:,}")
    table.add_row("grids", ", ".join(result.grids))
    table.add_row("partitions / workers", f"{result.partitions} / {result.workers}")
    table.add_row("throughput", f"{result.throughput / 1e6:.2f} M points/s (sampling + writing)")
    table.add_row("time", f"{t['total_s']:.1f} s total: cluster {t['cluster_s']:.1f} s, distribute "
                          f"{t['distribute_s']:.1f} s, sample + write {t['sample_and_write_s']:.1f} s")
    if result.worker_seconds:
        steps = ", ".join(f"{k} {v:.2f}" for k, v in result.worker_seconds.items() if v > 0.0005)
        table.add_row("worker time (s)", f"{steps} (compute on {result.workers} worker(s), by Dask's task stream)")
    if result.analytic_error is not None:
        table.add_row("max |J - J_exact|", f"{result.analytic_error:.3g} over {result.analytic_points:,} interior "
                                           "points checked (analytic Jacobian of the synthetic field; up to "
                                           f"{ANALYTIC_CHECK_PER_CHUNK:,} points a chunk)")
    table.add_row("output", str(result.output))
    console.print(table)


def _run(config_path: str, overrides: tuple[str, ...], dry_run: bool, verbose: int, force: bool = False) -> None:
    from .config import ConfigError, load_config
    from .errors import VdbflowError
    from .job import plan_job, run_job

    console = Console()
    _logging(verbose, console)
    try:
        cfg = load_config(config_path, overrides)
        if dry_run:
            _print_plan(plan_job(cfg, force), console)
            return
        result = run_job(cfg, console, force=force)
    except ConfigError as err:
        console.print(f"[red]config error:[/red] {err}", markup=True, highlight=False)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        console.print("[red]interrupted[/red]: no result was published")
        raise SystemExit(130) from None
    except VdbflowError as err:
        console.print(f"[red]error:[/red] {err}", highlight=False)
        raise SystemExit(1) from None
    except Exception as err:  # a worker's or a library's failure: say what, keep the trace for -vv
        logging.getLogger("vdbflow").debug("the job failed", exc_info=True)
        console.print(f"[red]the job failed:[/red] {type(err).__name__}: {err}; no result was published"
                      + ("" if verbose > 1 else " (-vv shows the traceback)"), highlight=False)
        raise SystemExit(1) from None
    _print_summary(result, console)


_SET_HELP = "Override a config key, e.g. --set points.count=1000000 (the value is read as YAML). Repeatable."


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
@click.option("--dry-run", is_flag=True,
              help="Validate the config, print the plan (and the SLURM job script); run nothing.")
@click.option("--force", is_flag=True, help="Run a job larger than the config's limits (limits.max_points, "
              "limits.max_output_bytes).")
@click.option("-v", "--verbose", count=True, help="Log progress (-vv: also Dask's own logs).")
def run(config: str, overrides: tuple[str, ...], dry_run: bool, force: bool, verbose: int) -> None:
    """Run the batch job described by CONFIG (YAML): sample a volume at points on a Dask cluster and
    write the result (Zarr or NetCDF).  Exit code 2: the config or its inputs are wrong; nothing ran."""
    _run(config, overrides, dry_run, verbose, force)


@main.command()
@click.argument("target", required=False, default=".", type=click.Path())
@click.option("--dry-run", is_flag=True, help="Say what would be done; touch nothing.")
@click.option("--force", is_flag=True, help="Also remove leftovers whose writer cannot be checked (another host, "
              "or written before vdbflow recorded writers).")
def clean(target: str, dry_run: bool, force: bool) -> None:
    """Remove what killed runs left next to an output: partial results (.NAME.partial-*) and input
    snapshots (.NAME.input-*) whose writer has exited, and put back an earlier result a kill set aside
    mid-swap (.NAME.replaced-*).  Files of a running job are kept.

    TARGET is a job config (.yaml: its output.path), an output path, or a directory holding outputs
    (default: the current directory).  Exit code 2: TARGET cannot be read."""
    from .config import ConfigError, load_config
    from .output import not_a_result, tidy

    console = Console()
    path = Path(target)
    try:
        if path.suffix.lower() in (".yaml", ".yml") and path.is_file():
            lines = tidy(load_config(path).output.path.absolute(), force=force, dry_run=dry_run)
        elif path.is_dir() and not path.is_symlink() and not_a_result(path) is not None:
            lines = tidy(directory=path.absolute(), force=force, dry_run=dry_run)
        else:
            lines = tidy(path.absolute(), force=force, dry_run=dry_run)
    except ConfigError as err:
        console.print(f"[red]config error:[/red] {err}", highlight=False)
        raise SystemExit(2) from None
    for line in lines:
        console.print(line, highlight=False, markup=False)
    if not lines:
        console.print(f"nothing to clean at {target}", highlight=False)


def demo_config() -> Path:
    """configs/demo.yaml: installed next to the package, or in the source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs" / "demo.yaml", here.parent / "configs" / "demo.yaml"):
        if candidate.is_file():
            return candidate
    raise click.ClickException("configs/demo.yaml is not installed with this copy of vdbflow")


@main.command()
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
@click.option("--dry-run", is_flag=True, help="Print the plan only.")
@click.option("-v", "--verbose", count=True, help="Log progress.")
def demo(overrides: tuple[str, ...], dry_run: bool, verbose: int) -> None:
    """Write a synthetic Taylor-Green vortex to .nvdb and run configs/demo.yaml on it (an embedded
    LocalCluster; results in ./vdbflow-demo/)."""
    path = demo_config()
    Console().print(f"[bold]vdbflow {__version__}[/bold] demo: running {path}")
    _run(str(path), overrides, dry_run, verbose)


@main.command()
@click.argument("source", type=click.Path(exists=True))
@click.argument("output", type=click.Path(dir_okay=False))
@click.option("--variable", "variables", multiple=True,
              help="NetCDF/Zarr variable(s); several (u, v, w) become one vec3 grid. Default: the first 3-D one.")
@click.option("--threshold", type=float, default=None,
              help="Active where |value| (vector norm) > THRESHOLD. Default: where value != background.")
@click.option("--mask-variable", default=None, help="A NetCDF/Zarr variable: active where it is non-zero.")
@click.option("--background", type=float, default=0.0, show_default=True, help="Value of inactive voxels.")
@click.option("--voxel-size", type=float, multiple=True, help="World size of a voxel (1 or 3 values). "
              "Default: the coordinates' spacing, else 1.")
@click.option("--origin", type=float, nargs=3, default=None, help="World position of voxel (0, 0, 0).")
@click.option("--dtype", type=click.Choice(["float32", "float64"]), default=None, help="Stored value type.")
@click.option("--name", default=None, help="Grid name. Default: the variable name, or 'density'.")
@click.option("--codec", type=click.Choice(["none", "zip", "blosc"]), default="none", show_default=True)
@click.option("--slab", type=click.IntRange(8, None), default=64, show_default=True,
              help="X-planes held dense at a time (a multiple of 8).")
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
def convert(source: str, output: str, variables: tuple[str, ...], threshold: float | None,
            mask_variable: str | None, background: float, voxel_size: tuple[float, ...],
            origin: tuple[float, float, float] | None, dtype: str | None, name: str | None, codec: str, slab: int,
            overwrite: bool) -> None:
    """Convert a dense array (SOURCE: .npy, NetCDF or Zarr) to a sparse .nvdb grid (OUTPUT), one slab at a time."""
    from rich.progress import Progress

    from .convert import convert as to_volume
    from .convert import open_dense
    from .errors import VdbflowError
    from .output import partial_path

    console = Console()
    out = Path(output)
    if out.exists() and not overwrite:
        console.print(f"[red]error:[/red] {out} exists (pass --overwrite to replace it)")
        raise SystemExit(2)
    try:
        src = open_dense(source, variables, mask_variable)
        grid_name = name or (variables[0] if len(variables) == 1 else "velocity" if len(variables) == 3 else
                             "density")
        with Progress(console=console, transient=True, disable=not console.is_terminal) as bar:
            task = bar.add_task("converting", total=src.shape[0])
            vol = to_volume(src, threshold, background, dtype, voxel_size or None, origin, slab, grid_name,
                            progress=lambda done, total: bar.update(task, completed=done))
        tmp = partial_path(out.absolute())
        try:
            vol.to_nvdb(str(tmp), codec=codec)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    except VdbflowError as err:
        console.print(f"[red]error:[/red] {err}", highlight=False)
        raise SystemExit(2) from None
    dense = int(np.prod(src.shape[:3]))
    console.print(f"wrote {out}: grid {grid_name!r}, {vol.value_type.name}, {vol.active_voxel_count:,} active voxels "
                  f"of {dense:,} ({vol.active_voxel_count / max(dense, 1):.1%}), {vol.leaf_count:,} leaves")


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
