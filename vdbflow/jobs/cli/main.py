"""The ``vdbflow`` command line.

Results (plans, summaries, tables) go to stdout; errors, warnings and ``-v`` logs go to stderr,
one unwrapped line each, so they survive pipes and log files.  Messages are printed as plain
text, never as rich markup (``pip install -e ".[tables]"`` keeps its brackets).
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

from vdbflow.errors import PointsError, VdbflowError
from vdbflow.jobs.chunks import ANALYTIC_CHECK_PER_CHUNK
from vdbflow.jobs.cli.console import RedactingFormatter
from vdbflow.jobs.cli.console import rows_table as _rows_table
from vdbflow.jobs.cli.console import say as _say
from vdbflow.jobs.cli.console import stdout as _stdout
from vdbflow.jobs.cli.convert import convert
from vdbflow.jobs.cli.gpu import build_cuda
from vdbflow.jobs.cli.info import info
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.config.model import ConfigError
from vdbflow.jobs.config.output import url_protocol
from vdbflow.jobs.publish.output import tidy
from vdbflow.jobs.publish.results import not_a_result
from vdbflow.version import __version__

if TYPE_CHECKING:
    from rich.console import Console


def _version() -> str:
    return __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vdbflow", prog_name="vdbflow")
def main() -> None:
    """Sample values and Jacobians from sparse NanoVDB-style volumes."""


def _logging(verbose: int) -> None:
    """Log to stderr, one unwrapped line per record: vdbflow's at -v (INFO) and -vv (DEBUG, and Dask's)."""
    import distributed  # noqa: F401 - sets its loggers up on import; ours come after

    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("vdbflow").setLevel(level)
    for name in ("distributed", "dask_jobqueue", "dask_cuda"):
        logging.getLogger(name).setLevel(logging.INFO if verbose > 1 else logging.ERROR)


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
                f"sampling + writing at {plan.points_per_s / 1e6:.2g} M points/s for sampling.mode "
                f"{cfg.sampling.mode} ({REFERENCE_POINTS_PER_S / 1e6:g} M points/s linear: the demo's rate at 8M "
                "points on one workstation, the cluster's start not counted; a wider stencil or a Hessian costs "
                "more a point, as measured of the kernels: a small job, such as the demo's 1M points, runs "
                "slower; yours depends on the workers)",
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


def _sampled(result: Any) -> str:
    """What a resumed run's throughput counts: the points it sampled now, not the kept units'."""
    if result.points_sampled is None or result.points_sampled == result.points:
        return ""
    return f", counting the {result.points_sampled:,} points sampled now"


def _print_summary(result: Any, console: Console) -> None:
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
            ("throughput", f"{result.throughput / 1e6:.2f} M points/s (sampling + writing){_sampled(result)}"),
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
    if result.resumed:
        rows.insert(
            1,
            (
                "resumed",
                f"{result.units_kept} of {result.units_kept + result.units_written} units kept from the partial "
                f"result (verified); {result.units_written} written now",
            ),
        )
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
    if result.particles_left is not None:
        stopped = result.particles_left + result.particles_nonfinite
        rows.append(
            (
                "stopped",
                f"{stopped:,} of {result.points:,} particles: {result.particles_left:,} left the data (status 1), "
                f"{result.particles_nonfinite:,} met a non-finite value (status 2); the others ran to the end",
            )
        )
    if result.cuda_builds:
        rows.append(("CUDA entries", f"{result.cuda_builds} (summed over the workers)"))
    if result.workers_lost or result.tasks_recomputed:
        rows.append(
            (
                "workers lost",
                f"{result.workers_lost} of {result.workers} during the job; {result.tasks_recomputed} task(s) "
                f"computed again ({result.recompute_seconds:.1f} s of worker time); the result is complete",
            )
        )
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


def _unretrieved(record: logging.LogRecord) -> bool:
    """False for asyncio's "Task exception was never retrieved" (dropped): after a stop, the starts of the
    workers that the stop cut short ("Nanny failed to start") end with no one left to await them."""
    return "exception was never retrieved" not in record.getMessage()


# the resource tracker (a process multiprocessing starts for the workers' nannies) warns of the semaphores of
# workers a stop killed mid-start; it takes its warning filters from this process's -W options when it starts
_TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"


def _close_half_started_clusters() -> None:
    """Close the clusters a signal stopped while their workers started, quietly: distributed's exit hook
    would close them again and print a traceback (``AssertionError: Status.init``) after the job's line."""
    spec = sys.modules.get("distributed.deploy.spec")
    if spec is None:
        return
    from distributed.core import Status

    for cluster in list(getattr(spec.SpecCluster, "_instances", ())):
        if getattr(cluster, "status", Status.closed) == Status.closed:
            continue
        try:
            cluster.close(timeout=10)
        except BaseException as err:  # noqa: BLE001 - workers still starting: logged, the exit goes on
            logging.getLogger("vdbflow").debug("closing a half-started cluster: %r", err)
        finally:
            cluster.status = Status.closed  # nothing for the exit hook to close again


def _run(
    config_path: str, overrides: tuple[str, ...], dry_run: bool, verbose: int, force: bool = False, resume: bool = False
) -> None:
    from vdbflow.jobs.plan import plan_job
    from vdbflow.jobs.runner import run_job

    console = _stdout()
    _logging(verbose)
    if verbose < 2 and _TRACKER_QUIET not in sys.warnoptions:
        sys.warnoptions.append(_TRACKER_QUIET)
    try:
        with _stop_on_signals() as guard:
            cfg = load_config(config_path, overrides)
            if dry_run:
                _print_plan(plan_job(cfg, force, dry_run=True), console)
                return
            result = run_job(cfg, console, force=force, publishing=guard.publishing, resume=resume)
    except (ConfigError, PointsError) as err:  # the config, or the points it names, are wrong: nothing ran
        _say("config error", str(err))
        raise SystemExit(2) from None
    except KeyboardInterrupt as err:  # Ctrl-C, or Stopped by a signal: the cleanup has run
        signum = err.signum if isinstance(err, Stopped) else signal.SIGINT
        if verbose < 2:  # the stop's one line, and nothing after it (-vv keeps everything)
            logging.getLogger("asyncio").addFilter(_unretrieved)
        _close_half_started_clusters()
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
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the partial result a killed run of this job left (only what it did not write and verify is "
    "computed; a changed config or input is refused), and keep this run's partial result if it is stopped.",
)
@click.option("-v", "--verbose", count=True, help="Log progress to stderr (-vv: also Dask's own logs).")
def run(config: str, overrides: tuple[str, ...], dry_run: bool, force: bool, resume: bool, verbose: int) -> None:
    """Run the batch job described by CONFIG (YAML; a local file or a URL such as s3://bucket/job.yaml):
    sample a volume at points on a Dask cluster and write the result (Zarr, NetCDF or VTKHDF).  Exit code 2: the
    config or its inputs are wrong; nothing ran."""
    _run(config, overrides, dry_run, verbose, force, resume)


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
    path = Path(target)
    try:
        if url_protocol(target) is not None:  # an output on an object store (credentials from the environment)
            lines = tidy(target.rstrip("/"), force=force, dry_run=dry_run)
        elif path.suffix.lower() in (".yaml", ".yml") and path.is_file():
            out = load_config(path).output
            final = out.url if out.url is not None else out.local.absolute()
            lines = tidy(final, force=force, dry_run=dry_run, options=out.storage_options)
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
    here = Path(__file__).resolve().parents[2]  # the vdbflow package (this is vdbflow/jobs/cli/main.py)
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


main.add_command(convert)
main.add_command(info)
main.add_command(build_cuda)

if __name__ == "__main__":  # pragma: no cover
    main()
