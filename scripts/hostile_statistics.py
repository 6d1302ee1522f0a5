"""Hostile statistics specs (issue 49 rows 4 and 17), for scripts/fault_campaign.py's ``statistics`` kind and
tests/test_hostile_statistics.py: calls of the statistics doors (``vdbflow.histogram``, ``moments``,
``conditional_mean``, ``statistics``) with arguments drawn from pools of good and hostile values (bins whose
product overflows, ranges of the wrong shape, ``normalize="yes"``, points of the wrong shape, ...), and specs
of the kernels' reductions with fields overwritten at random, handed to the kernels directly.

The oracle: a door's call returns a Dataset whose counts cover every point (in a bin, outside or NaN), or it
raises one of vdbflow's own exceptions (``VdbflowError``); the kernels' spec check refuses a mutated spec with
a ``ValueError`` or reduces it inside its arrays.  Anything else (a raw ``TypeError``, ``KeyError``,
``OverflowError``, numpy's ``ValueError``, a crash) is a defect.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NAN, INF = float("nan"), float("inf")

OF = [
    "q_criterion",
    ["q_criterion", "r_invariant"],
    ["value[u]", "value[v]", "value[w]"],
    "jacobian[u,x]",
    ("vorticity[x]",),
    None,
    5,
    [],
    ["q_criterion"] * 4,
    "nope",
    b"q_criterion",
    ["q_criterion", None],
    "jacobian[9,9]",
    {"of": 1},
    np.array(["q_criterion", "r_invariant"]),
    "value[",
    "vorticity",
    1.5,
]
BINS = [
    64,
    4,
    0,
    -3,
    1.5,
    2.0,
    None,
    "ab",
    "8",
    True,
    np.int64(5),
    NAN,
    INF,
    2**21,
    2**22,
    2**40,
    10**30,
    [4, 4],
    [3, 2, 2],
    [0.0, 1.0, 2.0],
    [[0.0, 1.0], [0.0, 1.0, 2.0]],
    [2.0, 1.0],
    np.linspace(0.0, 1.0, 5),
    [],
    [3, "a"],
    (2**22,) * 3,
    (2**21,) * 3,
    [2**12, 2**12],
    {"x": 1},
    [NAN, 1.0],
    [[1, 2], [3, [4]]],
    [8],
    np.array([[0.0, 1.0]]),
    1 + 2j,
]
RANGE = [
    None,
    (0, 1),
    (-3, 3),
    (1, 0),
    (0, 0),
    "ab",
    (0,),
    (0, 1, 2),
    [(0, 1), (0, 1)],
    [(0, 1)] * 3,
    [(0, 1), (1, 0)],
    (NAN, 1),
    (0, INF),
    ("a", "b"),
    5,
    [(0, 1), None],
    ((0, 1),),
    np.array([0.0, 1.0]),
    {"lo": 0},
    (-1e308, 1e308),
    (0, 1e-300),
    [(0, 1), (0, 1, 2)],
    np.array([[0.0, 1.0], [0.0, 2.0]]),
    (1 + 1j, 2),
]
WEIGHTS = [None, None, "value[u]", "q_criterion", 5, "nope", ["q_criterion"], b"x"]
NORMALIZE = [
    False,
    False,
    True,
    1.0,
    0.5,
    "yes",
    -1,
    0,
    NAN,
    INF,
    None,
    np.True_,
    1j,
    [1],
    1e-300,
    1e300,
    np.float32(2),
]
MODE = ["linear", "linear", "lag4", "closest", "cubic??", 5, None]
SPACE = ["world", "world", "index", "nope", None, 3]
JACOBIAN_SPACE = [None, None, "index", "world", 3, "nope"]
DEVICE = ["cpu", "cpu", "gpu?", None, 0]
WAVE = [None, None, 0, -1, "x", 2**70]
ORDER = [1, 2, 3, 4, 4, 0, 5, "2", None, 2.5, True, np.int64(3), -1]


def _points(rng: np.random.Generator, kind: int) -> Any:
    good = rng.uniform(1.0, 5.0, (int(rng.integers(1, 60)), 3))
    return [
        good,
        good,
        good,
        good.reshape(-1, 1, 3),
        good[:, :2],
        None,
        "abc",
        np.zeros((0, 3)),
        np.full((4, 3), NAN),
        good.astype(np.int32),
        good.astype(np.complex128),
        good.tolist(),
        good[0],
        np.full((3, 3), 1e300),
        np.array([[1.0, 2.0, "x"]], dtype=object),
        good.astype(np.float32),
    ][kind]


def _pick(rng: np.random.Generator, pool: list, good: int = 0) -> Any:
    """An entry of ``pool``; with ``good``, one of its first ``good`` entries (the valid ones) half the time."""
    if good and rng.random() < 0.5:
        return pool[int(rng.integers(good))]
    return pool[int(rng.integers(len(pool)))]


def door_call(rng: np.random.Generator) -> tuple[str, dict[str, Any]]:
    """One call of a statistics door: its name and keyword arguments (``source`` left out)."""
    door = _pick(rng, ["histogram", "histogram", "moments", "conditional_mean", "statistics", "statistics"])
    points = _points(rng, int(rng.integers(16)) if rng.random() < 0.4 else 0)
    common = {"points": points}
    for name, pool in (
        ("mode", MODE),
        ("space", SPACE),
        ("jacobian_space", JACOBIAN_SPACE),
        ("device", DEVICE),
        ("wave", WAVE),
    ):
        if rng.random() < 0.08:
            common[name] = _pick(rng, pool)
    if door == "histogram":
        kw = {"of": _pick(rng, OF, 5), "bins": _pick(rng, BINS, 2), "range": _pick(rng, RANGE, 3)}
        if rng.random() < 0.3:
            kw["weights"] = _pick(rng, WEIGHTS)
        if rng.random() < 0.4:
            kw["normalize"] = _pick(rng, NORMALIZE, 5)
    elif door == "moments":
        kw = {"of": _pick(rng, OF, 5)}
        if rng.random() < 0.5:
            kw["order"] = _pick(rng, ORDER, 5)
    elif door == "conditional_mean":
        kw = {
            "of": _pick(rng, OF, 5),
            "given": _pick(rng, OF, 5),
            "bins": _pick(rng, BINS, 2),
            "range": _pick(rng, RANGE, 3),
        }
    else:
        kw = {}
        if rng.random() < 0.7:
            spec: Any = {"of": _pick(rng, OF, 5), "bins": _pick(rng, BINS, 2), "range": _pick(rng, RANGE, 3)}
            if rng.random() < 0.2:
                spec["weights"] = _pick(rng, WEIGHTS)
            if rng.random() < 0.1:
                spec["colour"] = "red"
            kw["histograms"] = _pick(rng, [[spec], [spec, spec], spec, [5], "q_criterion", None])
        if rng.random() < 0.5:
            kw["moments"] = _pick(rng, [["q_criterion"], "q_criterion", [5], None, 5, [None], ["nope"], [[1]]])
        if rng.random() < 0.4:
            cond: Any = {"of": _pick(rng, OF, 5), "given": _pick(rng, OF, 5), "bins": _pick(rng, BINS, 2)}
            cond["range"] = _pick(rng, RANGE, 3)
            if rng.random() < 0.1:
                cond.pop("given")
            kw["conditional"] = _pick(rng, [[cond], cond, [None], "x"])
        if rng.random() < 0.3:
            kw["normalize"] = _pick(rng, NORMALIZE, 5)
        if rng.random() < 0.05:
            kw["stats"] = _pick(rng, ["x", 5, {"histograms": []}])
    return door, {**common, **kw}


def describe(door: str, kwargs: dict[str, Any]) -> str:
    shown = {k: (f"array{np.shape(v)} {getattr(v, 'dtype', '')}" if k == "points" else v) for k, v in kwargs.items()}
    return f"{door}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"[:400]


def check_result(door: str, kwargs: dict[str, Any], ds: Any) -> None:
    """A door's Dataset against its points: each histogram's and binned mean's counts cover every point."""
    import xarray as xr

    if not isinstance(ds, xr.Dataset):
        raise AssertionError(f"{describe(door, kwargs)} returned {type(ds).__name__}, not a Dataset")
    n = int(np.prod(np.shape(np.asarray(kwargs["points"], dtype=object))[:-1]))
    for name in ds.data_vars:
        if (name == "count" or name.endswith("_count")) and "quantity" not in ds[name].dims:
            if name.startswith("count_") or name == "nan_count":
                continue
            stem = name[: -len("count")]
            total = int(ds[name].sum()) + int(ds[f"{stem}outside"]) + int(ds[f"{stem}nan"])
            if total != n:
                raise AssertionError(f"{describe(door, kwargs)}: {name} covers {total} of {n} points")
    if "count" in ds.data_vars and "quantity" in ds.dims:
        counted = ds["count"].values + ds["nan_count"].values
        if not np.all(counted == n):
            raise AssertionError(f"{describe(door, kwargs)}: moments count {counted.tolist()} of {n} points")


def call_door(vol: Any, door: str, kwargs: dict[str, Any]) -> str:
    """``"same"`` (a checked Dataset) or ``"refused"`` (a VdbflowError); anything else propagates."""
    import vdbflow
    from vdbflow.errors import VdbflowError

    try:
        ds = getattr(vdbflow, door)(vol, **kwargs)
    except VdbflowError:
        return "refused"
    check_result(door, kwargs, ds)
    return "same"


def mutated_spec(rng: np.random.Generator, vol: Any) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray, int]:
    """A valid reduction's spec with one to three fields overwritten by hostile numbers, its edges, arrays
    and channel count (the arrays as the valid spec sized them, or shrunk)."""
    from vdbflow.core import kernel
    from vdbflow.ops.reductions import Conditional, Histogram, Statistics, quantity

    q = [quantity(n, vol, "world") for n in ("q_criterion", "r_invariant", "value[u]")]
    e = np.linspace(-1.0, 1.0, 5)
    stats = Statistics(
        [Histogram((q[0], q[1]), (e, e), q[2] if rng.random() < 0.5 else None)], [q[2]], [Conditional(q[2], q[0], e)]
    )
    spec, edges, empty, _ = stats.layout()
    s = np.frombuffer(spec, kernel.REDUCE_SPEC_DTYPE).copy()
    hostile = [0, -1, 1, 2, 3, 2**21, 2**22, 2**30, 2**31 - 1, -(2**31), 2**62, 2**63 - 1, -(2**63), 7, 31, 33]
    for _ in range(int(rng.integers(1, 4))):
        field = _pick(rng, list(kernel.REDUCE_SPEC_DTYPE.names))
        flat = s[field].reshape(-1) if s[field].ndim else s[field]
        info = np.iinfo(s.dtype[field].base)
        value = int(np.clip(_pick(rng, hostile), info.min, info.max))
        flat[int(rng.integers(flat.size))] = value
    ints, reals = empty.ints, empty.reals
    if rng.random() < 0.2:
        ints = ints[: int(rng.integers(len(ints) + 1))].copy()
    return s.tobytes(), edges, ints, reals, len(stats.channels())


DOOR_CALLS_A_CASE = 10
SPECS_A_CASE = 2


def case(rng: np.random.Generator) -> tuple[str, str]:
    """One campaign case: ``DOOR_CALLS_A_CASE`` door calls and ``SPECS_A_CASE`` mutated kernel specs on a
    16^3 Taylor-Green volume.  ``"same"`` where every call gave a checked Dataset and every spec was reduced,
    ``"refused"`` where some were refused (vdbflow's errors, the kernels' ValueError); a wrong Dataset raises
    AssertionError, any other exception propagates (the campaign's "error")."""
    from vdbflow import _core
    from vdbflow.synthetic import flow_volume, taylor_green

    vol = flow_volume(taylor_green(), 16)
    doors = {"same": 0, "refused": 0}
    for _ in range(DOOR_CALLS_A_CASE):
        door, kwargs = door_call(rng)
        doors[call_door(vol, door, kwargs)] += 1
    specs = {"same": 0, "refused": 0}
    for _ in range(SPECS_A_CASE):
        spec, edges, ints, reals, channels = mutated_spec(rng, vol)
        try:
            _core.reduce_features(spec, np.full((5, channels), 0.25), edges, ints, reals)
            specs["same"] += 1
        except ValueError:
            specs["refused"] += 1
    detail = (
        f"door calls: {doors['same']} checked results, {doors['refused']} refused; "
        f"kernel specs: {specs['same']} reduced, {specs['refused']} refused"
    )
    return ("refused" if doors["refused"] or specs["refused"] else "same"), detail
