"""The ``vdbflow`` command line.

Results (plans, summaries, tables) go to stdout; errors, warnings and ``-v`` logs go to stderr,
one unwrapped line each, so they survive pipes and log files.  Messages are printed as plain
text, never as rich markup (``pip install "vdbflow[tables]"`` keeps its brackets).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from vdbflow.jobs.gpu_cli import build_cuda

if TYPE_CHECKING:
    from rich.console import Console


def _version() -> str:
    from vdbflow.version import __version__

    return __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vdbflow", prog_name="vdbflow")
def main() -> None:
    """Sample values and Jacobians from sparse NanoVDB-style volumes."""


def _stdout() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def _stderr() -> Console:
    """Messages to stderr: plain text, not wrapped (a long path stays one line in a log)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False)


def _say(kind: str, message: str, style: str = "red") -> None:
    """``kind: message`` on stderr; the message is text, never markup."""
    from rich.text import Text

    _stderr().print(Text.assemble((f"{kind}:", style), " ", message))


def _logging(verbose: int) -> None:
    """Log to stderr, one unwrapped line per record: vdbflow's at -v (INFO) and -vv (DEBUG, and Dask's)."""
    import distributed  # noqa: F401 - sets its loggers up on import; ours come after

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("vdbflow").setLevel(level)
    for name in ("distributed", "dask_jobqueue", "dask_cuda"):
        logging.getLogger(name).setLevel(logging.INFO if verbose > 1 else logging.ERROR)


def _rows_table(title: str | None, rows: list[tuple[str, str]], sections: tuple[int, ...] = ()) -> Any:
    """A two-column table (key, value) whose values are text (not markup), wrapped to the terminal."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for n, (key, value) in enumerate(rows):
        if n in sections:
            table.add_section()
        table.add_row(Text(key), Text(value))
    return table


def _print_plan(plan: Any, console: Console) -> None:
    from vdbflow.jobs.plan import REFERENCE_POINTS_PER_S, human_bytes, human_seconds

    cfg = plan.config
    rows = []
    for g in plan.grids:
        if g.active_voxels < 0:
            rows.append((f"grid {g.name!r}", g.source))
            continue
        voxels = f"{g.active_voxels:,} active voxels" + (f", {g.leaves:,} leaves" if g.leaves >= 0 else " (about)")
        rows.append((f"grid {g.name!r}", f"{g.grid_type}, {voxels}; {g.source}"))
    count = f"{plan.point_count:,}" if plan.point_count is not None else "counted when read"
    chunks = f" in {plan.point_chunks} chunk(s)" if plan.point_chunks else ""
    rows.append(("points", f"{count} ({cfg.points.kind}, {cfg.points.space} space){chunks}"))
    if cfg.advect is None:
        rows.append(
            (
                "sampling",
                f"mode {cfg.sampling.mode} (halo {plan.halo} voxel(s)), outputs "
                f"{', '.join(cfg.sampling.outputs)}, device {cfg.sampling.device}",
            )
        )
    else:
        a = cfg.advect
        rows.append(
            (
                "advection",
                f"the points are seeds: {a.method}, mode {cfg.sampling.mode}, t {a.t0!r} -> {a.t1!r}, dt {a.dt!r}"
                + (f", time interpolation {a.time}" if cfg.volume.series is not None else "")
                + f", positions every {a.save_every} step(s); outputs position, status, end_time"
                + "".join(f", {o}" for o in a.outputs)
                + f"; one task a chunk of seeds, device {cfg.sampling.device}",
            )
        )
    if plan.output_bytes is not None and cfg.advect is not None:
        rows.append(
            (
                "size",
                f"about {human_bytes(plan.output_bytes)} of results before compression "
                f"({plan.bytes_per_point} bytes a particle)",
            )
        )
    elif plan.output_bytes is not None:
        rows.append(
            (
                "size",
                f"about {human_bytes(plan.output_bytes)} of results before compression "
                f"({plan.bytes_per_point} bytes a point); {'about ' if plan.seconds >= 1 else ''}"
                f"{human_seconds(plan.seconds)} of "
                f"sampling + writing at {REFERENCE_POINTS_PER_S / 1e6:g} M points/s (the demo's "
                "rate on one workstation; yours depends on the workers)",
            )
        )
    rows.append(
        (
            "limits",
            f"{cfg.limits.max_points:,} points, {cfg.limits.max_output_bytes} of results, "
            f"{cfg.limits.max_chunks:,} chunks (limits.max_points, limits.max_output_bytes, limits.max_chunks; "
            "--force runs larger jobs)",
        )
    )
    if cfg.advect is None:
        rows.append(("partitions", plan.partitions))
    rows.append(("cluster", plan.cluster))
    rows.append(("output", f"{cfg.output.path} ({cfg.output.resolved_format}, overwrite {cfg.output.overwrite})"))
    rows += [("note", note) for note in plan.notes]
    console.print(_rows_table("vdbflow run: plan (nothing has run)", rows))
    for warning in plan.warnings:
        _say("warning", f"{warning} (a dry run goes on; the run would stop here)", "yellow")
    if plan.job_script:
        console.print(
            "SLURM job script (one per job; the scheduler address is filled in at run time):",
            style="bold",
            markup=False,
        )
        click.echo(plan.job_script)  # verbatim: rich would wrap the worker command at the terminal's width


def _print_summary(result: Any, console: Console) -> None:
    from vdbflow.jobs.chunks import ANALYTIC_CHECK_PER_CHUNK

    t = result.timings
    if result.steps is None:
        rows = [
            ("points", f"{result.points:,}"),
            ("grids", ", ".join(result.grids)),
            (
                "partitions / workers",
                f"{result.partitions} / {result.workers}"
                if result.partitions
                else f"none (each worker reads the whole volume) / {result.workers}",
            ),
            ("throughput", f"{result.throughput / 1e6:.2f} M points/s (sampling + writing)"),
            (
                "time",
                f"{t['total_s']:.1f} s total: cluster {t['cluster_s']:.1f} s, "
                f"{'distribute' if result.partitions else 'open'} {t['distribute_s']:.1f} s, "
                f"sample + write {t['sample_and_write_s']:.1f} s",
            ),
        ]
    else:
        rows = [
            ("particles", f"{result.points:,} x {result.steps:,} steps"),
            ("grid / workers", f"{', '.join(result.grids)} / {result.workers}"),
            ("throughput", f"{result.throughput / 1e6:.2f} M particle-steps/s (advection + writing)"),
            (
                "time",
                f"{t['total_s']:.1f} s total: cluster {t['cluster_s']:.1f} s, open and seed "
                f"{t['distribute_s']:.1f} s, advect + write {t['sample_and_write_s']:.1f} s",
            ),
        ]
    if result.worker_seconds:
        steps = ", ".join(f"{k} {v:.2f}" for k, v in result.worker_seconds.items() if v >= 0.005)
        rows.append(("worker time (s)", f"{steps} (compute on {result.workers} worker(s), by Dask's task stream)"))
    if result.analytic_error is not None:
        checked = result.analytic_output or "jacobian"
        rows.append(
            (
                "max |J - J_exact|" if checked == "jacobian" else f"max |{checked} - exact|",
                f"{result.analytic_error:.3g} over {result.analytic_points:,} interior "
                "points checked (analytic Jacobian of the synthetic field; up to "
                f"{ANALYTIC_CHECK_PER_CHUNK:,} points a chunk)",
            )
        )
    if result.edge_checked is not None:
        rows.append(("edge of the data", result.edge_summary()))
    if result.nonfinite_points:
        rows.append(
            (
                "non-finite points",
                f"{result.nonfinite_points:,}: a coordinate is NaN or infinite; their results are NaN",
            )
        )
    if result.cuda_builds:
        rows.append(("CUDA entries", f"{result.cuda_builds} (summed over the workers)"))
    rows.append(("output", str(result.output)))
    console.print(_rows_table("vdbflow run: summary", rows))


class Stopped(KeyboardInterrupt):
    """A job stopped by a signal (SIGINT, SIGTERM as ``scancel`` and ``timeout`` send, SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class SignalGuard:
    """How the CLI treats stop signals during a job: ``publishing`` is set by the job when it starts
    moving its result into place, after which a signal is only recorded (in ``deferred``)."""

    def __init__(self) -> None:
        self.publishing = threading.Event()
        self.deferred: int | None = None


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[SignalGuard]:
    """The first SIGINT, SIGTERM or SIGHUP raises :class:`Stopped` in the main thread, so the job's
    cleanup runs (partial store, input snapshot, cluster); later ones while it cleans up are ignored
    with a message (SIGKILL still ends it at once).  Once the job is publishing its result, a signal
    is deferred instead: the job finishes and says so."""
    guard = SignalGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    stopping = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal stopping
        if guard.publishing.is_set():
            guard.deferred = signum
            return
        if stopping:  # os.write: a print here could re-enter a write of the interrupted main thread
            name = signal.Signals(signum).name
            os.write(2, f"stopping: {name} again: still cleaning up (SIGKILL ends it at once)\n".encode())
            return
        stopping = True
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield guard
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _run(config_path: str, overrides: tuple[str, ...], dry_run: bool, verbose: int, force: bool = False) -> None:
    from vdbflow.errors import PointsError, VdbflowError
    from vdbflow.jobs.config import ConfigError
    from vdbflow.jobs.config_load import load_config
    from vdbflow.jobs.plan import plan_job
    from vdbflow.jobs.runner import run_job

    console = _stdout()
    _logging(verbose)
    try:
        with _stop_on_signals() as guard:
            cfg = load_config(config_path, overrides)
            if dry_run:
                _print_plan(plan_job(cfg, force, dry_run=True), console)
                return
            result = run_job(cfg, console, force=force, publishing=guard.publishing)
    except (ConfigError, PointsError) as err:  # the config, or the points it names, are wrong: nothing ran
        _say("config error", str(err))
        raise SystemExit(2) from None
    except KeyboardInterrupt as err:  # Ctrl-C, or Stopped by a signal: the cleanup has run
        signum = err.signum if isinstance(err, Stopped) else signal.SIGINT
        _say(
            "interrupted" if signum == signal.SIGINT else "stopped",
            f"by {signal.Signals(signum).name}: no result was published",
        )
        raise SystemExit(128 + signum) from None
    except VdbflowError as err:
        _say("error", str(err))
        raise SystemExit(1) from None
    except Exception as err:  # a worker's or a library's failure: say what, keep the trace for -vv
        logging.getLogger("vdbflow").debug("the job failed", exc_info=True)
        _say(
            "the job failed",
            f"{type(err).__name__}: {err}; no result was published"
            + ("" if verbose > 1 else " (-vv shows the traceback)"),
        )
        raise SystemExit(1) from None
    _print_summary(result, console)
    if guard.deferred is not None:
        name = signal.Signals(guard.deferred).name
        _say("note", f"{name} arrived while the result was being published: the job finished", style="yellow")


_SET_HELP = "Override a config key, e.g. --set points.count=1000000 (the value is read as YAML). Repeatable."


@main.command()
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Validate the config, print the plan (and the SLURM job script); run nothing. Input files "
    "that are not here are warnings.",
)
@click.option(
    "--force",
    is_flag=True,
    help="Run a job larger than the config's limits (limits.max_points, limits.max_output_bytes, limits.max_chunks).",
)
@click.option("-v", "--verbose", count=True, help="Log progress to stderr (-vv: also Dask's own logs).")
def run(config: str, overrides: tuple[str, ...], dry_run: bool, force: bool, verbose: int) -> None:
    """Run the batch job described by CONFIG (YAML): sample a volume at points on a Dask cluster and
    write the result (Zarr or NetCDF).  Exit code 2: the config or its inputs are wrong; nothing ran."""
    _run(config, overrides, dry_run, verbose, force)


@main.command()
@click.argument("target", required=False, default=".", type=click.Path())
@click.option("--dry-run", is_flag=True, help="Say what would be done; touch nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Also remove leftovers whose writer cannot be checked (another host, "
    "or written before vdbflow recorded writers).",
)
def clean(target: str, dry_run: bool, force: bool) -> None:
    """Remove what killed runs left next to an output: partial results (.NAME.partial-*) and input
    snapshots (.NAME.input-*) whose writer has exited, and put back an earlier result a kill set aside
    mid-swap (.NAME.replaced-*).  Files of a running job are kept.

    TARGET is a job config (.yaml: its output.path), an output path, or a directory holding outputs
    (default: the current directory).  Exit code 2: TARGET cannot be read."""
    from vdbflow.jobs.config import ConfigError
    from vdbflow.jobs.config_load import load_config
    from vdbflow.jobs.output import tidy
    from vdbflow.jobs.results import not_a_result

    path = Path(target)
    try:
        if path.suffix.lower() in (".yaml", ".yml") and path.is_file():
            lines = tidy(load_config(path).output.path.absolute(), force=force, dry_run=dry_run)
        elif path.is_dir() and not path.is_symlink() and not_a_result(path) is not None:
            lines = tidy(directory=path.absolute(), force=force, dry_run=dry_run)
        else:
            lines = tidy(path.absolute(), force=force, dry_run=dry_run)
    except ConfigError as err:
        _say("config error", str(err))
        raise SystemExit(2) from None
    for line in lines:
        click.echo(line)
    if not lines:
        click.echo(f"nothing to clean at {target}")


def demo_config() -> Path:
    """configs/demo.yaml: installed next to the package, or in the source tree."""
    here = Path(__file__).resolve().parents[1]  # the vdbflow package
    for candidate in (here / "configs" / "demo.yaml", here.parent / "configs" / "demo.yaml"):
        if candidate.is_file():
            return candidate
    raise click.ClickException("configs/demo.yaml is not installed with this copy of vdbflow")


@main.command()
@click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE", help=_SET_HELP)
@click.option("--dry-run", is_flag=True, help="Print the plan only.")
@click.option("-v", "--verbose", count=True, help="Log progress to stderr.")
def demo(overrides: tuple[str, ...], dry_run: bool, verbose: int) -> None:
    """Write a synthetic Taylor-Green vortex to .nvdb and run configs/demo.yaml on it (an embedded
    LocalCluster; results in ./vdbflow-demo/)."""
    path = demo_config()
    click.echo(f"vdbflow {_version()} demo: running {path}")
    _run(str(path), overrides, dry_run, verbose)


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


@main.command(cls=_ConvertCommand)
@click.argument("source", type=click.Path(exists=True))
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
    overwrite: bool,
) -> None:
    """Convert a dense array (SOURCE: .npy, NetCDF or Zarr) to a sparse .nvdb grid (OUTPUT), one slab at a time,
    or the grids of an OpenVDB .vdb file (SOURCE; --variable picks grids by name) to a .nvdb file."""
    import numpy as np
    from rich.progress import Progress

    from vdbflow.errors import VdbflowError
    from vdbflow.io.dense import convert as to_volume
    from vdbflow.io.dense import default_name, open_dense
    from vdbflow.io.openvdb import is_openvdb

    out = Path(output)
    if out.exists() and not overwrite:
        _say("error", f"{out} exists (pass --overwrite to replace it)")
        raise SystemExit(2)
    if is_openvdb(source):
        _convert_openvdb(source, out, variables, codec, nvdb_version)
        return
    try:
        if nvdb_version is not None:  # an unknown version is refused before anything is read
            from vdbflow.io.nanovdb.write import write_format

            write_format(nvdb_version, {})
        src = open_dense(source, variables, mask_variable, units, length_units)
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
    click.echo(
        f"wrote {out}: grid {grid_name!r}, {vol.value_type.name}, {vol.active_voxel_count:,} active voxels "
        f"of {dense:,} ({vol.active_voxel_count / max(dense, 1):.1%}), {vol.leaf_count:,} leaves; {stated}"
    )


def _convert_openvdb(source: str, out: Path, names: tuple[str, ...], codec: str, version: str | None) -> None:
    """The grids of an OpenVDB file (all, or those ``names``) written to one .nvdb file: value grids as
    value grids, bool and mask grids as OnIndex grids; a repeated name gets its number (``density_1``)."""
    from vdbflow.errors import VdbflowError
    from vdbflow.io.nanovdb import save
    from vdbflow.io.volumes import list_grids, open_volume

    try:
        infos = list_grids(source)
        known = {g.name.split("\x1e")[0] for g in infos} | {g.name for g in infos}
        missing = [n for n in names if n not in known]
        if missing:
            raise VdbflowError(f"expected grid names of {source} ({sorted(known)}), got {missing}")
        grids = {}
        for g in infos:
            base, _, number = g.name.partition("\x1e")
            if names and base not in names and g.name not in names:
                continue
            grids[f"{base}_{number}" if number and number != "0" else base] = open_volume(source, g.index)
        save(out, grids, codec=codec, version=version)  # atomic: a private directory beside it, then a rename
    except VdbflowError as err:
        _say("error", str(err))
        raise SystemExit(2) from None
    for name, vol in grids.items():
        click.echo(f"wrote {out}: grid {name!r}, {vol!r}")


def _format_version(version: str) -> str:
    """'NanoVDB 32.6.0' for .nvdb grids; .vdb grids' version already names OpenVDB."""
    return version if version.startswith("OpenVDB") else f"NanoVDB {version}"


def _box_text(box: Any) -> str:
    if box is None:
        return "(empty)"
    return f"{[float(f'{v:.6g}') for v in box[0]]} .. {[float(f'{v:.6g}') for v in box[1]]}"


def _grid_rows(g: Any) -> list[tuple[str, str]]:
    """One grid of ``vdbflow info``, as (key, value) rows."""
    (i0, i1), (w0, w1) = g.index_bbox, g.world_bbox
    return [
        (f"grid {g.index}", repr(g.name) if g.name else "(unnamed)"),
        ("type", f"{g.grid_type}, class {g.grid_class}"),
        ("active voxels", f"{g.active_voxel_count:,}"),
        ("nodes", f"{g.leaf_count:,} leaves, {g.lower_count:,} lower, {g.upper_count:,} upper"),
        ("tiles", "/".join(f"{c:,}" for c in g.tile_counts) + " (lower/upper/root: 8³/128³/4096³ voxels)"),
        ("index bbox", f"{list(i0)} .. {list(i1)}"),
        ("world bbox", f"{[float(f'{v:.6g}') for v in w0]} .. {[float(f'{v:.6g}') for v in w1]} (voxel cells)"),
        ("voxel centres", _box_text(g.centre_bbox)),
        ("voxel size", " ".join(f"{v:.6g}" for v in g.voxel_size) + (f" {g.length_units}" if g.length_units else "")),
        ("units", g.units or "(none stored)"),
        *([("components", ", ".join(g.component_names))] if g.component_names else []),
        ("stored", f"{g.grid_size:,} bytes, codec {g.codec}, {_format_version(g.version)}"),
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


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (a list: path and grids of each file, or its error) instead of tables.",
)
def info(paths: tuple[str, ...], as_json: bool) -> None:
    """List the grids of NanoVDB (.nvdb) and OpenVDB (.vdb) files.  Exit code 2: a file could not be read
    (the others are still listed)."""
    import json

    from vdbflow.errors import NanoVDBError, OpenVDBError
    from vdbflow.io.volumes import list_grids

    console, failed, listing = _stdout(), False, []
    for path in paths:
        try:
            grids = list_grids(path)
        except (NanoVDBError, OpenVDBError) as err:
            failed = True
            if as_json:
                listing.append({"path": path, "error": str(err)})
            else:
                _say("error", str(err) if path in str(err) else f"{path}: {err}")
            continue
        if as_json:
            listing.append({"path": path, "grids": [_json_value(g) for g in grids]})
            continue
        rows, sections = [], []
        for g in grids:
            sections.append(len(rows))
            rows += _grid_rows(g)
        click.echo(f"{path}: {len(grids)} grid(s)")  # a path is not wrapped
        console.print(_rows_table(None, rows, tuple(sections[1:])))
    if as_json:
        click.echo(json.dumps(listing, indent=2))
    if failed:
        raise SystemExit(2)


main.add_command(build_cuda)

if __name__ == "__main__":  # pragma: no cover
    main()
