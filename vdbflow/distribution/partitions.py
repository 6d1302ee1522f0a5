"""A volume cut into partitions on a Dask cluster: each partition's own and halo leaves read by a worker
from the file itself, or (an in-memory volume) its own leaves sent from the client or spilled to a
shared file and the halo leaves exchanged worker to worker; the wait for them that fails rather than
hangs; and the cluster a volume starts when it is given none.  Small pure functions, run as tasks;
:func:`build_partitions` submits them."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import logging
import multiprocessing
import os
import pickle
import sys
import tempfile
import uuid
from typing import Any

import dask
import numpy as np
from dask.sizeof import sizeof

from vdbflow.core import tree
from vdbflow.core.atomic import create_exclusive
from vdbflow.core.volume import Volume
from vdbflow.distribution.fit import check_fit, keep_in_memory, needs_no_spilling
from vdbflow.distribution.plan import PartitionPlan, leaf_stencil, leaf_weights, near_blocks, plan_partitions
from vdbflow.errors import ClusterError, DistributionError, VolumeError
from vdbflow.io.grid_ref import GridRef
from vdbflow.io.identity import FileIdentity
from vdbflow.io.location import is_url
from vdbflow.io.openvdb import is_openvdb


@sizeof.register(Volume)
def _sizeof_volume(volume: Volume) -> int:
    """The scheduler's size of a partition: what it weighs when it places or steals tasks that read it."""
    return volume.nbytes


DEFAULT_CHUNK = 1 << 20  # points per chunk when the points are a NumPy array
log = logging.getLogger("vdbflow.distribute")


def import_dask() -> tuple[Any, Any, Any]:
    try:
        import dask.array as da
        import distributed
    except ImportError as err:  # pragma: no cover - dask is a dependency of this module
        raise ImportError(
            "vdbflow.distribute needs dask and distributed: pip install 'dask[array]' distributed"
        ) from err
    return dask, da, distributed


# -- tasks (small pure functions) -------------------------------------------------------------------
class DistributedFile(FileIdentity):
    """What a distributed .nvdb file was when it was distributed: a partition read again later (its
    worker died) is read from that same file, or refused."""

    label = "the distributed file"
    seen = "it was distributed"


def read_leaves(ref: GridRef, leaves: np.ndarray) -> Volume:
    """The given leaves of an .nvdb or .vdb grid, read by the worker itself (an .nvdb file: the tree, then
    those leaves' values copied span by span from a mapping whose pages are given back as it goes, so the
    worker ends up holding those leaves and nothing of the file; a .vdb file's topology and those leaves'
    buffers), from the file ``ref``'s identity says it is (checked before and after), with the whole grid's
    periods (``ref.periodic``: a Periodicity, or False)."""
    vol = ref.read(leaves=leaves)
    assert isinstance(vol, Volume)  # distribute refused index grids
    return vol.contiguous()


def load_spilled(path: str, sha256: str | None = None) -> Volume:
    """A partition's own leaves, spilled to a file by the client (an in-memory volume made recoverable:
    a worker that dies with it is replaced by rerunning this task elsewhere).  The file's bytes must
    have the SHA-256 the client wrote (``sha256``) before they are unpickled: a file replaced in a spill
    directory others can write is refused, never run."""
    with open(path, "rb") as f:
        data = f.read()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise VolumeError(
            f"expected the spilled partition {path} as it was written (SHA-256 {sha256[:16]}...), found other "
            "bytes: someone replaced or changed it in the spill directory; it was not unpickled"
        )
    volume = pickle.loads(data)
    if not isinstance(volume, Volume):
        raise VolumeError(f"expected a spilled partition (a Volume) in {path}, got {type(volume).__name__}")
    return volume


def hold(volume: Volume) -> Volume:
    """A partition's own leaves carried in the task itself: the scheduler keeps them, and can rerun
    the task if its worker dies (the fallback when no directory is shared with every worker)."""
    return volume


def spill_pieces(
    pieces: list[Volume], client: Any, spill: str | os.PathLike | bool | None, digests: list[str]
) -> list[str] | None:
    """Write the pieces to files that every worker can read, or return None (no such directory); the
    SHA-256 of each file's bytes goes to ``digests``."""
    if spill is False:
        return None
    folder = tempfile.gettempdir() if spill is None or spill is True else os.fspath(spill)
    paths = [os.path.join(folder, f"vdbflow-partition-{uuid.uuid4().hex}.pkl") for _ in pieces]
    digests.clear()
    try:
        for piece, path in zip(pieces, paths, strict=True):
            data = pickle.dumps(piece, protocol=pickle.HIGHEST_PROTOCOL)
            digests.append(hashlib.sha256(data).hexdigest())  # checked before the file is unpickled
            with create_exclusive(path, 0o600) as f:  # new, not through a link, the owner's alone
                f.write(data)
        seen = client.run(os.path.isfile, paths[0]) if paths else {}
    except OSError as err:
        remove_files(paths)
        if spill is None:
            return None
        raise VolumeError(f"expected a writable spill directory {folder!r} for the partitions, got: {err}") from None
    if all(seen.values()):
        return paths
    remove_files(paths)
    if spill is None:  # the workers run elsewhere: carry the pieces in the tasks instead
        return None
    lost = sorted(w for w, ok in seen.items() if not ok)
    raise VolumeError(
        f"expected a spill directory {folder!r} that every worker can read, but {len(lost)} worker(s) "
        f"cannot see it: {lost[:3]}"
    )


def remove_files(paths: list[str] | tuple[str, ...]) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


def extract(volume: Volume, leaves: np.ndarray) -> Volume:
    """Some leaves of a partition, to be sent to a neighbour as its halo."""
    return volume.select_leaves(leaves)


def merge(owned: Volume, *halo_pieces: Volume) -> Volume:
    """A partition's own leaves and the halo leaves received from its neighbours, in tree order."""
    if not halo_pieces:
        return owned
    parts = (owned, *halo_pieces)
    origins = np.concatenate([v.topology.leaf_origins for v in parts])
    masks = np.concatenate([v.topology.masks for v in parts])
    order = tree.tree_order(origins >> tree.LEAF_SHIFT)
    C = owned.components
    if owned.index_layout:
        counts = np.bitwise_count(masks).sum(axis=1).astype(np.int64)
        data = np.concatenate([v.value_rows() for v in parts])
        starts = np.cumsum(counts) - counts
        rows = np.repeat(starts[order] - (np.cumsum(counts[order]) - counts[order]), counts[order]) + np.arange(
            int(counts.sum())
        )
        data = data[rows]
    else:
        data = np.concatenate([v.leaf_values for v in parts])[order].reshape(-1, C)
    t = owned.topology
    topo = t.with_leaves(origins[order], masks[order])
    return Volume(
        topo,
        data,
        owned.background_values,
        owned.tile_values,
        owned.value_type,
        owned.index_layout,
        owned.name,
        owned.component_names,
    )


def exchange_halos(
    client: Any, plan: PartitionPlan, leaf_count: int, owned: list, token: str, place: Any
) -> tuple[list, list]:
    """Partitions from futures of their own leaves: each owner extracts the leaves a neighbour needs, which
    travel worker to worker and are merged there.  Returns the partitions and their lineage."""
    from vdbflow.distribution.placement import PARTITION_PREFIX

    owner = np.empty(leaf_count, np.int64)
    local = np.empty(leaf_count, np.int64)
    for p, leaves in enumerate(plan.owned):
        owner[leaves] = p
        local[leaves] = np.arange(len(leaves))
    parts, lineage = [], list(owned)
    for p in range(plan.partitions):
        pieces = []
        for q in np.unique(owner[plan.halo[p]]):
            from_q = plan.halo[p][owner[plan.halo[p]] == q]
            pieces.append(client.submit(extract, owned[int(q)], local[from_q], pure=False, **place(int(q))))
        # stays with its own leaves; tasks that read it run there (placement.py)
        parts.append(client.submit(merge, owned[p], *pieces, key=f"{PARTITION_PREFIX}{token}-{p}", **place(p)))
        lineage.extend(pieces)
    return parts, lineage


def _balance(whole: Volume, P: int, balance: Any, client: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Leaf weights and partition shares for :func:`plan_partitions`: by leaves and, with ``balance``
    points (world space, (N, 3)), by where they fall; partition p's share follows the memory limit of the
    worker it is placed on (p mod W, by address) when the workers' limits differ."""
    weights = None
    if balance is not None:
        pts = np.asarray(balance, np.float64)
        if pts.ndim != 2 or pts.shape[1] != 3:
            raise VolumeError(f"expected balance points of shape (N, 3) in world space, got {pts.shape}")
        weights = leaf_weights(whole.topology, whole.transform.apply_inverse(pts))
    infos = client.scheduler_info(n_workers=-1)["workers"]
    limits = [int(infos[a].get("memory_limit") or 0) for a in sorted(infos)]
    shares = None
    if limits and all(limits) and len(set(limits)) > 1:
        shares = np.array([limits[p % len(limits)] / len(range(p % len(limits), P, len(limits))) for p in range(P)])
    return weights, shares


def wait_for_partitions(client: Any, parts: list, poll: float = 2.0) -> None:
    """Wait until every partition is built; the first partition's own error (an unreadable file, a worker
    killed while reading: ``KilledWorker``) is raised here, and tasks the scheduler can no longer place
    (``no-worker`` while workers are up) are a :class:`DistributionError` rather than a wait forever."""
    _, _, distributed = import_dask()
    pending = list(parts)
    while pending:
        try:
            done, not_done = distributed.wait(pending, timeout=poll)
        except TimeoutError:
            done, not_done = [f for f in pending if f.done()], [f for f in pending if not f.done()]
        for f in done:
            if f.status == "error":
                f.result()  # raises the partition's own error here, not at sampling
        pending = list(not_done)
        if pending:
            stuck = client.run_on_scheduler(_unrunnable, [f.key for f in pending])
            if stuck:
                raise DistributionError(
                    f"expected the partitions to be built, but {len(stuck)} of their tasks cannot run on any "
                    f"worker now up (the workers they needed left): {stuck[:3]}; distribute the volume again"
                )


def _unrunnable(keys: list, dask_scheduler: Any = None) -> list[str]:
    """The keys (and their dependencies) in the scheduler's ``no-worker`` state while it has workers."""
    s = dask_scheduler
    if not s.workers:
        return []  # no worker at all (yet): Dask waits for one, as it should
    out = []
    for key in keys:
        ts = s.tasks.get(key)
        for t in (ts, *(ts.dependencies if ts is not None else ())):
            if t is not None and t.state == "no-worker":
                out.append(f"{t.key} (restricted to {sorted(t.worker_restrictions or ())})")
    return out


def resolve_client(client: Any = None) -> tuple[Any, bool]:
    """``client``; else the current client (``distributed.get_client``); else the client of a new
    embedded ``LocalCluster`` of processes sized to the machine.  Returns it and whether it is new
    (then its owner closes it, and its cluster, with :func:`close_client`)."""
    if client is not None:
        return client, False
    _, _, distributed = import_dask()
    try:
        return distributed.get_client(), False
    except ValueError:  # no client in this process
        refuse_in_a_worker_import()
        cluster = distributed.LocalCluster(
            n_workers=os.cpu_count() or 1, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        )
        return distributed.Client(cluster), True


MAIN_GUARD_HINT = (
    'in a script, put the code that starts vdbflow\'s cluster under `if __name__ == "__main__":` '
    "(Dask's worker processes import the main module; unguarded, each would run the script again)"
)


def _guarded_line(path: str, line: int) -> bool:
    """Whether line ``line`` of the script at ``path`` lies under an ``if __name__ == "__main__":``."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return True  # cannot tell: assume the script knows
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.lineno <= line <= (node.end_lineno or node.lineno):
            names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            texts = {c.value for c in ast.walk(node.test) if isinstance(c, ast.Constant)}
            if "__name__" in names and "__main__" in texts:
                return True
    return False


def refuse_in_a_worker_import() -> None:
    """Refuse to start a cluster of worker processes from the top level of a script that is not under
    ``if __name__ == "__main__":``: each worker process imports the main module (Python's spawn start
    method, Dask's default), so the script would start clusters again in every worker, and the first one
    would fail after a storm of tracebacks.  Interactive sessions, notebooks and ``python -c`` are fine."""
    main = sys.modules.get("__main__")
    if multiprocessing.parent_process() is not None and getattr(main, "__name__", "") == "__mp_main__":
        raise ClusterError(f"expected no cluster to start while a worker process imports the script: {MAIN_GUARD_HINT}")
    path = getattr(main, "__file__", None)
    if not path or not os.path.isfile(path):
        return
    frame = inspect.currentframe()
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"
    ):
        frame = frame.f_back
    if frame is not None and os.path.abspath(frame.f_code.co_filename) == os.path.abspath(path):
        if not _guarded_line(path, frame.f_lineno):
            raise ClusterError(
                f'expected the script {path} to start vdbflow\'s cluster under `if __name__ == "__main__":`, '
                f"found the call at its top level (line {frame.f_lineno}): Dask's worker processes import the "
                "main module, so each would run the script again"
            )


def close_client(client: Any) -> None:
    """Close a client that :func:`resolve_client` started, and its cluster."""
    cluster = client.cluster
    client.close()
    if cluster is not None:
        cluster.close()


def _open_source(source: Volume | GridRef) -> tuple[Volume, GridRef | None]:
    """The whole volume as the client needs it, and the grid a worker reads its leaves of (None: an
    in-memory volume).  A .nvdb file: only the tree is read (the values stay unread in the mapping, the
    checksum's head half is checked); a .vdb file: the grid is read."""
    if isinstance(source, Volume):
        return source, None
    local_nvdb = not is_url(source.path) and os.path.isfile(source.path) and not is_openvdb(source.path)
    whole = source.read(**({"checksum": "head"} if local_nvdb else {}))
    if not isinstance(whole, Volume):
        raise VolumeError("expected a value grid to distribute; attach values to index grids with with_data")
    # the workers' leaves take the whole grid's periods (their own box would give others)
    return whole, dataclasses.replace(source, periodic=whole.periodic or False)


def _checked_plan(
    whole: Volume, plan: PartitionPlan | None, partitions: int | None, halo: int, balance: Any, client: Any
) -> PartitionPlan:
    """The plan made here (balanced as :func:`_balance` says), or the plan given, checked against the volume."""
    if plan is None:
        P = partitions or max(1, len(client.scheduler_info()["workers"]))
        return plan_partitions(whole.topology, P, halo, *_balance(whole, P, balance, client))
    leaves = sum(len(o) for o in plan.owned)
    if (
        leaves != whole.leaf_count
        or (partitions is not None and partitions != plan.partitions)
        or (plan.stencil != leaf_stencil(halo))
    ):
        raise VolumeError(
            f"expected a plan of this volume's {whole.leaf_count:,} leaves"
            + (f" in {partitions} partitions" if partitions is not None else "")
            + f" for halo {halo} (leaf stencil {leaf_stencil(halo)}), got one of {leaves:,} leaves in "
            f"{plan.partitions} partitions with leaf stencil {plan.stencil}"
        )
    return plan


def _fit_workers(whole: Volume, plan: PartitionPlan, client: Any) -> None:
    """Refuse a plan a worker cannot hold (fit.py), and keep the partitions of tight workers in memory."""
    rows_per_leaf = tree.LEAF_VOXELS
    if whole.index_layout:  # the active voxels' rows only
        rows_per_leaf = -(-whole.topology.value_count // max(1, whole.leaf_count))
    value_bytes = rows_per_leaf * whole.components * whole.dtype.itemsize
    infos = client.scheduler_info(n_workers=-1)["workers"]
    tight = [s.address for s in check_fit(plan, value_bytes, infos) if needs_no_spilling(s, infos)]
    if tight:  # spilled partitions would be read back from disk by every wave
        was_on = client.run(keep_in_memory, workers=tight)
        if any(was_on.values()):
            log.warning(
                "turned off Dask's spilling to disk on %d worker(s) (%s): their partitions and chunks in flight pass "
                "its spill threshold, and a spilled partition would be read back from disk by every wave",
                len(tight),
                ", ".join(tight[:3]),
            )


def _volume_fields(whole: Volume, plan: PartitionPlan, client: Any) -> dict[str, Any]:
    """What a DistributedVolume keeps of the whole volume on the client: an empty template, the tree and
    the background shortcut table (none on a periodic volume: every point there has data within a period)."""
    near = None if whole.periodic is not None else near_blocks(whole.topology, plan.stencil, plan.router)
    return {
        "template": whole.select_leaves(np.zeros(0, np.int64)),
        "leaf_bytes": 512 * whole.components * whole.dtype.itemsize + 64,
        "near": near,
        "template_leaf_count": whole.leaf_count,
        "leaf_value_counts": np.bitwise_count(whole.topology.masks).sum(axis=1).astype(np.int64),
        "topology": whole.topology,
        "workers": max(1, len(client.scheduler_info(n_workers=-1)["workers"])),
    }


def build_partitions(
    source: Volume | GridRef,
    client: Any,
    owns: bool,
    partitions: int | None,
    halo: int,
    spill: str | os.PathLike | bool | None,
    plan: PartitionPlan | None,
    balance: Any = None,
) -> dict[str, Any]:
    """The partitions of ``source`` on ``client``'s cluster (``owns``: started for this volume) -
    own and halo leaves - as the fields of the :class:`DistributedVolume` that holds them
    (:func:`vdbflow.distribute`)."""
    from vdbflow.distribution.placement import PARTITION_PREFIX, register

    register(client)
    whole, ref = _open_source(source)
    plan = _checked_plan(whole, plan, partitions, halo, balance, client)
    P = plan.partitions
    _fit_workers(whole, plan, client)
    # spread the partitions over the workers round-robin (loosely: they are rebuilt elsewhere on loss)
    addresses = sorted(client.scheduler_info(n_workers=-1)["workers"])

    def place(p: int) -> dict[str, Any]:
        return {"workers": [addresses[p % len(addresses)]], "allow_other_workers": True} if addresses else {}

    token = uuid.uuid4().hex
    spilled: list[str] | None = None
    if ref is not None:
        # a file: each worker reads its own leaves and its halo leaves itself, in one bounded pass over
        # those leaves' bytes (nothing else of the file stays mapped), into the partition it keeps
        parts = [
            client.submit(
                read_leaves,
                ref,
                np.union1d(plan.owned[p], plan.halo[p]),
                key=f"{PARTITION_PREFIX}{token}-{p}",
                **place(p),
            )
            for p in range(P)
        ]
        lineage: list = []
    else:
        # an in-memory volume: its pieces sent from the client (spilled to files, or inside the tasks),
        # then the halo leaves exchanged worker to worker
        pieces = [whole.select_leaves(plan.owned[p]) for p in range(P)]
        digests: list[str] = []
        spilled = spill_pieces(pieces, client, spill, digests)
        if spilled is not None:
            owned = [client.submit(load_spilled, spilled[p], digests[p], pure=False, **place(p)) for p in range(P)]
        else:
            owned = [client.submit(hold, pieces[p], pure=False, **place(p)) for p in range(P)]
        del pieces
        parts, lineage = exchange_halos(client, plan, whole.leaf_count, owned, token, place)
    wait_for_partitions(client, parts)
    return {
        "client": client,
        "plan": plan,
        "partitions": parts,
        "halo": halo,
        "owns_cluster": owns,
        "lineage": lineage,
        "spilled": tuple(spilled or ()),
        **_volume_fields(whole, plan, client),
    }
