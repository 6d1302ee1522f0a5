"""A chunk larger than a worker's memory (issue 26, row 8): ``points.chunk=30000000`` with
``cluster.memory_limit=1GB`` was planned without a word and died after 32 s with Dask's raw
``KilledWorker``. The plan refuses it (exit 2, naming points.chunk and the size that fits; ``--force``
runs it anyway) and warns beyond half the memory; a ``KilledWorker`` is said in terms of the job."""

from types import SimpleNamespace

import pytest
from test_run import base_config, invoke, write_config

from vdbflow.jobs.clusters import worker_memory_limit
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.plan import CHUNK_WORKING_SET_FACTOR, plan_job

BIG = {"kind": "random", "count": 30_000_000, "chunk": 30_000_000, "seed": 0}


def test_a_chunk_larger_than_a_worker_is_refused_naming_points_chunk(tmp_path):
    cfg = base_config(tmp_path, points=dict(BIG))
    cfg["cluster"]["memory_limit"] = "1GB"
    path = write_config(tmp_path / "job.yaml", cfg)
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 2, result.output
    said = result.output
    assert f"points.chunk ({path}, line " in said, said  # the key, where it was given
    assert "one chunk of 30,000,000 points needs about" in said and "more than a worker's memory limit (1.0 GB" in said
    assert "a points.chunk of at most" in said and "cluster.memory_limit" in said, said
    fit = int(said.split("a points.chunk of at most ")[1].split(" points")[0].replace(",", ""))
    cfg["points"]["chunk"] = fit  # the size it names fits: planned without a refusal or a warning
    path = write_config(tmp_path / "job.yaml", cfg)
    result = invoke("run", str(path), "--dry-run")
    assert result.exit_code == 0 and "needs about" not in result.output, result.output
    assert not (tmp_path / "result.zarr").exists()


def test_force_plans_the_chunk_anyway_and_the_refusal_holds_without_a_dry_run(tmp_path):
    cfg = base_config(tmp_path, points=dict(BIG))
    cfg["cluster"]["memory_limit"] = "1GB"
    path = write_config(tmp_path / "job.yaml", cfg)
    result = invoke("run", str(path), "--dry-run", "--force")
    assert result.exit_code == 0 and "allowed by --force" in result.output, result.output
    result = invoke("run", str(path))  # refused before any cluster starts
    assert result.exit_code == 2 and "config error" in result.output and "points.chunk" in result.output
    assert not (tmp_path / "result.zarr").exists()


def test_a_chunk_over_half_a_worker_is_a_note_of_the_plan_and_a_warning_of_the_run(tmp_path, caplog):
    cfg = load_config(data=base_config(tmp_path, points=dict(BIG)))
    per_point = plan_job(cfg, dry_run=True).bytes_per_point * CHUNK_WORKING_SET_FACTOR
    chunk = int(0.75 * 1e9) // per_point  # three quarters of a 1 GB worker
    spec = base_config(tmp_path, points={**BIG, "chunk": chunk})
    spec["cluster"]["memory_limit"] = "1GB"
    plan = plan_job(load_config(data=spec), dry_run=True)
    (note,) = [n for n in plan.notes if "more than half of a worker's memory limit (1.0 GB" in n]
    assert note.startswith(f"points.chunk: one chunk of {chunk:,} points needs about") and "at most" in note
    with caplog.at_level("WARNING", logger="vdbflow.plan"):
        plan_job(load_config(data=spec))  # what a run plans: the same words, logged as a warning
    assert [r.getMessage() for r in caplog.records if r.name == "vdbflow.plan"] == [note]
    result = invoke("run", str(write_config(tmp_path / "job.yaml", spec)), "--dry-run")
    assert result.exit_code == 0 and "more than half of a" in result.output, result.output


def test_the_workers_memory_comes_from_the_cluster_section(tmp_path):
    local = load_config(data=base_config(tmp_path)).cluster  # Dask's default: the machine over the workers
    from distributed.system import MEMORY_LIMIT

    assert worker_memory_limit(local)[0] == MEMORY_LIMIT // 2
    slurm = {"kind": "slurm", "queue": "q", "cores": 4, "memory": "8GB", "processes": 4}
    assert worker_memory_limit(load_config(data=base_config(tmp_path, cluster=slurm)).cluster)[0] == 2_000_000_000
    address = {"kind": "address", "address": "tcp://127.0.0.1:8786"}
    assert worker_memory_limit(load_config(data=base_config(tmp_path, cluster=address)).cluster) is None


def test_a_slurm_chunk_larger_than_a_worker_is_refused(tmp_path):
    slurm = {"kind": "slurm", "queue": "q", "cores": 4, "memory": "2GB", "processes": 2, "dashboard": False}
    result = invoke(
        "run", str(write_config(tmp_path / "job.yaml", base_config(tmp_path, points=dict(BIG), cluster=slurm)))
    )
    assert result.exit_code == 2 and "points.chunk" in result.output, result.output
    assert "(1.0 GB: cluster.memory 2GB over 2 process(es))" in result.output and "(cluster.memory)" in result.output


def test_killed_worker_is_said_in_terms_of_the_job(tmp_path, monkeypatch):
    """Dask's KilledWorker (here raised by the gather of a real one-worker job) becomes one error line:
    the task, the likely cause with the memory limit and the chunk's working set, what to change."""
    import distributed
    from distributed.scheduler import KilledWorker

    def killed(self, futures, *args, **kwargs):
        raise KilledWorker(("vdbflow-chunk-abc", 0), SimpleNamespace(address="tcp://127.0.0.1:4321"), 3)

    monkeypatch.setattr(distributed.Client, "gather", killed)
    cfg = base_config(tmp_path, points={"kind": "random", "count": 2_000, "chunk": 1_000, "seed": 0})
    cfg["cluster"] = {"kind": "local", "workers": 1, "memory_limit": "512MiB", "dashboard": False}
    result = invoke("run", str(write_config(tmp_path / "job.yaml", cfg)))
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the workers running task ('vdbflow-chunk-abc', 0) died 4"), (
        lines
    )
    said = lines[0]
    assert "ran out of memory - each worker may use 536.9 MB" in said, said
    assert "one chunk of 1,000 points needs about" in said and "a smaller points.chunk (" in said, said
    assert "cluster.memory_limit" in said and "No result was published" in said
    assert "Attempted to run task" not in said  # not Dask's own message
    leftovers = [p.name for p in tmp_path.iterdir() if p.name not in ("job.yaml",)]
    assert leftovers == [], leftovers  # nothing published, no partial store left


@pytest.mark.parametrize("other", [RuntimeError("boom"), KeyError("x")])
def test_other_errors_are_not_said_as_killed_workers(tmp_path, other):
    from vdbflow.jobs.runner import killed_worker_error

    plan = plan_job(load_config(data=base_config(tmp_path)), dry_run=True)
    assert killed_worker_error(other, plan, 1 << 30) is None


def test_a_given_clients_workers_are_checked_when_the_job_starts(tmp_path):
    """With ``client=`` (or an existing scheduler) the config does not say the workers' memory: the run
    checks the chunk against their memory_limit before any task, with the same words."""
    import distributed

    import vdbflow
    from vdbflow.jobs.config.model import ConfigError

    spec = base_config(tmp_path, points={"kind": "random", "count": 2_000_000, "chunk": 2_000_000, "seed": 0})
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, memory_limit="256MiB", dashboard_address=None, processes=False
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        with pytest.raises(ConfigError, match=r"points.chunk: one chunk of 2,000,000 points needs about") as err:
            vdbflow.run(spec, client=client)
    assert "the smallest memory_limit of the cluster's workers" in str(err.value) and "--force" in str(err.value)
    assert not (tmp_path / "result.zarr").exists()


# -- issue 40, row 4: the chunk's working set counts what its outputs are computed from ------------------


def test_a_laplacian_chunk_is_counted_with_its_hessian_and_refused_naming_points_chunk(tmp_path):
    """``[laplacian]`` writes C numbers a point but each chunk holds the value, Jacobian and Hessian it is
    computed from: a chunk that fits the written size (44 bytes a point) but not those arrays is
    refused, exit 2, as ``[hessian]`` is."""
    chunk = 3_000_000
    for outputs in (["hessian"], ["laplacian"]):
        cfg = base_config(tmp_path, points={"kind": "random", "count": chunk, "chunk": chunk, "seed": 0})
        cfg["volume"] = {"synthetic": {"field": "taylor_green", "resolution": 16}}
        cfg["sampling"] = {"mode": "linear", "outputs": outputs}
        cfg["cluster"]["memory_limit"] = "1GB"
        path = write_config(tmp_path / "job.yaml", cfg)
        result = invoke("run", str(path), "--dry-run")
        assert result.exit_code == 2, (outputs, result.output)
        assert f"points.chunk ({path}, line " in result.output and "more than a worker's memory limit" in result.output


def _measured_chunk(cfg_dict, tmp_path):
    """(bytes a point of every array a chunk task returns and the job's outputs computed from them, the
    plan's figure): the chunk run here on 4,000 points of the job's synthetic field."""
    import numpy as np

    from vdbflow import synthetic
    from vdbflow.jobs.chunks import ChunkSpec, grid_request, grid_variables, sample_chunk

    cfg = load_config(data=cfg_dict)
    plan = plan_job(cfg, dry_run=True)
    field = synthetic.make_field("taylor_green")
    vol = synthetic.flow_volume(field, 16, 2 * np.pi, np.dtype("float32"), 0.0, 0.6)
    n = 4000
    points = np.random.default_rng(0).uniform(1, 15, (n, 3))
    request = grid_request(cfg)
    spec = ChunkSpec(request, None, "inside" in cfg.sampling.outputs, None)
    returned = sample_chunk(0, 0, n, spec, points, vol)
    arrays = dict(zip(request.outputs, returned[1 : 1 + len(request.outputs)], strict=True))
    inside = returned[1 + len(request.outputs)] if spec.inside else None
    ds, _ = grid_variables(vol, request, points, arrays, cfg, "", inside)
    held = sum(a.nbytes for a in returned[: 1 + len(request.outputs) + spec.inside]) + 8 * n  # + the point index
    sampled = [*arrays.values(), inside]
    held += sum(
        ds[v].nbytes for v in ds.data_vars if not any(np.shares_memory(ds[v].data, a) for a in sampled if a is not None)
    )
    return held / n, plan


def test_the_plan_counts_at_least_what_a_chunk_holds_for_every_output(tmp_path):
    """The plan's bytes a point of a chunk against what a chunk task really returns and derives, for each
    output alone (the oracle measures the arrays; the plan derives them from the request)."""
    from vdbflow.core import outputs as output_table

    for out in output_table.TABLE:
        cfg = base_config(tmp_path, points={"kind": "random", "count": 4000, "chunk": 4000, "seed": 0})
        cfg["volume"] = {"synthetic": {"field": "taylor_green", "resolution": 16}}
        cfg["sampling"] = {"mode": "linear", "outputs": [out]}
        measured, plan = _measured_chunk(cfg, tmp_path)
        assert plan.held_per_point >= measured, (out, plan.held_per_point, measured)
        assert plan.held_per_point <= 1.5 * measured + 32, (out, plan.held_per_point, measured)  # not wildly over
