"""The one chunk graph (vdbflow.ops.chunk_graph): a task a chunk, arrays stacked from the chunks' results, a fixed
tree of combines; and a ``reduce:`` job's executor that stays lazy until the job computes its write."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from vdbflow.errors import SamplingError
from vdbflow.ops.chunk_graph import PerChunk, map_chunks, reduce_chunks, stack_chunks


def _rows(block: np.ndarray, scale: float, index: int) -> tuple:
    """Two outputs of a chunk: its rows' sums (n,) times ``scale``, and the rows (n, 3) with the chunk's index."""
    return block.sum(axis=1) * scale, np.concatenate([block, np.full((len(block), 1), index)], axis=1)[:, 1:]


def test_map_chunks_gives_each_task_its_block_its_entry_and_the_shared_arguments():
    x = np.arange(30.0).reshape(10, 3)
    points = da.from_array(x, chunks=((4, 4, 2), (2, 1)))  # the last axis in two chunks: made whole
    parts = map_chunks(_rows, points, 2.0, PerChunk([7, 8, 9]), name="vdbflow-test")
    assert [p.key for p in parts] == [f"{parts[0].key[:-2]}-{b}" for b in range(3)]
    assert parts[0].key.startswith("vdbflow-test-")
    got = dask.compute(*parts, scheduler="sync")
    for (sums, rows), start, stop, index in zip(got, (0, 4, 8), (4, 8, 10), (7, 8, 9), strict=True):
        np.testing.assert_array_equal(sums, x[start:stop].sum(axis=1) * 2.0)
        np.testing.assert_array_equal(rows[:, -1], index)
    with pytest.raises(SamplingError, match="one chunk count"):
        map_chunks(_rows, points, 2.0, PerChunk([1, 2]), name="vdbflow-test")


def test_stack_chunks_makes_arrays_of_the_chunks_results_several_chunks_a_task():
    x = np.random.default_rng(0).normal(size=(9, 3))
    points = da.from_array(x, chunks=((3, 3, 3), 3))
    parts = map_chunks(_rows, points, 1.0, PerChunk([0, 1, 2]), name="vdbflow-test")
    sums, rows = stack_chunks(parts, points.chunks[:1], [((), np.float64), ((3,), np.float64)], ["s-t", "r-t"])
    assert sums.chunks == ((3, 3, 3),) and rows.chunks == ((3, 3, 3), (3,)) and sums.name == "s-t"
    np.testing.assert_array_equal(sums.compute(scheduler="sync"), x.sum(axis=1))
    np.testing.assert_array_equal(rows.compute(scheduler="sync")[:, -1], np.repeat([0, 1, 2], 3))

    def two(a: np.ndarray, b: np.ndarray) -> tuple:  # one task, two chunks: (out of a, out of b)
        return a * 10, b * 10

    task = dask.delayed(two)(x[:4], x[4:])
    (got,) = stack_chunks([(task, 0), (task, 1)], ((4, 5),), [((3,), np.float64)], ["w-t"])
    np.testing.assert_array_equal(got.compute(scheduler="sync"), x * 10)
    grid = da.from_array(np.arange(24.0).reshape(2, 4, 3), chunks=(1, 2, 3))  # two leading axes
    blocks = map_chunks(lambda b: (b.sum(axis=-1),), grid, name="vdbflow-grid", lead=2)
    (total,) = stack_chunks(blocks, grid.chunks[:2], [((), np.float64)], ["g-t"])
    np.testing.assert_array_equal(total.compute(scheduler="sync"), np.arange(24.0).reshape(2, 4, 3).sum(axis=-1))


def test_reduce_chunks_merges_pairwise_in_a_fixed_tree_over_the_chunks_order():
    parts = [dask.delayed(c) for c in "abcde"]
    tree = reduce_chunks(parts, lambda a, b: f"({a}{b})")
    assert tree.compute(scheduler="sync") == "(((ab)(cd))e)"  # levels: (ab)(cd)e, ((ab)(cd))e, then the last
    assert reduce_chunks(parts[:1], lambda a, b: a + b).compute(scheduler="sync") == "a"
    assert reduce_chunks(parts, lambda a, b: a + b, str.upper).compute(scheduler="sync") == "ABCDE"
    assert reduce_chunks(parts, None, "|".join).compute(scheduler="sync") == "a|b|c|d|e"
    with pytest.raises(SamplingError, match="at least one point chunk"):
        reduce_chunks([], None, list)


@pytest.mark.slow
def test_a_reduce_job_stays_lazy_until_its_write(tmp_path):
    """``executors.reduced`` returns a lazy Dataset (nothing of its reduction runs before the job's write), which
    computes to counts equal to NumPy's histogram of the same samples."""
    import distributed

    import vdbflow
    from vdbflow.jobs import executors
    from vdbflow.jobs.config.load import load_config
    from vdbflow.jobs.inputs import build_volumes
    from vdbflow.jobs.plan import plan_job

    cfg = load_config(
        data={
            "volume": {"synthetic": {"field": "taylor_green", "resolution": 16}},
            "points": {"kind": "random", "count": 6_000, "chunk": 2_000, "seed": 3, "inside": "voxels"},
            "reduce": {"histograms": [{"of": ["q_criterion"], "bins": 8, "range": [[-3, 3]]}], "moments": ["value[u]"]},
            "output": {"path": str(tmp_path / "stats.nc")},
        }
    )
    plan = plan_job(cfg, own_cluster=False)
    sources, _ = build_volumes(cfg, [g.name for g in plan.grids])
    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as c,
        distributed.Client(c) as client,
        distributed.get_task_stream(client) as stream,
    ):
        sampled = executors.reduced(cfg, client, sources, None, plan, {})
        assert all(isinstance(v.data, da.Array) for v in sampled.ds.data_vars.values())
        assert not [r for r in stream.data if executors.REDUCE_KEY in str(r["key"])]  # nothing ran
        ds = sampled.ds.compute()
    vol = next(iter(sources.values()))
    pts = sampled.point_set.points.compute()
    q = vol.sample_grad(pts, outputs=("q_criterion",))["q_criterion"].values
    np.testing.assert_array_equal(ds["q_criterion_count"].values, np.histogram(q, np.linspace(-3, 3, 9))[0])
    assert int(ds["count"].sel(quantity=ds["quantity"].values[0])) == len(pts) == 6_000
    assert ds.attrs["reduced_points"] == 6_000 and sampled.partitions == 0 and not sampled.volumes
    same = vdbflow.statistics(vol, pts, executors.job_statistics(cfg, vol))  # the library door, one call
    np.testing.assert_array_equal(ds["q_criterion_count"].values, same["q_criterion_count"].values)
