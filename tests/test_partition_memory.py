"""Memory is a contract (issue 51): a process holds the leaves it asked for, never the file.

Oracles: the file's size (a reader that mapped and kept the file would hold all of it), the bytes of the
leaves asked for (leaves x 512 values), the values written (random NumPy rows), and the single-process
volume (distributed results equal it bit for bit).  Resident memory is read from /proc (VmRSS, RssFile:
what Dask's memory monitor counts) in fresh processes, so that nothing else the suite did is in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import vdbflow
from vdbflow.core.transform import Transform
from vdbflow.core.volume import Topology, Volume

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")

SIDE = 24  # leaves per axis of the test volume: 13,824 vec3f leaves, an 85 MB file


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    """An 85 MB .nvdb file of random vec3f values in 24^3 leaves (every voxel active), and its values."""
    rng = np.random.default_rng(51)
    keys = np.stack(np.meshgrid(*[np.arange(SIDE)] * 3, indexing="ij"), -1).reshape(-1, 3)
    from vdbflow.core import tree

    keys = keys[tree.tree_order(keys)]
    origins = (keys * 8).astype(np.int32)
    masks = np.full((len(origins), 8), np.iinfo(np.uint64).max, np.uint64)
    topo = Topology(
        origins, masks, Transform(np.diag([0.5, 0.5, 0.5, 1.0])), np.zeros((0, 3), np.int32), np.zeros(0, np.int32)
    )
    values = rng.standard_normal((len(origins) * 512, 3)).astype(np.float32)
    vol = Volume.from_parts(topo, values, 0.0, None, False, "velocity", None)
    path = str(tmp_path_factory.mktemp("memory") / "big.nvdb")
    vol.to_nvdb(path)
    return path, vol


def _in_fresh_process(code: str) -> dict:
    """Run ``code`` (which sets ``out``, a dict) in a new interpreter; its ``out`` as JSON."""
    prelude = textwrap.dedent(
        """
        import json, sys
        import numpy as np
        def rss(path=None):
            d = {}
            for line in open("/proc/self/status"):
                key = line.split(":")[0]
                if key in ("VmRSS", "RssFile", "RssAnon"):
                    d[key] = int(line.split()[1]) * 1024
            if path is not None:  # resident pages of the mappings of that one file
                d["file"], inside = 0, False
                for line in open("/proc/self/smaps"):
                    head = line.split()
                    if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
                        inside = line.rstrip().endswith(path)
                    elif inside and line.startswith("Rss:"):
                        d["file"] += int(head[1]) * 1024
            return d
        """
    )
    full = prelude + textwrap.dedent(code) + "\nprint('RESULT' + json.dumps(out))\n"
    done = subprocess.run([sys.executable, "-c", full], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :])


@pytest.mark.slow
def test_opening_a_box_reads_only_its_leaves_and_keeps_nothing_of_the_file(big_file):
    path, vol = big_file
    size = os.path.getsize(path)
    out = _in_fresh_process(
        f"""
        import vdbflow
        vdbflow.open({path!r}, leaves=[0])  # the readers' modules imported
        before = rss({path!r})
        box = vdbflow.open({path!r}, bbox=[[0, 0, 0], [15, 15, 15]], checksum="strict")
        after = rss({path!r})
        whole = vdbflow.open({path!r}, checksum="strict")  # the tail checksum reads every byte
        after_whole = rss({path!r})
        out = dict(before=before, after=after, after_whole=after_whole, leaves=box.leaf_count,
                   mapped=box.kernel_arrays().leaf_values_at is not None)
        """
    )
    assert out["leaves"] == 8  # the 2^3 leaves of the box
    grown = out["after"]["VmRSS"] - out["before"]["VmRSS"]
    assert out["after"]["file"] == 0  # no mapping of the file is left
    assert grown < 0.05 * size, f"open(bbox=) of 8 of 13,824 leaves grew the process by {grown / 2**20:.1f} MiB"
    assert not out["mapped"]  # the box's values were copied: nothing keeps the file mapped
    # the whole grid (values left in the mapping, the checksum over every byte): its pages were given back
    file_pages = out["after_whole"]["file"]
    assert file_pages < 0.25 * size, f"open() kept {file_pages / 2**20:.1f} MiB of the file resident"


def test_selected_leaves_equal_the_values_written(big_file):
    """Values copied span by span (pages given back between spans) are the values written."""
    path, vol = big_file
    rng = np.random.default_rng(1)
    leaves = np.unique(rng.integers(0, vol.leaf_count, 3000))
    part = vdbflow.open(path, leaves=leaves)
    assert part.kernel_arrays().leaf_values_at is None  # in memory, not a view of the file
    np.testing.assert_array_equal(part.leaf_values, vol.leaf_values[leaves])
    np.testing.assert_array_equal(part.topology.leaf_origins, vol.topology.leaf_origins[leaves])
    whole = vdbflow.open(path)  # its heads read and their pages given back; values still right
    np.testing.assert_array_equal(whole.leaf_values[leaves], vol.leaf_values[leaves])
    ijk = vol.active_voxels()[rng.integers(0, vol.active_voxel_count, 5000)] + rng.uniform(0, 1, (5000, 3))
    a = whole.sample_grad(ijk, space="index")
    b = vol.sample_grad(ijk, space="index")
    np.testing.assert_array_equal(a["velocity_jacobian"].values, b["velocity_jacobian"].values)


@pytest.mark.slow
def test_workers_hold_their_partition_and_halo_not_the_file(big_file):
    """Two worker processes with a tight memory_limit: after distribute and after sampling each holds
    about its own and halo leaves (within 48 MiB), far less than the file; results equal one process."""
    path, _ = big_file
    size = os.path.getsize(path)
    out = _in_fresh_process(
        f"""
        import distributed, vdbflow
        if __name__ == "__main__":
            cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                               memory_limit="900MiB", dashboard_address=None)
            client = distributed.Client(cluster)
            before = client.run(rss, {path!r})
            dv = vdbflow.distribute({path!r}, client)
            after = client.run(rss, {path!r})
            client_after = rss({path!r})
            local = vdbflow.open({path!r})
            rng = np.random.default_rng(0)
            pts = rng.uniform(0, {SIDE * 8}, (400_000, 3))
            got = dv.sample_grad(pts, space="index").compute()
            want = local.sample_grad(pts, space="index")
            same = all(np.array_equal(got[k].values, want[k].values, equal_nan=True) for k in want.data_vars)
            sampled = client.run(rss, {path!r})
            stats = dv.stats()
            dv.close(); client.close(); cluster.close()
            out = dict(before=before, after=after, sampled=sampled, stats=stats, same=same,
                       client_after=client_after)
        """
    )
    assert out["same"]
    leaf = 512 * 12
    held: dict[str, int] = {}
    for s in out["stats"]:
        held[s["worker"]] = held.get(s["worker"], 0) + (s["owned_leaves"] + s["halo_leaves"]) * leaf
    assert len(held) == 2
    for worker, partition in held.items():
        grown = out["after"][worker]["VmRSS"] - out["before"][worker]["VmRSS"]
        assert partition * 0.9 <= grown <= partition + (48 << 20), (worker, grown, partition)
        assert out["after"][worker]["file"] < 8 << 20  # nothing of the file stays resident
        assert grown < 0.75 * size  # a worker that mapped the whole file would hold ~all of it
        # sampling 400,000 points in 1M-point chunks: the partition and one chunk's working set
        assert out["sampled"][worker]["VmRSS"] - out["before"][worker]["VmRSS"] <= partition + (160 << 20)
    # the client read the tree, not the values (the mapping is kept for the topology; its pages given back)
    assert out["client_after"]["file"] < 0.1 * size


def test_a_plan_that_cannot_fit_is_refused_before_anything_runs(big_file):
    import distributed

    path, _ = big_file
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, memory_limit="300MiB", dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        with pytest.raises(
            vdbflow.DistributionError, match=r"asked to hold 1 partition\(s\) of .* memory_limit of 300.0 MiB"
        ):
            vdbflow.distribute(path, client)
        tasks = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.tasks))
        assert not [k for k in tasks if str(k).startswith("vdbflow-partition")]  # nothing was submitted


def test_partition_tasks_no_worker_can_run_are_an_error_not_a_wait():
    """A partition task restricted to workers that are gone (as after a worker restart) is named in a
    DistributionError instead of being waited on forever."""
    import distributed

    from vdbflow.distribution.partitions import wait_for_partitions

    with (
        distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cl,
        distributed.Client(cl) as client,
    ):
        ok = client.submit(np.zeros, 3, key="vdbflow-partition-ok")
        stuck = client.submit(np.ones, 3, key="vdbflow-partition-stuck", workers=["tcp://192.0.2.1:9"])
        with pytest.raises(vdbflow.DistributionError, match="vdbflow-partition-stuck"):
            wait_for_partitions(client, [ok, stuck], poll=0.2)


@pytest.mark.slow
def test_save_streams_in_memory_and_memory_mapped_values(tmp_path):
    """``to_nvdb`` writes span by span: beside an in-memory volume's values it takes at most a fifth of
    them plus two spans (it used to take the grid twice more); beside values in a ``numpy.memmap`` (a
    volume built leaf block by leaf block) only the spans.  The files read back equal the values."""
    out = _in_fresh_process(
        f"""
        import vdbflow
        from vdbflow.core import tree
        from vdbflow.core.volume import Topology, Volume
        from vdbflow.io.mapped import RELEASE_BYTES, release_rows
        def reset_peak():  # Linux: VmHWM starts again from the current resident size
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        def peak():
            return [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
        keys = np.stack(np.meshgrid(*[np.arange(30)] * 3, indexing="ij"), -1).reshape(-1, 3)
        keys = keys[tree.tree_order(keys)]
        topo = Topology((keys * 8).astype(np.int32), np.full((len(keys), 8), np.iinfo(np.uint64).max, np.uint64))
        n = len(keys) * 512
        rng = np.random.default_rng(3)
        values = rng.standard_normal((n, 3)).astype(np.float32)
        vol = Volume.from_parts(topo, values, 0.0, None, False, "velocity", None)
        reset_peak()
        base = rss()["VmRSS"]
        vol.to_nvdb({str(tmp_path / "memory.nvdb")!r})
        grown_memory = peak() - base
        # leaf block by leaf block into a memory map (docs/nanovdb.md), then saved from it
        mm = np.memmap({str(tmp_path / "values.raw")!r}, np.float32, "w+", shape=(n, 3))
        for a in range(0, n, 4096 * 512):
            b = min(n, a + 4096 * 512)
            mm[a:b] = values[a:b]
            release_rows(mm, a, b)
        del values, vol
        mapped = Volume.from_parts(topo, mm, 0.0, None, False, "velocity", None)
        reset_peak()
        base = rss()["VmRSS"]
        mapped.to_nvdb({str(tmp_path / "mapped.nvdb")!r})
        grown_mapped = peak() - base
        out = dict(grown_memory=grown_memory, grown_mapped=grown_mapped, nbytes=n * 12, span=RELEASE_BYTES)
        """
    )
    values = np.random.default_rng(3).standard_normal((27000 * 512, 3)).astype(np.float32)
    for name in ("memory.nvdb", "mapped.nvdb"):
        back = vdbflow.open(str(tmp_path / name), checksum="strict")
        np.testing.assert_array_equal(back.value_rows(), values)
    assert out["grown_memory"] <= 0.2 * out["nbytes"] + 2 * out["span"], out
    assert out["grown_mapped"] <= 3 * out["span"], out


def _job(tmp_path, path: str, **cluster) -> dict:
    from test_run import base_config

    return base_config(
        tmp_path,
        volume={"path": path},
        points={"kind": "random", "count": 60_000, "chunk": 20_000, "seed": 5, "inside": "voxels", "space": "index"},
        sampling={"mode": "linear", "outputs": ["value", "jacobian"]},
        partitions=2,
        cluster={"kind": "local", "workers": 2, "dashboard": False, **cluster},
    )


def test_a_job_whose_partitions_cannot_fit_is_refused_naming_them(tmp_path, big_file):
    """The planner counts a partitioned volume's share per worker (it used to blame points.chunk after the
    workers were killed building the partitions): exit 2 naming ``partitions`` and the numbers."""
    from test_run import invoke, write_config

    path, _ = big_file
    cfg = write_config(tmp_path / "job.yaml", _job(tmp_path, path, memory_limit="300MiB"))
    result = invoke("run", str(cfg), "--dry-run")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "partitions" in text and "would hold about" in text and "(314.6 MB: cluster.memory_limit 300MiB)" in text
    assert "points.chunk" not in text


@pytest.mark.slow
def test_a_partitioned_job_on_the_file_equals_one_process(tmp_path, big_file):
    """``vdbflow run`` with volume.path and partitions, workers under a memory limit the volume does not fit
    twice: the stored values and Jacobians equal one process's at the stored points, bit for bit."""
    import xarray as xr
    from test_run import invoke, write_config

    path, vol = big_file
    cfg = write_config(tmp_path / "job.yaml", _job(tmp_path, path, memory_limit="900MiB"))
    result = invoke("run", str(cfg))
    assert result.exit_code == 0, result.output
    assert "2 / 2" in result.output  # partitions / workers
    ds = xr.open_zarr(tmp_path / "result.zarr")
    pts = np.stack([ds[c].values for c in "ijk"], axis=1)
    want = vol.sample_grad(pts, space="index")
    np.testing.assert_array_equal(ds["velocity"].values, want["velocity"].values)
    np.testing.assert_array_equal(ds["velocity_jacobian"].values, want["velocity_jacobian"].values)


def _spilling(dask_worker=None):
    manager = dask_worker.memory_manager
    return manager.memory_spill_fraction, manager.memory_target_fraction


@pytest.mark.slow
def test_spilling_is_turned_off_only_where_partitions_would_be_spilled(big_file, caplog):
    """Dask spills a worker's data to disk past 0.6-0.7 of its limit; a spilled partition is read back for
    every wave (6.6x slower on the 3.39 GB volume). Workers whose partitions and working set pass that
    keep them in memory (spilling off, pausing still on); roomy workers keep Dask's spilling."""
    import distributed

    path, vol = big_file
    for limit, tight in (("950MiB", True), ("2GiB", False)):
        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, memory_limit=limit, dashboard_address=None
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            caplog.clear()
            with caplog.at_level("WARNING", logger="vdbflow.distribute"), vdbflow.distribute(path, client) as dv:
                states = client.run(_spilling)
                pts = np.random.default_rng(4).uniform(0, SIDE * 8, (20_000, 3))
                got = dv.sample_grad(pts, space="index").compute()
            want = vol.sample_grad(pts, space="index")
            np.testing.assert_array_equal(got["velocity_jacobian"].values, want["velocity_jacobian"].values)
            if tight:
                assert all(s == (False, False) for s in states.values()), states
                assert "turned off Dask's spilling" in caplog.text
            else:
                assert all(s[0] and s[1] for s in states.values()), states
                assert "spilling" not in caplog.text
