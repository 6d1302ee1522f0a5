"""Plots of sampled fields and Jacobians (matplotlib; ``pip install -e ".[plot]"`` from the checkout).

The helpers take a Dataset from :meth:`Volume.sample_grad` (or a ``vdbflow run`` result) whose
points form a slice plane - sampled at (ns, nt, 3) points, so that its values lie on two point dims,
or flat (N, 3) points with ``shape=(ns, nt)`` (s-major) - or a line (``line_plot``), and label every
panel with its variable, component, axis and units. Also reachable as ``ds.vdbflow.analysis.plot.slice(...)``,
``.jacobian_grid(...)``, ``.line(...)``; and histograms of :func:`vdbflow.histogram`: the Q-R joint PDF
(:func:`qr_plot`, ``.qr()``) and 1-D PDFs (:func:`pdf_plot`, ``.pdf()``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.core import outputs, schema
from vdbflow.errors import SamplingError
from vdbflow.io import bounded_json
from vdbflow.version import install_hint

DERIVED_SCALARS = outputs.scalar_quantities()  # what a plot computes from a Dataset's Jacobian (and velocity)


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise SamplingError(f"vdbflow.analysis.plot needs matplotlib: {install_hint('plot')}") from None
    return plt


def _point_dims(ds: xr.Dataset) -> tuple[str, ...]:
    """The dims the points lie on: those of the x (or i) coordinate, else ``("point",)``."""
    for c in ("x", "i"):
        if c in ds.coords:
            return tuple(ds[c].dims)
    return ("point",)


def _flat(obj: Any, dims: tuple[str, ...]) -> Any:
    """``obj`` with the point dims ``dims`` stacked into one ``point`` dim, first, in C order."""
    if dims == ("point",) or not set(dims) <= set(obj.dims):
        return obj
    return obj.stack(point=dims).transpose("point", ...)


def _plane(ds: xr.Dataset, var: Any, shape: Sequence[int] | None) -> tuple[xr.Dataset, Any, tuple[int, int]]:
    """The Dataset and variable with flat points, and the plane's (ns, nt): from the two point dims of a
    Dataset sampled at (ns, nt, 3) points, or ``shape`` for flat points."""
    dims = _point_dims(ds)
    if len(dims) == 2:
        sizes = (ds.sizes[dims[0]], ds.sizes[dims[1]])
        if shape is not None and tuple(int(n) for n in shape) != sizes:
            raise SamplingError(
                f"expected shape={sizes} (the sizes of the point dims {dims}) or none, got {tuple(shape)}"
            )
        return _flat(ds, dims), (None if var is None else _flat(var, dims)), sizes
    if len(dims) != 1:
        raise SamplingError(f"expected points on a plane: two point dims, or one with shape=(ns, nt); got dims {dims}")
    if dims != ("point",):
        ds, var = ds.rename({dims[0]: "point"}), (None if var is None else var.rename({dims[0]: "point"}))
    return ds, var, _plane_shape(ds, shape)


def _plane_shape(ds: xr.Dataset, shape: Sequence[int] | None) -> tuple[int, int]:
    if shape is None:
        stored = ds.attrs.get("points_shape")  # results of vdbflow run before points kept their shape
        if stored is None:
            raise SamplingError(
                "expected the plane's shape: pass shape=(ns, nt) (points in s-major order), or "
                "sample at points of shape (ns, nt, 3)"
            )
        try:
            shape = bounded_json.loads(stored) if isinstance(stored, str) else stored
        except ValueError as err:
            raise SamplingError(f"expected the points_shape attr to hold a JSON plane shape (ns, nt): {err}") from None
    try:
        shape = tuple(int(n) for n in shape)
    except (TypeError, ValueError, OverflowError):
        raise SamplingError(f"expected a plane shape (ns, nt) of two integers, got {shape!r}") from None
    if len(shape) != 2 or shape[0] * shape[1] != ds.sizes["point"]:
        raise SamplingError(f"expected a plane shape (ns, nt) with ns * nt = {ds.sizes['point']} points, got {shape}")
    return shape


def _variable(ds: xr.Dataset, var: str | xr.DataArray) -> xr.DataArray:
    """A data variable, or a derived quantity computed from the Dataset's Jacobian."""
    if isinstance(var, xr.DataArray):
        return var
    if var in ds.variables:
        return ds[var]
    if var in DERIVED_SCALARS or var == "vorticity":
        return getattr(ds.vdbflow, var)()
    raise SamplingError(
        f"expected a variable of the Dataset ({list(ds.data_vars)}) or a derived quantity "
        f"({', '.join(DERIVED_SCALARS)}), got {var!r}"
    )


def _edge_flags(ds: xr.Dataset, name: str) -> np.ndarray | None:
    """(points,) bool, True where a point's stencil reads only active voxels, from the Dataset's
    ``stencil_inside`` flags (``sample_grad(outputs=[..., "inside"])``, a job's ``inside`` output):
    those of ``name``'s grid where a job wrote one per grid, all of them together otherwise; None
    when the Dataset has none."""
    flags = [str(v) for v in ds.data_vars if str(v).endswith(schema.STENCIL_INSIDE)]
    if not flags:
        return None
    own = [f for f in flags if f != schema.STENCIL_INSIDE and name.startswith(f.removesuffix(schema.STENCIL_INSIDE))]
    picked = own[:1] or flags
    return np.logical_and.reduce([np.asarray(ds[f].values, bool).reshape(-1) for f in picked])


def _masked(values: np.ndarray, inside: np.ndarray | None) -> tuple[np.ndarray, str]:
    """``values`` (points, ...) with the points at the edge of the data set to NaN, and a note saying so."""
    if inside is None or inside.all():
        return values, ""
    values = np.array(values, np.float64)
    values[~inside] = np.nan
    return values, f"{int((~inside).sum()):,} points blanked: stencil leaves the data"


def _label(da: xr.DataArray, name: str | None = None) -> str:
    units = da.attrs.get("units")
    return f"{name or da.attrs.get('long_name') or da.name}" + (f" [{units}]" if units else "")


def _plane_axes(ds: xr.Dataset, shape: tuple[int, int]) -> tuple[tuple[str, np.ndarray], tuple[str, np.ndarray]]:
    """The two point coordinates that vary most along the plane's s and t directions, as 2-D grids, in
    the order x, y, z (i, j, k): the first across the image, the second up it."""
    names = [c for c in ("x", "y", "z", "i", "j", "k") if c in ds.coords and ds[c].dims == ("point",)]
    if len(names) < 3:
        raise SamplingError(f"expected point coordinates x, y, z (or i, j, k) in the Dataset, got {names}")
    grids = {c: np.asarray(ds[c].values, np.float64).reshape(shape) for c in names[:3]}
    along_s = max(grids, key=lambda c: np.ptp(grids[c], axis=0).max(initial=0))
    along_t = max((c for c in grids if c != along_s), key=lambda c: np.ptp(grids[c], axis=1).max(initial=0))
    across, up = sorted((along_s, along_t), key=names.index)  # x across and y up, whichever dim each follows
    return (across, grids[across]), (up, grids[up])


def _coord_label(ds: xr.Dataset, name: str) -> str:
    units = ds[name].attrs.get("units")
    return name + (f" [{units}]" if units else "")


def _image(
    ax: Any,
    ds: xr.Dataset,
    values: np.ndarray,
    shape: tuple[int, int],
    cmap: str,
    vmin: float | None,
    vmax: float | None,
) -> Any:
    (sname, S), (tname, T) = _plane_axes(ds, shape)
    mesh = ax.pcolormesh(S, T, values.reshape(shape), cmap=cmap, vmin=vmin, vmax=vmax, shading="nearest")
    ax.set_xlabel(_coord_label(ds, sname))
    ax.set_ylabel(_coord_label(ds, tname))
    ax.set_aspect("equal")
    return mesh


def _limits(values: np.ndarray, symmetric: bool, robust: bool = False) -> tuple[float | None, float | None]:
    """Colour limits: the data range, or (``robust``, as in xarray) its 2nd to 98th percentiles -
    the steep gradients at the edge of the active region then do not wash out the interior."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None, None
    lo, hi = np.percentile(finite, [2, 98]) if robust else (finite.min(), finite.max())
    if symmetric:
        m = float(max(abs(lo), abs(hi))) or 1.0
        return -m, m
    return float(lo), float(hi)


def _slice_values(
    ds: xr.Dataset, var: str | xr.DataArray, component: str | int | None, shape: Sequence[int] | None, mask_edge: bool
) -> tuple[xr.Dataset, xr.DataArray, str, np.ndarray, str, tuple[int, int]]:
    """What a slice image of ``var`` shows: the plane's Dataset, the variable, its name as shown, its values
    (float64, blanked where the stencil leaves the data), the note on the blanked points and the plane's shape."""
    ds, da, shape2 = _plane(ds, _variable(ds, var), shape)
    long_name = str(da.attrs.get("long_name", ""))
    gradient = long_name.startswith("gradient of ")  # a scalar grid's Jacobian
    name = long_name if gradient else str(da.name)
    extra = [d for d in da.dims if d != "point"]
    if extra:
        if len(extra) != 1:
            raise SamplingError(
                f"expected a scalar or vector variable, {name} has dims {da.dims}; select one "
                "entry first (e.g. ds['velocity_jacobian'].sel(component='u', axis='x'))"
            )
        dim = extra[0]
        if component is None:
            raise SamplingError(f"{name} is a vector (dim {dim!r}: {list(da[dim].values)}): pass component=")
        if component == "magnitude":
            values = np.linalg.norm(np.asarray(da.values, np.float64), axis=-1)
            name = f"|{name}|"
        else:
            sel = da.isel({dim: component}) if isinstance(component, int) else da.sel({dim: component})
            values = np.asarray(sel.values, np.float64)
            name = f"{name}, {sel[dim].item()}" if gradient else f"{name} {sel[dim].item()}"
    else:
        values = np.asarray(da.values, np.float64)
    values, note = _masked(values, _edge_flags(ds, str(da.name)) if mask_edge else None)
    return ds, da, name, values, note, shape2


def _symmetric(values: np.ndarray) -> bool:
    return bool(np.nanmin(values) < 0 < np.nanmax(values)) if np.isfinite(values).any() else False


def slice_plot(
    ds: xr.Dataset,
    var: str | xr.DataArray,
    *,
    component: str | int | None = None,
    shape: Sequence[int] | None = None,
    ax: Any = None,
    cmap: str | None = None,
    symmetric: bool | None = None,
    robust: bool = False,
    title: str | None = None,
    colorbar: bool = True,
    mask_edge: bool = True,
    vmin: float | None = None,
    vmax: float | None = None,
) -> Any:
    """An image of ``var`` (a data variable, or a derived quantity such as ``"q_criterion"``) over
    a slice plane of (ns, nt) points; vector variables need ``component`` (a label or a position;
    ``"magnitude"`` for the norm). ``robust``: colour limits from the 2nd-98th percentiles; ``vmin``,
    ``vmax``: colour limits given (e.g. one scale for several panels: :func:`slice_panels`).
    ``mask_edge``: points whose stencil reads the background (False in the Dataset's ``stencil_inside``
    flags, where it has them) are left blank, and the title says how many.
    Returns the matplotlib Axes."""
    plt = _pyplot()
    ds, da, name, values, note, plane_shape = _slice_values(ds, var, component, shape, mask_edge)
    if symmetric is None:
        symmetric = _symmetric(values)
    cmap = cmap or ("RdBu_r" if symmetric else "viridis")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4.2), layout="constrained")
    lo, hi = _limits(values, symmetric, robust)
    mesh = _image(ax, ds, values, plane_shape, cmap, lo if vmin is None else vmin, hi if vmax is None else vmax)
    ax.set_title(title or (f"{name}\n({note})" if note else name), fontsize=None if title or not note else 9)
    if colorbar:
        ax.figure.colorbar(mesh, ax=ax, label=_label(da, name))
    return ax


def slice_panels(
    datasets: Sequence[xr.Dataset],
    var: str,
    titles: Sequence[str] | None = None,
    *,
    component: str | int | None = None,
    cmap: str | None = None,
    robust: bool = False,
    mask_edge: bool = True,
    label: str | None = None,
    panel_size: float = 5.0,
) -> Any:
    """Slice images of ``var`` from several Datasets side by side, on one colour scale with one colour bar
    (e.g. two estimates of a field): the limits span every panel's values (``robust``: their 2nd-98th
    percentiles together), so that each colour means the same value in every panel.

    Parameters
    ----------
    datasets : sequence of xarray.Dataset
        Datasets of a slice plane (as :func:`slice_plot` takes), each holding ``var``.
    var : str
        The variable (or derived quantity) to show.
    titles : sequence of str, optional
        A title for each panel (default: the variable's name).
    component, cmap, robust, mask_edge
        As :func:`slice_plot`.
    label : str, optional
        The colour bar's label (default: the first variable's ``long_name`` and units).
    panel_size : float, default 5.0
        The width of a panel in inches.

    Returns
    -------
    matplotlib.figure.Figure
        One Axes a Dataset, and one colour bar for them all.
    """
    plt = _pyplot()
    shown = [_slice_values(ds, var, component, None, mask_edge) for ds in datasets]
    if not shown:
        raise SamplingError("expected at least one Dataset to show, got none")
    every = np.concatenate([values.ravel() for _, _, _, values, _, _ in shown])
    symmetric = _symmetric(every)
    lo, hi = _limits(every, symmetric, robust)
    cmap = cmap or ("RdBu_r" if symmetric else "viridis")
    fig, axes = plt.subplots(1, len(shown), figsize=(panel_size * len(shown) + 1.2, 0.8 * panel_size), squeeze=False)
    fig.set_layout_engine("constrained")
    titles = list(titles) if titles is not None else [s[2] for s in shown]
    for ax, (ds, _, _, values, note, shape), title in zip(axes[0], shown, titles, strict=True):
        mesh = _image(ax, ds, values, shape, cmap, lo, hi)
        ax.set_title(f"{title}\n({note})" if note else title, fontsize=9 if note else None)
    fig.colorbar(mesh, ax=axes[0].tolist(), label=label or _label(shown[0][1]))
    return fig


def jacobian_grid(
    ds: xr.Dataset,
    var: str | None = None,
    *,
    shape: Sequence[int] | None = None,
    cmap: str = "RdBu_r",
    share_limits: bool = True,
    robust: bool = False,
    panel_size: float = 2.6,
    mask_edge: bool = True,
) -> Any:
    """Component x axis panels of a Jacobian over a slice plane: row c, column a shows
    ``d value[c] / d axis[a]`` with a colour bar in the Jacobian's units. Colour limits are
    symmetric and shared by all panels (``share_limits``); ``robust`` takes them from the 2nd-98th
    percentiles; ``mask_edge`` blanks the points whose stencil reads the background (as
    :func:`slice_plot`). Returns the Figure."""
    plt = _pyplot()
    ds, _, shape = _plane(ds, None, shape)
    if var is None:
        names = [v for v in ds.data_vars if str(v).endswith("_jacobian")]
        if len(names) != 1:
            raise SamplingError(f"expected one '<field>_jacobian' variable (or pass var=), found {names}")
        var = str(names[0])
    J = ds[var]
    if J.dims[-1] != "axis":
        raise SamplingError(f"expected a Jacobian with a trailing 'axis' dim, {var} has dims {J.dims}")
    field = var.removesuffix("_jacobian")
    comps = list(J["component"].values) if "component" in J.dims else [None]
    axes_labels = list(J["axis"].values)
    values = np.asarray(J.values, np.float64)
    if comps == [None]:
        values = values[:, None, :]
    values, note = _masked(values, _edge_flags(ds, var) if mask_edge else None)
    lo, hi = _limits(values, True, robust) if share_limits else (None, None)
    fig, axes = plt.subplots(
        len(comps),
        len(axes_labels),
        figsize=(panel_size * len(axes_labels) + 1.2, panel_size * len(comps) + 0.6),
        layout="constrained",
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    units = J.attrs.get("units")
    for c, comp in enumerate(comps):
        for a, axis in enumerate(axes_labels):
            ax = axes[c, a]
            v = values[:, c, a]
            limits = (lo, hi) if share_limits else _limits(v, True, robust)
            mesh = _image(ax, ds, v, shape, cmap, *limits)
            top = field if comp is None else (str(comp) if len(str(comp)) <= 2 else f"{field}[{comp}]")
            ax.set_title(f"∂{top}/∂{axis}")
            if c < len(comps) - 1:
                ax.set_xlabel("")
            if a > 0:
                ax.set_ylabel("")
            if not share_limits:
                fig.colorbar(mesh, ax=ax)
    if share_limits:
        fig.colorbar(mesh, ax=axes, label=f"∂{field}/∂axis" + (f" [{units}]" if units else ""), shrink=0.9)
    fig.suptitle(
        f"{'Jacobian' if len(comps) > 1 or comps[0] is not None else 'Gradient'} of {field} "
        f"({J.attrs.get('sampling_mode', '')})".replace(" ()", "")
        + (f"; {note}" if note else "")
    )
    return fig


def line_plot(
    ds: xr.Dataset,
    var: str | xr.DataArray,
    *,
    component: str | int | None = None,
    axis: str | None = None,
    ax: Any = None,
    label: str | None = None,
    mask_edge: bool = True,
    **line_kwargs: Any,
) -> Any:
    """``var`` (or its ``component`` / Jacobian entry ``component``, ``axis``) along the points,
    against the distance from the first point; ``mask_edge`` leaves gaps where the stencil reads the
    background (as :func:`slice_plot`; the legend says how many). Returns the Axes (call again on it
    to compare)."""
    plt = _pyplot()
    dims = _point_dims(ds)
    if len(dims) != 1:
        raise SamplingError(f"expected points along a line (one point dim), got point dims {dims}")
    da = _variable(ds, var)
    sel = {}
    if "component" in da.dims:
        if component is None:
            raise SamplingError(f"{da.name} has components {list(da['component'].values)}: pass component=")
        sel["component"] = component
    if "axis" in da.dims:
        if axis is None:
            raise SamplingError(f"{da.name} has an axis dim {list(da['axis'].values)}: pass axis=")
        sel["axis"] = axis
    picked = da.sel({k: v for k, v in sel.items() if not isinstance(v, int)}).isel(
        {k: v for k, v in sel.items() if isinstance(v, int)}
    )
    names = [c for c in ("x", "y", "z", "i", "j", "k") if c in ds.coords and ds[c].dims == dims][:3]
    pts = np.stack([np.asarray(ds[c].values, np.float64) for c in names], axis=1)
    distance = np.linalg.norm(pts - pts[0], axis=1)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5), layout="constrained")
    what = str(da.name)
    if "axis" in sel:
        what = f"∂{what.removesuffix('_jacobian')}[{sel.get('component', '')}]/∂{sel['axis']}".replace("[]", "")
    elif "component" in sel:
        what = f"{what} {sel['component']}"
    values, note = _masked(np.asarray(picked.values, np.float64), _edge_flags(ds, str(da.name)) if mask_edge else None)
    name = label or da.attrs.get("sampling_mode", what)
    ax.plot(distance, values, label=f"{name} ({note})" if note else name, **line_kwargs)
    ax.set_xlabel(
        "distance along the line" + (f" [{ds[names[0]].attrs['units']}]" if ds[names[0]].attrs.get("units") else "")
    )
    ax.set_ylabel(_label(da, what))
    return ax


def _histogram_edges(ds: xr.Dataset, dim: str) -> np.ndarray:
    bounds = ds[f"{dim}_bounds"].values if f"{dim}_bounds" in ds.variables else None
    if bounds is None:
        raise SamplingError(f"expected the bounds {dim}_bounds of a vdbflow histogram's bins, found none")
    return np.append(bounds[:, 0], bounds[-1, 1])


def qr_plot(ds: xr.Dataset, count: str | None = None, ax: Any = None, cmap: str = "viridis", line: bool = True) -> Any:
    """The joint PDF of the velocity gradient's invariants Q and R (a :func:`vdbflow.histogram` of
    ``["q_criterion", "r_invariant"]``, or a ``reduce:`` job's result), as log10 of the density, with the
    Vieillefosse line 27 R^2 / 4 + Q^3 = 0 (where the discriminant of the gradient's eigenvalues changes
    sign; the teardrop of turbulence hugs its lower right branch).  A histogram normalised by <Q_w>
    (``normalize=``: attr ``normalized_by_mean_q_w``) is labelled Q/<Q_w> and R/<Q_w>^(3/2) (the line is the
    same in those units).  Returns the mesh (``.axes``: its Axes)."""
    from vdbflow.ops.statistics import pdf

    name = count or ("count" if "count" in ds else "q_criterion_r_invariant_count")
    if name not in ds or ds[name].dims[:2] != ("q_criterion_bin", "r_invariant_bin"):
        raise SamplingError(f"expected a Q-R histogram (dims q_criterion_bin, r_invariant_bin), got {name!r}")
    density = pdf(ds, name).transpose("q_criterion_bin", "r_invariant_bin").values
    eq, er = _histogram_edges(ds, "q_criterion_bin"), _histogram_edges(ds, "r_invariant_bin")
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(5.5, 4.5))
    with np.errstate(divide="ignore"):
        logd = np.where(density > 0, np.log10(density), np.nan)
    mesh = ax.pcolormesh(er, eq, logd, cmap=cmap, shading="flat")
    ax.figure.colorbar(mesh, ax=ax, label="log10 PDF")
    if line:  # Q = -(27 R^2 / 4)^(1/3)
        R = np.linspace(er[0], er[-1], 401)
        # black: seen over the colour map and over the empty (blank) bins alike
        ax.plot(R, -np.cbrt(27.0 * R * R / 4.0), color="black", ls="--", lw=1.0, label="27R²/4 + Q³ = 0")
        ax.set_ylim(eq[0], eq[-1])
        ax.legend(loc="upper right", fontsize="small")
    normalised = "normalized_by_mean_q_w" in ds.attrs  # bins in units of <Q_w> (histogram(normalize=...))
    ax.set_xlabel(r"$R/\langle Q_w\rangle^{3/2}$" if normalised else "R")
    ax.set_ylabel(r"$Q/\langle Q_w\rangle$" if normalised else "Q")
    return mesh


def pdf_plot(ds: xr.Dataset, count: str = "count", ax: Any = None, log: bool = True) -> Any:
    """The PDF of a one-quantity :func:`vdbflow.histogram` as a step line (log scale by default)."""
    from vdbflow.ops.statistics import pdf

    if count not in ds or ds[count].ndim != 1:
        raise SamplingError(f"expected a histogram of one quantity, got {count!r}")
    dim = ds[count].dims[0]
    edges = _histogram_edges(ds, dim)
    if ax is None:
        _, ax = _pyplot().subplots(figsize=(5.5, 3.5))
    ax.stairs(pdf(ds, count).values, edges)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(dim.removesuffix("_bin"))
    ax.set_ylabel("PDF")
    return ax


class PlotMethods:
    """``ds.vdbflow.analysis.plot``: :func:`slice_plot`, :func:`jacobian_grid` and :func:`line_plot` on ``ds``."""

    def __init__(self, ds: xr.Dataset):
        self._ds = ds

    def slice(self, var: str | xr.DataArray, **kwargs: Any) -> Any:  # noqa: A003 - reads as ds.vdbflow.analysis.plot.slice
        """``var`` (a variable, or a flow quantity by name such as ``"q_criterion"``) over a slice plane;
        keyword arguments as :func:`slice_plot` (component, shape, ax, cmap, symmetric, robust, title)."""
        return slice_plot(self._ds, var, **kwargs)

    def jacobian_grid(self, var: str | None = None, **kwargs: Any) -> Any:
        """Component x axis panels of the Jacobian over a slice plane, one colour bar; keyword arguments
        as :func:`jacobian_grid`."""
        return jacobian_grid(self._ds, var, **kwargs)

    def line(self, var: str | xr.DataArray, **kwargs: Any) -> Any:
        """``var`` (or one component / Jacobian entry) along the points against the distance from the
        first; keyword arguments as :func:`line_plot`. Returns the Axes."""
        return line_plot(self._ds, var, **kwargs)

    def qr(self, **kwargs: Any) -> Any:
        """The Q-R joint PDF of a histogram Dataset, with the Vieillefosse line (:func:`qr_plot`)."""
        return qr_plot(self._ds, **kwargs)

    def pdf(self, **kwargs: Any) -> Any:
        """The PDF of a one-quantity histogram Dataset (:func:`pdf_plot`)."""
        return pdf_plot(self._ds, **kwargs)
