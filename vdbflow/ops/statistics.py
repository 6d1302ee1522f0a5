"""``vdbflow.histogram``, ``vdbflow.moments``, ``vdbflow.conditional_mean`` and ``vdbflow.statistics`` (all
of them in one pass): statistics of sampled quantities, reduced where the points are sampled
(:mod:`vdbflow.ops.reductions`, kernels/vdbflow/reduce.h), returned as small xarray Datasets.

The source is a :class:`~vdbflow.core.volume.Volume` (NumPy, CuPy or Dask points) or a
:class:`~vdbflow.distribution.volume.DistributedVolume` (points routed to the partitions, reduced by chunk
on the workers); Dask points are reduced chunk by chunk on the workers and the chunks' partials merged in a
fixed tree over the chunks' order, so a result never depends on the workers, threads or partitions.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.core import kernel, outputs
from vdbflow.core.volume import Volume
from vdbflow.devices import run
from vdbflow.errors import SamplingError
from vdbflow.ops.chunk_graph import map_chunks, reduce_chunks
from vdbflow.ops.reductions import (
    JACOBIAN,
    VALUE,
    Conditional,
    Histogram,
    Partial,
    Statistics,
    edges_of,
    features_of,
    merge,
    names_of,
    quantity,
    statistics_from,
)
from vdbflow.ops.request import SampleRequest
from vdbflow.ops.results import as_numpy, is_dask
from vdbflow.ops.sampling import prepare_points


def statistics_request(
    stats: Statistics, mode: str, space: str, jacobian_space: str | None, device: str
) -> SampleRequest:
    jacobian, derived = stats.needs()
    outputs = ("value", "jacobian", *derived) if (jacobian or derived) else ("value",)
    return SampleRequest(mode, outputs, space, jacobian_space, device=device)


def chunk_partial(
    vol: Any, points: Any, spec: bytes, edges: np.ndarray, empty: Partial, request: SampleRequest
) -> Partial:
    """One set of points (N, 3) reduced in the kernels' pass into a copy of ``empty``."""
    out = Partial(empty.ints.copy(), empty.reals.copy())
    device = request.device_for(points)
    pts = prepare_points(vol, points, device, request.space)
    if len(pts):
        run(
            "sample_reduce",
            vol.kernel_arrays(),
            pts,
            request.mode_code,
            request.space == "world",
            request.jacobian_space == "world",
            spec,
            edges,
            out.ints,
            out.reals,
            request.point_order,
            device=device,
        )
    return out


def _features_partial(
    spec: bytes, edges: np.ndarray, empty: Partial, stats: Statistics, C: int, names, *arrays
) -> Partial:
    """One chunk's sampled arrays (``names``: their outputs) reduced into a copy of ``empty``."""
    out = Partial(empty.ints.copy(), empty.reals.copy())
    features = features_of(stats, dict(zip(names, arrays, strict=True)), C)
    if len(features):
        run("reduce_features", spec, features, edges, out.ints, out.reals, device="cpu")
    return out


# a Volume sent to a distributed client's workers, by client id: the Future its Dask-point tasks share
_SENT: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _on_workers(vol: Any) -> Any:
    """``vol`` for the tasks of a Dask-point reduction: where the scheduler Dask will use is a distributed
    client, a Future of ``vol`` scattered to every worker once (kept while ``vol`` lives and reused by later
    calls), so no graph carries the volume (distributed warned "Sending large graph" on every call); else
    ``vol`` itself (the threaded scheduler shares it in memory)."""
    import dask

    if not isinstance(vol, Volume):  # a series, a Future already: as given
        return vol
    client = getattr(dask.base.get_scheduler(), "__self__", None)
    try:
        from distributed import Client
    except ImportError:
        return vol
    if not isinstance(client, Client) or client.status != "running":
        return vol
    sent = _SENT.setdefault(vol, {})
    future = sent.get(client.id)
    if future is None or future.status != "finished":
        future = sent[client.id] = client.scatter(vol, broadcast=True, hash=False)
    return future


STATISTICS_KEY = "vdbflow-statistics"  # task-key prefix of the chunk tasks of statistics at Dask points


def lazy_partial(
    source: Any, points: Any, stats: Statistics, request: SampleRequest, wave: int | None = None, name: str = ""
) -> Any:
    """``stats`` of ``source`` at points (N, 3) or (..., 3), one partial: a Volume with NumPy or CuPy points in
    one call of the kernels (a :class:`Partial`, now); Dask points, or a DistributedVolume's points, a Delayed
    of one task a chunk (named ``name``, default ``STATISTICS_KEY``) merged in a fixed tree over the chunks'
    order (:func:`vdbflow.ops.chunk_graph.reduce_chunks`), so that the result never depends on the workers."""
    template = getattr(source, "template", source)
    request.for_value_type(template.value_type)
    if not template.value_type.is_float:
        raise SamplingError(f"expected float data for statistics, got {template.value_type.name}")
    spec, edges, empty, _ = stats.layout()
    shape = getattr(points, "shape", np.shape(points))
    if len(shape) < 1 or shape[-1] != 3:
        raise SamplingError(f"expected points of shape (N, 3) or (..., 3), got {tuple(shape)}")
    if hasattr(source, "template"):  # a DistributedVolume: routed, one partial a chunk of points
        names = request.outputs
        arrays = source.sample_arrays(request, points.reshape(-1, 3) if len(shape) != 2 else points, wave)
        outputs = [arrays[n] for n in names]
        args: tuple = (_features_partial, spec, edges, empty, stats, template.components, names, *outputs)
    elif is_dask(points):
        args = (chunk_partial, _on_workers(source), points.reshape(-1, 3), spec, edges, empty, request)
    else:
        flat = points if hasattr(points, "__cuda_array_interface__") else as_numpy(points)
        return chunk_partial(source, flat.reshape(-1, 3), spec, edges, empty, request)
    parts = map_chunks(*args, name=name or STATISTICS_KEY)
    return reduce_chunks(parts, functools.partial(merge, spec, edges))


def reduce(source: Any, points: Any, stats: Statistics, request: SampleRequest, wave: int | None = None) -> Partial:
    """:func:`lazy_partial`, computed here (on a DistributedVolume's client, else Dask's scheduler)."""
    partial = lazy_partial(source, points, stats, request, wave)
    if isinstance(partial, Partial):
        return partial
    client = getattr(source, "client", None)
    return client.compute(partial).result() if client is not None else partial.compute()


# ---- results ----------------------------------------------------------------------------------------------


def _bin_dim(ds: xr.Dataset, q: Any, e: np.ndarray, taken: Sequence[str] = ()) -> str:
    """The dim of quantity q's bins with edges e in ``ds`` (added with its centres and CF bounds):
    ``<quantity>_bin``, or ``<quantity>_bin_2``, ... where other bins of the same quantity came first (or the
    same item already bins this quantity on a dim of ``taken``)."""
    n = 1
    while True:
        dim = f"{q.label}_bin" + ("" if n == 1 else f"_{n}")
        bounds = np.stack([e[:-1], e[1:]], axis=1)
        if dim in taken:
            n += 1
            continue
        if dim not in ds.variables:
            ds.coords[dim] = xr.Variable(dim, (e[:-1] + e[1:]) / 2, {**q.attrs, "bounds": f"{dim}_bounds"})
            ds.coords[f"{dim}_bounds"] = xr.Variable((dim, "bound"), bounds)
            return dim
        if ds[f"{dim}_bounds"].shape == bounds.shape and np.array_equal(ds[f"{dim}_bounds"].values, bounds):
            return dim
        n += 1


def _moments_vars(fields: np.ndarray, labels: list[str]) -> dict[str, Any]:
    n, nan, mean, m2, m3, m4, lo, hi = fields.T
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(n > 0, m2 / n, np.nan)
        skew = np.where(m2 > 0, np.sqrt(n) * m3 / m2**1.5, np.nan)
        flat = np.where(m2 > 0, n * m4 / (m2 * m2), np.nan)
    dims = ("quantity",)
    empty = n == 0
    return {
        "count": (dims, n.astype(np.int64), {"long_name": "finite values"}),
        "nan_count": (dims, nan.astype(np.int64), {"long_name": "NaN values (left out)"}),
        "mean": (dims, np.where(empty, np.nan, mean)),
        "variance": (dims, var, {"long_name": "population variance M2 / n"}),
        "skewness": (dims, skew, {"long_name": "skewness sqrt(n) M3 / M2^1.5"}),
        "flatness": (dims, flat, {"long_name": "flatness (kurtosis) n M4 / M2^2"}),
        "min": (dims, np.where(empty, np.nan, lo)),
        "max": (dims, np.where(empty, np.nan, hi)),
        "m2": (dims, m2, {"long_name": "central sum of squares"}),
        "m3": (dims, m3, {"long_name": "central sum of cubes"}),
        "m4": (dims, m4, {"long_name": "central sum of fourth powers"}),
    }


def _unique(ds: xr.Dataset, key: str, pattern: str) -> str:
    """``key``, or ``key_2``, ``key_3``, ... : the first whose variable ``pattern.format(key)`` is not yet in
    ``ds`` (two items of the same quantities keep a variable each)."""
    n, out = 1, key
    while pattern.format(out) in ds.variables:
        n += 1
        out = f"{key}_{n}"
    return out


def dataset(stats: Statistics, partial: Partial, where: dict) -> xr.Dataset:
    """The named result of a partial: per histogram ``<key>_count`` (int64, one ``<quantity>_bin`` dim per
    quantity, bin centres and CF bounds), ``<key>_outside``, ``<key>_nan`` and ``<key>_weighted``; moments on
    a ``quantity`` dim; binned means ``<of>_mean_by_<given>``, ``<of>_variance_by_<given>`` and their counts.
    (:func:`pdf` makes a histogram's probability density.)"""
    ds = xr.Dataset()
    for h, (counts, sums, shape) in zip(stats.histograms, where["hist"], strict=True):
        key = _unique(ds, "_".join(q.label for q in h.of), "{}_count")
        dims: tuple[str, ...] = ()
        for q, e in zip(h.of, h.edges, strict=True):
            dims += (_bin_dim(ds, q, e, dims),)
        size = int(np.prod(shape))
        count = partial.ints[counts : counts + size].reshape(shape)
        title = " and ".join(q.name for q in h.of)
        ds[f"{key}_count"] = (dims, count, {"long_name": f"points by bin of {title}"})
        ds[f"{key}_outside"] = ((), partial.ints[counts + size], {"long_name": "points outside the bins"})
        ds[f"{key}_nan"] = ((), partial.ints[counts + size + 1], {"long_name": "points with a NaN quantity"})
        if h.weight is not None:
            ds[f"{key}_weighted"] = (dims, partial.reals[sums : sums + size].reshape(shape), {"weight": h.weight.name})
    if stats.moments:
        fields = np.stack([partial.reals[m : m + kernel.MOMENT_FIELDS] for m in where["moments"]])
        labels = [q.label for q in stats.moments]
        ds = ds.assign_coords(quantity=("quantity", labels))
        for name, var in _moments_vars(fields, labels).items():
            ds[name] = var
    for c, (counts, at, bins) in zip(stats.conditionals, where["cond"], strict=True):
        dim = _bin_dim(ds, c.given, c.edges)
        t = partial.reals[at : at + 3 * bins].reshape(bins, 3)
        n = partial.ints[counts : counts + bins]
        by = _unique(ds, f"{c.of.label}_by_{c.given.label}", "count_{}")
        ds[f"count_{by}"] = (dim, n, {"long_name": f"points by bin of {c.given.name} with a finite {c.of.name}"})
        of_by = by.replace("_by_", "_{}_by_", 1)  # <of>_mean_by_<given>[_n]
        ds[of_by.format("mean")] = (dim, np.where(n > 0, t[:, 1], np.nan), c.of.attrs)
        with np.errstate(invalid="ignore", divide="ignore"):
            ds[of_by.format("variance")] = (dim, np.where(n > 0, t[:, 2] / t[:, 0], np.nan))
        ds[f"outside_{by}"] = ((), partial.ints[counts + bins])
        ds[f"nan_{by}"] = ((), partial.ints[counts + bins + 1])
    return ds


def lazy_dataset(stats: Statistics, partial: Any, where: dict) -> xr.Dataset:
    """:func:`dataset` of a lazy partial (a Delayed): the same names, dims, coordinates and attrs, each variable
    a Dask array of the one task that names the partial, computed where the caller computes the rest."""
    import dask
    import dask.array as da

    ds = dataset(stats, stats.layout()[2], where)  # the layout, of the empty partial
    values = dask.delayed(_variables, pure=True)(stats, partial, where)
    for name, var in list(ds.data_vars.items()):
        ds[name] = var.copy(data=da.from_delayed(values[name], var.shape, dtype=var.dtype))
    return ds


def _variables(stats: Statistics, partial: Partial, where: dict) -> dict[str, np.ndarray]:
    return {str(name): var.values for name, var in dataset(stats, partial, where).data_vars.items()}


def pdf(ds: xr.Dataset, name: str = "count") -> xr.DataArray:
    """The probability density of the histogram ``ds[name]``: count / (points in the bins x bin volume), the
    bin widths read from each dim's ``<dim>_bounds``."""
    count = ds[name]
    out = count.astype(np.float64) / float(count.sum())
    for dim in count.dims:
        if f"{dim}_bounds" not in ds.variables:
            raise SamplingError(f"expected the bounds {dim}_bounds of the histogram's bins, found none")
        bounds = ds[f"{dim}_bounds"]
        out = out / (bounds.isel(bound=1) - bounds.isel(bound=0)).drop_vars(f"{dim}_bounds", errors="ignore")
    out.attrs = {"long_name": f"probability density ({count.attrs.get('long_name', 'histogram')})"}
    return out


# ---- the doors ----------------------------------------------------------------------------------------------


def _template_and_axes(source: Any, mode: str, space: str, jacobian_space: str | None, device: str) -> tuple[Any, str]:
    """The Volume that names the source's results, and the Jacobian's space (checked with the request)."""
    request = statistics_request(Statistics(), mode, space, jacobian_space, device)
    return getattr(source, "template", source), request.jacobian_space or space


def _quantities(of: Any, vol: Any, jacobian_space: str) -> list[Any]:
    names = names_of(of, "of")
    if not names:
        raise SamplingError("expected at least one quantity, got none")
    return [quantity(n, vol, jacobian_space) for n in names]


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


def _bins_per_quantity(bins: Any, n: int) -> list[Any]:
    """``bins`` as one entry a quantity (a count or edges): a count for each; for one quantity its edges
    (``[n]``: n bins, as numpy reads it); for several, a count or edges per quantity."""
    if _is_number(bins):
        return [bins] * n
    if isinstance(bins, np.ndarray) and bins.ndim == 1:
        bins = bins.tolist()
    if not isinstance(bins, (list, tuple)):
        raise SamplingError(f"expected bins as a count, edges, or one of those per quantity, got {bins!r}")
    flat = all(_is_number(b) for b in bins)
    if n == 1 and flat:
        return [int(bins[0])] if len(bins) == 1 and float(bins[0]).is_integer() else [list(bins)]
    if len(bins) != n:
        raise SamplingError(f"expected bins for each of {n} quantities, got {len(bins)}")
    return list(bins)


def _ranges_per_quantity(range_: Any, n: int) -> list[Any]:
    """``range``: one (lo, hi) for every quantity, or one a quantity."""
    if isinstance(range_, np.ndarray):
        range_ = range_.tolist()
    if isinstance(range_, (list, tuple)) and len(range_) == 2 and all(_is_number(x) for x in range_):
        return [range_] * n  # (lo, hi), the same for each quantity
    if not isinstance(range_, (list, tuple)) or len(range_) != n:
        raise SamplingError(f"expected range as (lo, hi) or one (lo, hi) for each of {n} quantities, got {range_!r}")
    return list(range_)


def _ranges(
    source: Any, points: Any, qs: list, bins: Any, range_: Any, request: SampleRequest, wave: int | None
) -> tuple[list[np.ndarray], list[bool]]:
    """Edges per quantity, given, or (range None) over the quantities' min and max from a first pass (over
    (0, 1) where no finite value was found, as numpy.histogram of nothing); and for each whether its edges
    came from the data (a first pass) rather than from the caller."""
    per = _bins_per_quantity(bins, len(qs))
    counts = [not isinstance(b, (list, tuple, np.ndarray)) for b in per]  # else edges
    for q, b, n in zip(qs, per, counts, strict=True):  # counts and edges checked before any pass over the points
        edges_of(b, (0.0, 1.0) if n else None, q.name)
    measured = [range_ is None and n for n in counts]
    if range_ is None:
        if not any(measured):
            return [edges_of(b, None, q.name) for q, b in zip(qs, per, strict=True)], measured
        first = Statistics(moments=qs)
        spec, _, _, where = first.layout()
        got = reduce(source, points, first, request, wave)
        fields = [got.reals[m : m + kernel.MOMENT_FIELDS] for m in where["moments"]]
        ranges = [(0.0, 1.0) if not np.isfinite(f[6]) else (f[6], f[7] if f[7] > f[6] else f[6] + 1.0) for f in fields]
    else:
        ranges = _ranges_per_quantity(range_, len(qs))
    return [edges_of(b, r, q.name) for q, b, r in zip(qs, per, ranges, strict=True)], measured


def _normalize_by(normalize: Any) -> float | bool | None:
    """``normalize=``: None (False or None: not normalised), True (<Q_w> from a first pass) or a positive,
    finite <Q_w>."""
    if normalize is None or isinstance(normalize, (bool, np.bool_)):
        return True if normalize else None
    if not _is_number(normalize) or not (np.isfinite(float(normalize)) and float(normalize) > 0):
        raise SamplingError(
            f"expected normalize= True, False or a positive, finite <Q_w> to normalize by, got {normalize!r}"
        )
    return float(normalize)


def histogram(
    source: Any,
    points: Any,
    of: str | Sequence[str],
    bins: Any = 64,
    range: Any = None,  # noqa: A002 - numpy.histogram's name
    weights: str | None = None,
    *,
    normalize: bool | float = False,
    mode: str = "linear",
    space: str = "world",
    jacobian_space: str | None = None,
    device: str = "cpu",
    wave: int | None = None,
) -> xr.Dataset:
    """The histogram of one to three quantities sampled at points, counted in the kernels' pass.

    Parameters
    ----------
    source : Volume or DistributedVolume
    points : array_like, shape (N, 3) or (..., 3)
        NumPy, CuPy or Dask points in ``space``; Dask points are reduced chunk by chunk on the workers.
    of : str or sequence of str
        One to three quantities (:mod:`vdbflow.ops.reductions`): ``"q_criterion"``, ``"vorticity[x]"``,
        ``"value[u]"``, ``"jacobian[u,x]"``, ...
    bins : int, sequence of edges, or one of those per quantity
    range : (lo, hi) or one per quantity, optional
        Default: each quantity's minimum and maximum, from a first pass over the points.
    weights : str, optional
        A quantity whose sum in each bin is returned as ``weighted``.
    normalize : bool or float, default False
        Bin each quantity over <Q_w>^(p/2), p the power of the Jacobian's units it carries (the table of
        outputs): Q / <Q_w> and R / <Q_w>^(3/2), the usual axes of the Q-R plane, ``|omega| / <Q_w>^(1/2)``, a
        Jacobian entry likewise, values as they are; ``<Q_w> = <|omega|^2> / 4`` given, or (``True``) from a
        first pass over the same points.  ``bins`` and ``range`` are then in those units.  The kernels bin
        against the edges times the scale: a value within rounding of an edge may fall on the other side
        of it than its quotient would.
    mode, space, jacobian_space, device, wave
        As :meth:`Volume.sample_grad` (``wave``: a DistributedVolume's point chunks routed together).

    Returns
    -------
    xarray.Dataset
        ``count`` (int64, dims ``<quantity>_bin`` per quantity, bin centres with CF ``bounds``), ``pdf``
        (count over in-range points and bin volume), ``outside`` and ``nan`` (points left out), and
        ``weighted`` with ``weights``.  Counts equal ``numpy.histogramdd`` of the same quantities'
        per-point values with the same edges.
    """
    template, js = _template_and_axes(source, mode, space, jacobian_space, device)
    qs = _quantities(of, template, js)
    if len(qs) > 3:
        raise SamplingError(f"expected one to three quantities for a histogram, got {len(qs)}")
    w = None if weights is None else quantity(weights, template, js)
    by = _normalize_by(normalize)
    probe = Statistics(moments=qs + ([w] if w else []))
    edges, measured = _ranges(source, points, qs, bins, range, statistics_request(probe, mode, space, js, device), wave)
    q_w = None
    binned = edges  # the edges the kernels bin against, in the quantities' own units
    if by is not None:
        q_w = _mean_q_w(source, points, template, js, mode, space, device, wave) if by is True else by
        if not (np.isfinite(float(q_w)) and float(q_w) > 0):
            raise SamplingError(f"expected a positive, finite <Q_w> to normalize by, got {q_w!r}")
        scale = [_scale(q, q_w) for q in qs]
        # edges from the data are binned as they are and labelled in the normalised units; the caller's
        # edges are in the normalised units, binned times the scale
        binned = [e if m else _scaled_edges(q, e, q_w) for q, e, m in zip(qs, edges, measured, strict=True)]
        with np.errstate(over="ignore", under="ignore"):
            edges = [e / f if m else e for e, m, f in zip(edges, measured, scale, strict=True)]
        for q, e in zip(qs, edges, strict=True):
            edges_of(e, None, f"{q.name} over <Q_w>^{_jacobian_power(q) / 2:g}")
    stats = Statistics(histograms=[Histogram(tuple(qs), tuple(binned), w)])
    ds = statistics(source, points, stats, mode=mode, space=space, jacobian_space=js, device=device, wave=wave)
    key = "_".join(q.label for q in qs)
    ds = ds.rename({f"{key}_{v}": v for v in ("count", "outside", "nan", "weighted") if f"{key}_{v}" in ds})
    if q_w is not None:  # the bins in the normalised units
        for q, e in zip(qs, edges, strict=True):
            dim = f"{q.label}_bin"
            ds = ds.assign_coords({dim: (dim, (e[:-1] + e[1:]) / 2, ds[dim].attrs)})
            ds.coords[f"{dim}_bounds"] = ((dim, "bound"), np.stack([e[:-1], e[1:]], axis=1))
        ds.attrs["normalized_by_mean_q_w"] = float(q_w)
    ds["pdf"] = pdf(ds)
    return ds


def _jacobian_power(q: Any) -> float:
    """The power of the Jacobian's units a quantity carries (the table of outputs' exponent): Q 2, R 3, |omega|
    and a Jacobian entry 1, a value 0."""
    if q.source == JACOBIAN:
        return 1.0
    if q.source == VALUE:
        return 0.0
    return float(outputs.TABLE[kernel.DERIVED[q.index // 4]].exponent or 0)


def _mean_q_w(source: Any, points: Any, template: Any, js: str, mode: str, space: str, device: str, wave: Any) -> float:
    """<Q_w> = <|omega|^2> / 4 over the points (a moments pass of |omega|: <x^2> = M2 / n + mean^2)."""
    stats = Statistics(moments=[quantity("vorticity_magnitude", template, js)])
    where = stats.layout()[3]
    got = reduce(source, points, stats, statistics_request(stats, mode, space, js, device), wave)
    n, _, mean, m2 = got.reals[where["moments"][0] : where["moments"][0] + 4]
    if n == 0:
        raise SamplingError("expected points with a finite vorticity to normalize by <Q_w>, got none")
    return float((m2 / n + mean * mean) / 4.0)


def moments(
    source: Any,
    points: Any,
    of: str | Sequence[str],
    *,
    order: int = 4,
    mode: str = "linear",
    space: str = "world",
    jacobian_space: str | None = None,
    device: str = "cpu",
    wave: int | None = None,
) -> xr.Dataset:
    """Count, mean, variance, skewness, flatness, minimum and maximum of quantities sampled at points.

    Parameters
    ----------
    source, points, mode, space, jacobian_space, device, wave
        As :func:`histogram`.
    of : str or sequence of str
        The quantities (:mod:`vdbflow.ops.reductions`).
    order : int, default 4
        The highest moment returned, 1 to 4: 1 the mean, 2 also the variance (and ``m2``), 3 the skewness
        (``m3``), 4 the flatness (``m4``).  The kernels' pass accumulates the central sums to the fourth
        whatever the order (the pairwise update of all four costs no measurable time next to sampling).

    Returns
    -------
    xarray.Dataset
        On a ``quantity`` dim (the quantities' variable-safe names): ``count`` and ``nan_count`` (int64: NaN
        values are left out and counted), ``mean``, ``min``, ``max``, and to ``order`` ``variance`` (M2 / n),
        ``skewness``, ``flatness`` and the central sums ``m2``, ``m3``, ``m4`` that merge further results (the
        pairwise update); attr ``order``.
    """
    if isinstance(order, (bool, np.bool_)) or not isinstance(order, (int, np.integer)) or not 1 <= order <= 4:
        raise SamplingError(f"expected order= 1, 2, 3 or 4 (the highest moment), got {order!r}")
    template, js = _template_and_axes(source, mode, space, jacobian_space, device)
    stats = Statistics(moments=_quantities(of, template, js))
    ds = statistics(source, points, stats, mode=mode, space=space, jacobian_space=js, device=device, wave=wave)
    beyond = {2: ("variance", "m2"), 3: ("skewness", "m3"), 4: ("flatness", "m4")}
    ds = ds.drop_vars([v for k, names in beyond.items() if k > order for v in names])
    ds.attrs["order"] = int(order)
    return ds


def conditional_mean(
    source: Any,
    points: Any,
    of: str | Sequence[str],
    given: str,
    bins: Any = 64,
    range: Any = None,  # noqa: A002 - numpy.histogram's name
    *,
    mode: str = "linear",
    space: str = "world",
    jacobian_space: str | None = None,
    device: str = "cpu",
    wave: int | None = None,
) -> xr.Dataset:
    """Means and variances of quantities ``of`` in bins of the quantity ``given`` (e.g. ``<|omega|^2 | Q>``).

    Parameters
    ----------
    source, points, mode, space, jacobian_space, device, wave
        As :func:`histogram`.
    of : str or sequence of str
        The quantities averaged.
    given : str
        The quantity binned.
    bins, range
        The bins of ``given`` (as :func:`histogram`: edges, or a count over ``range``, default its min and max).

    Returns
    -------
    xarray.Dataset
        On the dim ``<given>_bin`` (centres and CF bounds): ``<of>_mean_by_<given>`` and
        ``<of>_variance_by_<given>`` (NaN in empty bins), ``count_<of>_by_<given>`` (int64), and the points
        outside the bins (``outside_<of>_by_<given>``) or with a NaN quantity (``nan_<of>_by_<given>``).
    """
    template, js = _template_and_axes(source, mode, space, jacobian_space, device)
    g = quantity(given, template, js)
    (edges,), _ = _ranges(
        source, points, [g], bins, range, statistics_request(Statistics(moments=[g]), mode, space, js, device), wave
    )
    stats = Statistics(conditionals=[Conditional(q, g, edges) for q in _quantities(of, template, js)])
    return statistics(source, points, stats, mode=mode, space=space, jacobian_space=js, device=device, wave=wave)


def statistics(
    source: Any,
    points: Any,
    stats: Statistics | None = None,
    *,
    histograms: Any = (),
    moments: Any = (),
    conditional: Any = (),
    mode: str = "linear",
    space: str = "world",
    jacobian_space: str | None = None,
    device: str = "cpu",
    normalize: bool | float = False,
    wave: int | None = None,
) -> xr.Dataset:
    """Every histogram, moment and binned mean of ``stats`` (or of the keyword specs) in one pass over the points.

    Parameters
    ----------
    source, points, mode, space, jacobian_space, device, wave
        As :func:`histogram`.
    stats : vdbflow.ops.reductions.Statistics, optional
        The histograms, moments and binned means to compute; or give them as plain specs, as a job's
        ``reduce:`` section writes them (:func:`vdbflow.ops.reductions.statistics_from`):
    histograms : list of dict, optional
        ``{"of": ["q_criterion", "r_invariant"], "bins": [256, 256], "range": [(-3, 1.5), (-1.5, 1.5)]}``
        (``bins`` a count or edges, once or one a quantity; ``range`` required with counts; ``weights``
        a quantity).
    moments : list of str, optional
        Quantities whose count, mean, variance, skewness, flatness, minimum and maximum are computed.
    conditional : list of dict, optional
        ``{"of": ["vorticity_magnitude"], "given": "q_criterion", "bins": 64, "range": (-3, 1.5)}``.
    normalize : bool or float, default False
        Every quantity over <Q_w>^(p/2), as :func:`histogram` (Q / <Q_w>, R / <Q_w>^(3/2), ...): the bins and
        ranges are in those units (binned against the edges times the scale), and the moments, weighted sums
        and binned means are returned in them; ``<Q_w>`` given (one pass) or ``True`` (a first pass over the
        same points for it).  Attr ``normalized_by_mean_q_w``.

    Returns
    -------
    xarray.Dataset
        The variables of each (:func:`dataset` names them), with attrs ``mode``, ``space`` and
        ``jacobian_space``.

    Examples
    --------
    >>> import numpy as np
    >>> import vdbflow
    >>> from vdbflow import synthetic
    >>> vol = synthetic.flow_volume(synthetic.taylor_green(), 32)
    >>> pts = np.random.default_rng(0).uniform(1.0, 5.0, (10_000, 3))
    >>> ds = vdbflow.statistics(
    ...     vol, pts, histograms=[{"of": ["q_criterion", "r_invariant"], "bins": 32, "range": [(-3, 3), (-2, 2)]}],
    ...     moments=["jacobian[u,x]"], conditional=[{"of": "vorticity_magnitude", "given": "q_criterion",
    ...     "bins": 8, "range": (-3, 3)}])
    >>> int(ds["q_criterion_r_invariant_count"].sum() + ds["q_criterion_r_invariant_outside"])
    10000
    """
    template, js = _template_and_axes(source, mode, space, jacobian_space, device)
    specs_given = any(
        x is not None and not (isinstance(x, (list, tuple)) and not x) for x in (histograms, moments, conditional)
    )
    if stats is None:
        stats = statistics_from(template, js, histograms, moments, conditional)
    elif not isinstance(stats, Statistics):
        raise SamplingError(f"expected stats as a vdbflow.ops.reductions.Statistics, got {type(stats).__name__}")
    elif specs_given:
        raise SamplingError("expected stats or histograms=, moments=, conditional=, not both")
    by = _normalize_by(normalize)
    request = statistics_request(stats, mode, space, jacobian_space, device)
    where = stats.layout()[3]
    q_w = None
    if by is not None:
        q_w = _mean_q_w(source, points, template, js, mode, space, device, wave) if by is True else by
        partial = reduce(source, points, _scaled(stats, q_w), request, wave)
        _normalised(stats, partial, where, q_w)
    else:
        partial = reduce(source, points, stats, request, wave)
    ds = dataset(stats, partial, where)  # the bins labelled by stats' own edges (normalised units)
    ds.attrs.update({"mode": mode, "space": space, "jacobian_space": request.jacobian_space, "reduced_in": "kernels"})
    if q_w is not None:
        ds.attrs["normalized_by_mean_q_w"] = float(q_w)
    return ds


def _scale(q: Any, q_w: float) -> float:
    """<Q_w>^(p/2): the scale of quantity q's normalised units (finite and positive, else SamplingError)."""
    try:
        f = float(q_w) ** (_jacobian_power(q) / 2)
    except OverflowError:
        f = float("inf")
    if not (np.isfinite(f) and f > 0):
        raise SamplingError(f"expected <Q_w>^{_jacobian_power(q) / 2:g} finite and positive for {q.name}, got {q_w!r}")
    return f


def _scaled_edges(q: Any, e: np.ndarray, q_w: float) -> np.ndarray:
    """Edges in normalised units times the scale: the edges the kernels bin against (checked again)."""
    with np.errstate(over="ignore", under="ignore"):
        return edges_of(e * _scale(q, q_w), None, f"{q.name} times <Q_w>^{_jacobian_power(q) / 2:g}")


def _scaled(stats: Statistics, q_w: float) -> Statistics:
    """``stats`` with every bin edge (given in normalised units) times its quantity's scale: what the kernels
    bin against."""
    return Statistics(
        [
            Histogram(h.of, tuple(_scaled_edges(q, e, q_w) for q, e in zip(h.of, h.edges, strict=True)), h.weight)
            for h in stats.histograms
        ],
        stats.moments,
        [Conditional(c.of, c.given, _scaled_edges(c.given, c.edges, q_w)) for c in stats.conditionals],
    )


def _normalised(stats: Statistics, partial: Partial, where: dict, q_w: float) -> None:
    """A partial's sums, in place, in normalised units: moments (mean, M2, M3, M4, min, max), weighted sums and
    binned means (mean, M2) over their quantities' scales."""
    r = partial.reals
    for q, m in zip(stats.moments, where["moments"], strict=True):
        f = _scale(q, q_w)
        r[m + 2] /= f
        r[m + 3 : m + 6] /= np.array([f**2, f**3, f**4])
        r[m + 6 : m + 8] /= f
    for h, (_, sums, shape) in zip(stats.histograms, where["hist"], strict=True):
        if h.weight is not None:
            r[sums : sums + int(np.prod(shape))] /= _scale(h.weight, q_w)
    for c, (_, at, bins) in zip(stats.conditionals, where["cond"], strict=True):
        f = _scale(c.of, q_w)
        t = r[at : at + 3 * bins].reshape(bins, 3)
        t[:, 1] /= f
        t[:, 2] /= f * f
