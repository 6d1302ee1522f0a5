"""Statistics of a Volume at Dask points on a distributed client send the volume to the workers once (issue 50,
row 4): before, every chunk's task carried its own pickled copy and each call warned "Sending large graph"."""

from __future__ import annotations

import pickle
import warnings

import dask
import dask.array as da
import numpy as np

import vdbflow
from vdbflow.ops import statistics
from vdbflow.ops.reductions import Histogram, Statistics, quantity
from vdbflow.synthetic import flow_volume, taylor_green


def _stats(vol) -> Statistics:
    q, r = quantity("q_criterion", vol, "world"), quantity("r_invariant", vol, "world")
    return Statistics(histograms=[Histogram((q, r), (np.linspace(-3, 3, 17), np.linspace(-2, 2, 13)))], moments=[q])


def _same(got, expected) -> None:
    """Counts equal; moments to rounding (chunk partials merged pairwise against one call's sums)."""
    assert set(got.variables) == set(expected.variables)
    for name in expected.variables:
        a, b = got[name].values, expected[name].values
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)
    np.testing.assert_array_equal(got["count"].values, expected["count"].values)


def test_statistics_on_a_cluster_send_the_volume_once():
    import distributed

    vol = flow_volume(taylor_green(), 32)
    size = len(pickle.dumps(vol))  # about 400 kB
    lazy = da.random.RandomState(3).uniform(0.2, 6.0, size=(40_000, 3), chunks=(5_000, 3))  # 8 chunks, no data
    stats = _stats(vol)
    expected = vdbflow.statistics(vol, lazy.compute(), stats)  # the one-call NumPy path
    threshold = f"{size // 2}B"  # the volume once is over it: the graph must not hold it at all
    with (
        dask.config.set({"distributed.admin.large-graph-warning-threshold": threshold}),
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cl,
        distributed.Client(cl) as client,
    ):
        sent = []
        for _ in range(2):  # the second call reuses what the first sent
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = vdbflow.statistics(vol, lazy, stats)
            assert not [w for w in caught if "large graph" in str(w.message)], [str(w.message) for w in caught]
            _same(got, expected)
            sent.append(statistics._SENT[vol][client.id])
        assert sent[0] is sent[1] and sent[0].status == "finished"  # scattered once


def test_without_a_client_the_threads_scheduler_shares_the_volume():
    vol = flow_volume(taylor_green(), 32)
    lazy = da.random.RandomState(4).uniform(0.2, 6.0, size=(20_000, 3), chunks=(5_000, 3))
    stats = _stats(vol)
    with dask.config.set(scheduler="threads"):
        got = vdbflow.statistics(vol, lazy, stats)
    expected = vdbflow.statistics(vol, lazy.compute(), stats)
    _same(got, expected)
