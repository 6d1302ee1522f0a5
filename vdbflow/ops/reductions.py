"""Statistics of sampled quantities, reduced in the kernels' sampling pass (kernels/vdbflow/reduce.h):
histograms of one to three quantities, moments to order 4, and means of a quantity binned by another.

A quantity is named as a result variable would be:

- a derived quantity of the table of outputs (``"q_criterion"``, ``"r_invariant"``), or one entry of a
  vector one (``"vorticity[x]"``);
- a value component: ``"value"`` (scalar data), ``"value[u]"`` or ``"value[0]"``;
- a Jacobian entry: ``"jacobian[u,x]"`` (component, axis; labels or indices; ``"jacobian[x]"`` for scalar
  data), the axes those of ``jacobian_space``.

:class:`Statistics` lists what to compute; :func:`partial` reduces one set of points into a
:class:`Partial` (exact int64 counts, float64 sums and moments); :func:`merge` merges two (counts add,
moments by the pairwise update); :meth:`Statistics.dataset` names the result.  Partials of the chunks of
Dask points are merged in a fixed tree over the chunks' order, so a result does not depend on the
workers, the threads or the partitions that computed it.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vdbflow.core import kernel, outputs, schema
from vdbflow.devices import run
from vdbflow.errors import SamplingError

VALUE, JACOBIAN, DERIVED = 0, 1, 2  # reduce.h ChannelSource
# bins of one histogram (all its quantities' bins multiplied) or one binned mean: 2^26, a 512 MiB count array
# that every thread of the kernels' pass holds a copy of; sizes are checked in Python integers (and again by
# the kernels' spec check), so no product of bins overflows
MAX_BINS = 1 << 26
_ENTRY = re.compile(r"^(\w+)(?:\[([^\]]+)\])?$")


@dataclass(frozen=True)
class Quantity:
    """One channel: its name as given, a variable-safe name, where the kernels read it, its attrs."""

    name: str
    label: str
    source: int
    index: int
    attrs: dict = field(default_factory=dict, compare=False, hash=False)


def _position(token: str, labels: Sequence[str], what: str, text: str) -> int:
    token = token.strip()
    if token in labels:
        return list(labels).index(token)
    if token.isdigit() and int(token) < len(labels):
        return int(token)
    raise SamplingError(
        f"expected {what} among {', '.join(labels)} (or 0 .. {len(labels) - 1}) in {text!r}, got {token!r}"
    )


def quantity(text: str, vol: Any, jacobian_space: str) -> Quantity:
    """The channel named by ``text`` for the volume ``vol`` (module docstring): a derived quantity
    (``"q_criterion"``, ``"vorticity[z]"``), a value component (``"value[u]"``) or a Jacobian entry
    (``"jacobian[u,x]"``, axes of ``jacobian_space``)."""
    if jacobian_space not in schema.AXIS_LABELS:
        raise SamplingError(f"expected jacobian_space 'world' or 'index', got {jacobian_space!r}")
    m = _ENTRY.match(text.replace(" ", "")) if isinstance(text, str) else None
    if m is None:
        raise SamplingError(f"expected a quantity such as 'q_criterion', 'value[u]' or 'jacobian[u,x]', got {text!r}")
    base, inner = m.group(1), m.group(2)
    C = vol.components
    components = tuple(vol.component_names) if C > 1 else ("value",)
    axes = schema.AXIS_LABELS[jacobian_space]
    if base == "value":
        c = 0 if inner is None and C == 1 else _position(inner or "", components, "a component", text)
        label = "value" if C == 1 else f"value_{components[c]}"
        return Quantity(text, label, VALUE, c, {"long_name": f"{vol.name} {components[c]}" if C > 1 else vol.name})
    if base == "jacobian":
        parts = (inner or "").split(",")
        if C == 1 and len(parts) == 1:
            c, a = 0, _position(parts[0], axes, "an axis", text)
        elif len(parts) == 2:
            c, a = _position(parts[0], components, "a component", text), _position(parts[1], axes, "an axis", text)
        else:
            raise SamplingError(
                f"expected 'jacobian[component,axis]' (or 'jacobian[axis]' for scalar data), got {text!r}"
            )
        label = f"jacobian_{axes[a]}" if C == 1 else f"jacobian_{components[c]}_{axes[a]}"
        return Quantity(text, label, JACOBIAN, 3 * c + a, {"long_name": f"d{components[c]}/d{axes[a]}"})
    if base in outputs.TABLE and outputs.TABLE[base].kind == "derived":
        o = outputs.TABLE[base]
        q = kernel.DERIVED.index(base)
        if o.width == 1 and inner is None:
            return Quantity(text, base, DERIVED, 4 * q, {"long_name": o.long_name, "formula": o.formula})
        if o.width > 1 and inner is not None:
            a = _position(inner, axes, "an axis", text)
            return Quantity(text, f"{base}_{axes[a]}", DERIVED, 4 * q + a, {"long_name": f"{o.long_name} {axes[a]}"})
        raise SamplingError(
            f"expected {base}[axis] for the vector {base}, got {text!r}"
            if o.width > 1
            else f"expected {base} without an entry (a scalar), got {text!r}"
        )
    raise SamplingError(
        f"expected a quantity: value, jacobian or one of {', '.join(outputs.names('derived'))}, got {text!r}"
    )


def names_of(value: Any, what: str) -> list[str]:
    """Quantity names given as one name or a list (tuple, array) of names."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple, np.ndarray)) and all(isinstance(v, str) for v in np.ravel(value).tolist()):
        return [str(v) for v in np.ravel(value).tolist()]
    raise SamplingError(f"expected {what} as a quantity name or a list of names, got {value!r}")


def _real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def bin_count(bins: Any, what: str) -> int:
    """A number of bins: a whole number from 1 to :data:`MAX_BINS` (an int, or a float that is one)."""
    if not _real(bins) or not math.isfinite(bins) or int(bins) != bins or not 1 <= int(bins) <= MAX_BINS:
        raise SamplingError(f"expected a whole number of bins from 1 to {MAX_BINS:,} for {what}, got {bins!r}")
    return int(bins)


def range_of(lo_hi: Any, what: str) -> tuple[float, float]:
    """A finite range ``(lo, hi)`` with lo < hi (two real numbers)."""
    pair = lo_hi.tolist() if isinstance(lo_hi, np.ndarray) else lo_hi
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(_real(x) for x in pair):
        raise SamplingError(f"expected a range (lo, hi) of two numbers for {what}, got {lo_hi!r}")
    lo, hi = float(pair[0]), float(pair[1])
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise SamplingError(f"expected a finite range lo < hi for {what}, got {lo_hi!r}")
    return lo, hi


def edges_of(bins: Any, lo_hi: Any, what: str) -> np.ndarray:
    """Increasing float64 bin edges: ``bins`` edges given, or ``bins`` equal bins over ``(lo, hi)`` (as
    ``numpy.linspace``, the edges ``numpy.histogram`` makes); at most :data:`MAX_BINS` bins."""
    if isinstance(bins, (list, tuple, np.ndarray)):
        try:
            given = np.asarray(bins)
        except ValueError:  # ragged
            given = np.asarray([], np.float64)
        if given.ndim != 1 or given.dtype.kind not in "iuf" or given.dtype == np.bool_:
            raise SamplingError(f"expected bin edges as one list of numbers for {what}, got {bins!r}")
        if len(given) - 1 > MAX_BINS:
            raise SamplingError(f"expected at most {MAX_BINS:,} bins for {what}, got {len(given) - 1:,}")
        e = given.astype(np.float64)
    else:
        count = bin_count(bins, what)
        if lo_hi is None:
            raise SamplingError(f"expected a range (lo, hi) or explicit edges for {what}")
        lo, hi = range_of(lo_hi, what)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.linspace(lo, hi, count + 1)
    if e.ndim != 1 or len(e) < 2 or not np.all(np.isfinite(e)) or not np.all(np.diff(e) > 0):
        raise SamplingError(f"expected two or more finite, increasing bin edges for {what}")
    return e


@dataclass
class Histogram:
    """A histogram of one to three quantities (:func:`quantity`) over bin ``edges`` (one float64 array a
    quantity), optionally weighted by a quantity."""

    of: tuple[Quantity, ...]
    edges: tuple[np.ndarray, ...]
    weight: Quantity | None = None


@dataclass
class Conditional:
    """The mean and variance of the quantity ``of`` in each bin (``edges``) of the quantity ``given``."""

    of: Quantity
    given: Quantity
    edges: np.ndarray


def _per_quantity(value: Any, n: int, what: str) -> list:
    """``value`` (``bins`` or ``range``) given once for n quantities, or as a list of n, one a quantity: ranges
    that are pairs, bins that are counts or edges."""
    if n > 1 and isinstance(value, (list, tuple)) and len(value) == n:
        one = (lambda v: np.ndim(v) == 1) if what == "range" else (lambda v: np.ndim(v) == 1 or _real(v))
        try:
            if all(one(v) for v in value):
                return list(value)
        except ValueError:  # a ragged entry: refused as it is
            pass
    return [value] * n


def _specs(value: Any, what: str) -> list[dict]:
    """``histograms=`` or ``conditional=``: a list of dicts (or one dict)."""
    specs = [value] if isinstance(value, dict) else value
    if not isinstance(specs, (list, tuple)) or not all(isinstance(v, dict) for v in specs):
        raise SamplingError(f"expected {what} as a list of dicts, got {value!r}")
    return list(specs)


def statistics_from(
    vol: Any, jacobian_space: str, histograms: Any = (), moments: Any = (), conditional: Any = ()
) -> Any:
    """A :class:`Statistics` from plain specs, as a job's ``reduce:`` section writes them: ``histograms`` a
    list of ``{"of": name or [1-3 names], "bins": n or edges (or one a quantity), "range": (lo, hi) (or one
    a quantity), "weights": name}``, ``moments`` a list of names, ``conditional`` a list of ``{"of": name or
    [names], "given": name, "bins": n or edges, "range": (lo, hi)}``; names as :func:`quantity` reads them."""
    q = lambda text: quantity(text, vol, jacobian_space)  # noqa: E731
    keys = {"histograms": {"of", "bins", "range", "weights"}, "conditional": {"of", "given", "bins", "range"}}
    histograms = _specs(histograms if histograms is not None else [], "histograms")
    conditional = _specs(conditional if conditional is not None else [], "conditional")
    for what, specs in (("histograms", histograms), ("conditional", conditional)):
        for spec in specs:
            if "of" not in spec or set(spec) - keys[what]:
                raise SamplingError(
                    f"expected each of {what} as a dict with 'of' and keys among {sorted(keys[what])}, got {spec!r}"
                )
    hists = []
    for h in histograms:
        names = names_of(h["of"], "a histogram's 'of'")
        if not 1 <= len(names) <= 3:
            raise SamplingError(f"expected one to three quantities for a histogram, got {len(names)}")
        bins, ranges = (
            _per_quantity(h.get("bins", 64), len(names), "bins"),
            _per_quantity(h.get("range"), len(names), "range"),
        )
        edges = tuple(edges_of(b, r, n) for n, b, r in zip(names, bins, ranges, strict=True))
        hists.append(
            Histogram(tuple(q(n) for n in names), edges, None if h.get("weights") is None else q(h["weights"]))
        )
    conds = []
    for c in conditional:
        if "given" not in c or not isinstance(c["given"], str):
            raise SamplingError(f"expected 'given' (a quantity name) in each of conditional, got {c!r}")
        given_edges = edges_of(c.get("bins", 64), c.get("range"), c["given"])
        conds += [Conditional(q(of), q(c["given"]), given_edges) for of in names_of(c["of"], "a binned mean's 'of'")]
    moment_names = [] if moments is None or (isinstance(moments, (list, tuple)) and not moments) else moments
    stats = Statistics(hists, [q(n) for n in (names_of(moment_names, "moments") if moment_names else [])], conds)
    stats.layout()  # the kernels' limits
    return stats


@dataclass
class Partial:
    """One reduction's sums: int64 ``ints`` (counts) and float64 ``reals`` (weighted sums, binned means,
    moments), laid out by the :class:`Statistics` that made it."""

    ints: np.ndarray
    reals: np.ndarray


@dataclass
class Statistics:
    """What one pass computes: histograms, moments of quantities, means of quantities binned by others."""

    histograms: list[Histogram] = field(default_factory=list)
    moments: list[Quantity] = field(default_factory=list)
    conditionals: list[Conditional] = field(default_factory=list)

    def channels(self) -> list[Quantity]:
        out: dict[tuple[int, int], Quantity] = {}
        for h in self.histograms:
            for q in (*h.of, *((h.weight,) if h.weight else ())):
                out.setdefault((q.source, q.index), q)
        for q in self.moments:
            out.setdefault((q.source, q.index), q)
        for c in self.conditionals:
            out.setdefault((c.given.source, c.given.index), c.given)
            out.setdefault((c.of.source, c.of.index), c.of)
        return list(out.values())

    def layout(self) -> tuple[bytes, np.ndarray, Partial, dict]:
        """The kernels' spec (bytes), the bin edges, an empty partial and the offsets of each item."""
        channels = self.channels()
        if not channels:
            raise SamplingError("expected at least one histogram, moment or binned mean to compute")
        limits = (
            kernel.REDUCE_MAX_CHANNELS,
            kernel.REDUCE_MAX_HISTOGRAMS,
            kernel.REDUCE_MAX_CONDITIONALS,
            kernel.REDUCE_MAX_CHANNELS,
        )
        asked = (len(channels), len(self.histograms), len(self.conditionals), len(self.moments))
        what_asked = ("quantities", "histograms", "binned means", "moments")
        for what, n, most in zip(what_asked, asked, limits, strict=True):
            if n > most:
                raise SamplingError(f"expected at most {most} {what} in one pass, got {n}")
        at = {(q.source, q.index): f for f, q in enumerate(channels)}
        s = np.zeros((), kernel.REDUCE_SPEC_DTYPE)
        s["channels"] = len(channels)
        s["source"][: len(channels)] = [q.source for q in channels]
        s["index"][: len(channels)] = [q.index for q in channels]
        edges: list[np.ndarray] = []
        n_ints = n_reals = n_edges = 0
        where: dict = {"hist": [], "moments": [], "cond": []}

        def add_edges(e: np.ndarray) -> int:
            nonlocal n_edges
            edges.append(e)
            n_edges += len(e)
            return n_edges - len(e)

        s["histograms"] = len(self.histograms)
        for h, hist in enumerate(self.histograms):
            shape = tuple(len(e) - 1 for e in hist.edges)
            size = math.prod(shape)  # Python integers: no overflow
            if size > MAX_BINS:
                raise SamplingError(
                    f"expected at most {MAX_BINS:,} bins in a histogram, got "
                    f"{' x '.join(f'{b:,}' for b in shape)} = {size:,}"
                )
            s["hist_dims"][h] = len(shape)
            for d, (q, e) in enumerate(zip(hist.of, hist.edges, strict=True)):
                s["hist_channel"][3 * h + d] = at[(q.source, q.index)]
                s["hist_bins"][3 * h + d] = len(e) - 1
                s["hist_edges"][3 * h + d] = add_edges(e)
            s["hist_weight"][h] = -1 if hist.weight is None else at[(hist.weight.source, hist.weight.index)]
            s["hist_counts"][h], n_ints = n_ints, n_ints + size + 2
            s["hist_sums"][h] = -1
            if hist.weight is not None:
                s["hist_sums"][h], n_reals = n_reals, n_reals + size
            where["hist"].append((int(s["hist_counts"][h]), int(s["hist_sums"][h]), shape))
        s["conditionals"] = len(self.conditionals)
        for k, c in enumerate(self.conditionals):
            bins = len(c.edges) - 1
            if bins > MAX_BINS:
                raise SamplingError(f"expected at most {MAX_BINS:,} bins in a binned mean, got {bins:,}")
            s["cond_given"][k], s["cond_of"][k] = at[(c.given.source, c.given.index)], at[(c.of.source, c.of.index)]
            s["cond_bins"][k], s["cond_edges"][k] = bins, add_edges(c.edges)
            s["cond_counts"][k], n_ints = n_ints, n_ints + bins + 2
            s["cond_stats"][k], n_reals = n_reals, n_reals + 3 * bins
            where["cond"].append((int(s["cond_counts"][k]), int(s["cond_stats"][k]), bins))
        s["moments"] = len(self.moments)
        for m, q in enumerate(self.moments):
            s["moment_channel"][m] = at[(q.source, q.index)]
            s["moment_at"][m], n_reals = n_reals, n_reals + kernel.MOMENT_FIELDS
            where["moments"].append(int(s["moment_at"][m]))
        try:
            empty = Partial(np.zeros(n_ints, np.int64), np.zeros(n_reals, np.float64))
        except MemoryError:
            raise SamplingError(
                f"expected statistics whose partial fits in memory, got {n_ints:,} counts and {n_reals:,} sums "
                f"({(n_ints + n_reals) * 8:,} bytes)"
            ) from None
        for m in where["moments"]:
            empty.reals[m + 6], empty.reals[m + 7] = np.inf, -np.inf
        where["channels"] = channels
        return s.tobytes(), np.concatenate(edges) if edges else np.zeros(1), empty, where

    def needs(self) -> tuple[bool, tuple[str, ...]]:
        """Whether a Jacobian is read, and the derived quantities the channels read."""
        chans = self.channels()
        derived = tuple(dict.fromkeys(kernel.DERIVED[q.index // 4] for q in chans if q.source == DERIVED))
        return any(q.source != VALUE for q in chans), derived


def merge(spec: bytes, edges: np.ndarray, a: Partial, b: Partial) -> Partial:
    """Partial ``b`` merged into a copy of ``a`` by the kernels (reduce.h ``merge_partials``: counts added,
    moments and binned means by the pairwise update, as blocks are merged); ``spec`` and ``edges`` from
    :meth:`Statistics.layout`."""
    out = Partial(a.ints.copy(), a.reals.copy())
    run("merge_partials", spec, edges, out.ints, out.reals, b.ints, b.reals, device="cpu")
    return out


def features_of(stats: Statistics, arrays: dict[str, np.ndarray], components: int) -> np.ndarray:
    """The features (N, channels) of sampled arrays (``value``, ``jacobian`` and derived ones, as
    :func:`vdbflow.ops.sampling.sample_arrays` returns them)."""
    cols = []
    for q in stats.channels():
        if q.source == VALUE:
            v = arrays["value"]
            cols.append(v if v.ndim == 1 else v[:, q.index])
        elif q.source == JACOBIAN:
            cols.append(arrays["jacobian"].reshape(len(arrays["jacobian"]), 3 * components)[:, q.index])
        else:
            d = arrays[kernel.DERIVED[q.index // 4]]
            cols.append(d if d.ndim == 1 else d[:, q.index % 4])
    jdtype = np.result_type(*(c.dtype for c in cols), np.float32)
    return np.ascontiguousarray(np.stack([c.astype(jdtype, copy=False) for c in cols], axis=1))
