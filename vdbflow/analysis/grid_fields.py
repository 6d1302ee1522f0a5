"""Grid-wide fields: the Jacobian, the Hessian or a derived quantity at every active voxel, as a new
sparse volume on the same topology."""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np
import xarray as xr

from vdbflow.analysis import flow
from vdbflow.core import outputs, schema, tree, units
from vdbflow.core.volume import Volume, same_topology
from vdbflow.devices import array_module, run
from vdbflow.errors import SamplingError, VolumeError
from vdbflow.ops.hessian import sample_hessian_arrays
from vdbflow.ops.sampling import MODES

GRID_SCHEMES = ("fd2", "fd4", "fd6", "fd8")  # centred differences of order 2, 4, 6, 8 at the voxels
HESSIAN_PAIRS = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))  # the channels of a Hessian field


def _grid_jacobian(vol: Volume, scheme: str, dvol: Any = None, device: str = "cpu") -> np.ndarray:
    """(n_active, C, 3) or (n_active, 3) world-space Jacobians at the active voxels."""
    if scheme not in GRID_SCHEMES:
        raise SamplingError(f"expected scheme to be one of {', '.join(map(repr, GRID_SCHEMES))}, got {scheme!r}")
    if not vol.value_type.is_float:
        raise SamplingError(f"expected float data for a gradient field, got {vol.value_type.name}")
    if dvol is not None:
        _check_distributed_of(vol, dvol)
        pts = vol.active_voxels().astype(np.float64)  # voxel centres: the kernels take the node differences there
        ds = dvol.sample_grad(pts, scheme, space="index", jacobian_space="world").compute(scheduler=dvol.client)
        _check_values_of(vol, ds[schema.value_name(vol.name)].values)
        jac = ds[f"{vol.name}_jacobian"].values
    elif device in ("cpu", "cuda"):  # the per-node kernel, looping over the leaves' active voxels directly
        jac = run("grid_gradient", vol.kernel_arrays(), vol.topology.leaf_origins, MODES[scheme], True, device=device)
        jac = jac.get() if device == "cuda" else jac
        if vol.components == 1:
            jac = jac[:, 0, :]
    else:
        raise SamplingError(f"expected device 'cpu' or 'cuda', got {device!r}")
    return jac


def _check_distributed_of(vol: Volume, dvol: Any) -> None:
    """Refuse a ``distributed=`` volume that is not ``vol`` distributed: its name, value type,
    components, transform and active voxels must be ``vol``'s."""
    t = dvol.template
    mine = (vol.name, vol.value_type.name, vol.components, vol.index_to_world.tolist())
    theirs = (t.name, t.value_type.name, t.components, t.index_to_world.tolist())
    if mine != theirs:
        raise VolumeError(
            f"expected distributed= to be this volume distributed (name, value type, components, "
            f"index-to-world {mine}), got a DistributedVolume of {theirs}"
        )
    if dvol.topology is None or not same_topology(dvol.topology, vol.topology):
        raise VolumeError(
            f"expected distributed= to be this volume distributed ({vol.active_voxel_count:,} active voxels in "
            f"{vol.leaf_count:,} leaves), got a DistributedVolume of other active voxels "
            f"({dvol.template_leaf_count:,} leaves)"
        )


def _check_values_of(vol: Volume, sampled: np.ndarray) -> None:
    """The values the distributed volume gave at ``vol``'s voxel centres must be ``vol``'s own (a
    volume on the same voxels with other data is refused; NaN and inf neighbours are not compared)."""
    own = vol.active_values().reshape(sampled.shape)
    both = np.isfinite(own) & np.isfinite(sampled)
    differ = both & (own != sampled)
    if differ.any():
        row = np.argwhere(differ)[0]
        raise VolumeError(
            f"expected distributed= to hold this volume's values, got other values at {int(differ.sum()):,} of "
            f"{own.size:,} entries, e.g. voxel {vol.active_voxels()[row[0]].tolist()}: {own[tuple(row)]!r} here, "
            f"{sampled[tuple(row)]!r} distributed"
        )


def _on_voxels(vol: Volume, values: np.ndarray, name: str, component_names: list[str] | None = None) -> Volume:
    """An index-layout volume holding ``values`` (one row per active voxel, ``active_voxels()``
    order) on ``vol``'s topology and periods; tiles read the background 0 (the gradient of a constant)."""
    t = vol.topology
    rows_follow_voxels = t.value_count == t.active_voxel_count and np.array_equal(
        t.leaf_offset, tree.word_prefix(t.masks)[1]
    )
    if rows_follow_voxels:
        if t.tile_count:
            t = t.with_leaves(t.leaf_origins, t.masks)  # a fresh topology: its own value rows
            t.periodic = vol.periodic
        return t.with_data(values, background=0, name=name, component_names=component_names)
    # an index grid from a file whose value rows do not follow its active voxels: a fresh topology
    return Volume.from_active(vol.active_voxels(), vol.transform, periodic=vol.periodic).with_data(
        values, background=0, name=name, component_names=component_names
    )


def gradient_field(vol: Volume, scheme: str = "fd4", *, distributed: Any = None, device: str = "cpu") -> Volume:
    """The world-space Jacobian at every active voxel, as a new volume on the same voxels.

    The derivatives are centred differences at the voxel centres (``fd2``, ``fd4``, ``fd6``,
    ``fd8``: orders 2 to 8), taken along the world axes.  Differences that reach past the active
    voxels read what the volume holds there (inactive voxels' values, tiles or the background).

    Parameters
    ----------
    vol : Volume
        A float32 or float64 volume with C components.
    scheme : {"fd2", "fd4", "fd6", "fd8"}, default ``"fd4"``
        The centred-difference scheme.
    distributed : DistributedVolume, optional
        A :class:`~vdbflow.DistributedVolume` of ``vol``: computes the field on its cluster, with the
        same result (a distributed volume of another volume is refused).
    device : {"cpu", "cuda"}, default ``"cpu"``
        Where the kernels run; ``"cuda"`` needs CuPy and a GPU.

    Returns
    -------
    Volume
        An index-layout volume on ``vol``'s topology named ``vol.name + "_jacobian"``, with C x 3
        channels per active voxel named ``d<component>/d<axis>`` (``d/dx, d/dy, d/dz`` for scalar
        data), in the Jacobian dtype (float32 for float32 data); tiles read 0 (the gradient of a
        constant).  Units ``vol.units / vol.length_units`` (simplified) when the volume has both,
        and the same ``length_units``.

    Raises
    ------
    SamplingError
        An unknown ``scheme`` or ``device``, or integer data.
    VolumeError
        A ``distributed`` volume that is not ``vol`` (other name, type, transform, voxels or values).
    DeviceError
        ``device="cuda"`` without CuPy or a GPU.

    See Also
    --------
    hessian_field, derived_field
    vdbflow.split_channels : turns the channels into vec3 volumes that .nvdb files can hold.

    Examples
    --------
    ``1 + 2 i + 3 j`` on voxels 0.5 m wide has the world gradient ``(4, 6, 0)`` per metre:

    >>> import numpy as np
    >>> import vdbflow
    >>> i, j, k = np.meshgrid(np.arange(8), np.arange(8), np.arange(8), indexing="ij")
    >>> vol = vdbflow.Volume.from_dense(1.0 + 2.0 * i + 3.0 * j, voxel_size=0.5)
    >>> vol.units, vol.length_units = "K", "m"
    >>> grad = vdbflow.gradient_field(vol, "fd2")
    >>> grad.name, grad.component_names, grad.units, grad.active_voxel_count
    ('value_jacobian', ('d/dx', 'd/dy', 'd/dz'), 'K/m', 512)
    >>> grad.sample([[1.5, 1.5, 1.5]])["value_jacobian"].values.tolist()  # at voxel (3, 3, 3)
    [[4.0, 6.0, 0.0]]
    """
    jac = _grid_jacobian(vol, scheme, distributed, device)
    C = vol.components
    names = [f"d{c}/d{a}" for c in vol.component_names for a in "xyz"] if C > 1 else ["d/dx", "d/dy", "d/dz"]
    out = _on_voxels(vol, jac.reshape(len(jac), 3 * C), f"{vol.name}_jacobian", names)
    if vol.units and vol.length_units:
        out.units, out.length_units = units.divide(vol.units, vol.length_units), vol.length_units
    return out


def _grid_hessian(vol: Volume, scheme: str, dvol: Any = None, device: str = "cpu") -> np.ndarray:
    """(n_active, C, 3, 3) world-space Hessians at the active voxels: the node second differences
    (diagonal-direction mixed terms) of an fd2/fd4/fd6/fd8 ``scheme``."""
    if scheme not in GRID_SCHEMES:
        raise SamplingError(f"expected scheme to be one of {', '.join(map(repr, GRID_SCHEMES))}, got {scheme!r}")
    if not vol.value_type.is_float:
        raise SamplingError(f"expected float data for a Hessian field, got {vol.value_type.name}")
    pts = vol.active_voxels().astype(np.float64)  # voxel centres: the node Hessians themselves
    if dvol is not None:
        _check_distributed_of(vol, dvol)
        ds = dvol.sample_hessian(pts, scheme, space="index", hessian_space="world").compute(scheduler=dvol.client)
        _check_values_of(vol, ds[schema.value_name(vol.name)].values)
        hess = ds[f"{vol.name}_hessian"].values
    elif device in ("cpu", "cuda"):
        if device == "cuda":
            pts = array_module("cuda").asarray(pts)
        _, _, hess = sample_hessian_arrays(vol, pts, scheme, space="index", hessian_space="world", device=device)
        hess = hess.get() if device == "cuda" else hess
    else:
        raise SamplingError(f"expected device 'cpu' or 'cuda', got {device!r}")
    return hess.reshape(len(pts), vol.components, 3, 3)


def hessian_field(vol: Volume, scheme: str = "fd4", *, distributed: Any = None, device: str = "cpu") -> Volume:
    """The world-space Hessian at every active voxel, as a new volume on the same voxels.

    The second derivatives are centred second differences at the voxel centres (``fd2``, ``fd4``,
    ``fd6``, ``fd8``; diagonal-direction stencils for the mixed terms), mapped to the world axes.

    Parameters
    ----------
    vol : Volume
        A float32 or float64 volume with C components.
    scheme : {"fd2", "fd4", "fd6", "fd8"}, default ``"fd4"``
        The centred-difference scheme.
    distributed : DistributedVolume, optional
        A :class:`~vdbflow.DistributedVolume` of ``vol``: computes the field on its cluster.
    device : {"cpu", "cuda"}, default ``"cpu"``
        Where the kernels run; ``"cuda"`` needs CuPy and a GPU.

    Returns
    -------
    Volume
        An index-layout volume on ``vol``'s topology named ``vol.name + "_hessian"``, with C x 6
        channels ``d2<component>/d<a>d<b>`` in the order xx, yy, zz, xy, xz, yz (the Hessian is
        symmetric; tiles read 0).  Units ``vol.units / vol.length_units²`` (simplified) when the
        volume has both.

    Raises
    ------
    SamplingError
        An unknown ``scheme`` or ``device``, or integer data.
    DeviceError
        ``device="cuda"`` without CuPy or a GPU.

    See Also
    --------
    gradient_field : first derivatives.
    derived_field : ``"laplacian"``, the trace of this Hessian.
    vdbflow.sample_hessian : Hessians at arbitrary points.
    """
    hess = _grid_hessian(vol, scheme, distributed, device)
    C = vol.components
    channels = np.stack([hess[:, :, a, b] for a, b in HESSIAN_PAIRS], axis=-1).reshape(len(hess), 6 * C)
    comps = vol.component_names if C > 1 else ("",)
    names = [f"d2{c}/d{'xyz'[a]}d{'xyz'[b]}" for c in comps for a, b in HESSIAN_PAIRS]
    out = _on_voxels(vol, channels, f"{vol.name}_hessian", names)
    if vol.units and vol.length_units:
        out.units, out.length_units = units.divide(vol.units, units.power(vol.length_units, 2)), vol.length_units
    return out


# the one-channel functions of analysis.flow that derived_field computes at every voxel: the scalar
# quantities of the Jacobian alone (the table of outputs)
FIELD_QUANTITIES = outputs.scalar_quantities(velocity=False)


def derived_field(
    vol: Volume, quantity: str, scheme: str = "fd4", *, distributed: Any = None, device: str = "cpu"
) -> Volume:
    """A derived quantity at every active voxel, as a new volume on the same voxels.

    Either a scalar of a vec3 field - any one-channel function of :mod:`vdbflow.analysis.flow` applied to the
    world-space Jacobian that :func:`gradient_field` computes with ``scheme`` - or the Laplacian of
    any float field, from the node second differences of ``scheme``.

    Parameters
    ----------
    vol : Volume
        A float32 or float64 volume: vec3 (3 components) for the :mod:`vdbflow.analysis.flow` quantities, any
        number of components for ``"laplacian"``.
    quantity : str
        ``"laplacian"``, or the name of a one-channel function of :mod:`vdbflow.analysis.flow`, e.g.
        ``"q_criterion"``, ``"lambda2"``, ``"divergence"``, ``"vorticity_magnitude"`` (not
        ``"vorticity"``, ``"strain_rate"``, ``"rotation_rate"`` or ``"helicity"``).
    scheme : {"fd2", "fd4", "fd6", "fd8"}, default ``"fd4"``
        The centred-difference scheme.
    distributed : DistributedVolume, optional
        A :class:`~vdbflow.DistributedVolume` of ``vol``: computes the derivatives on its cluster.
    device : {"cpu", "cuda"}, default ``"cpu"``
        Where the kernels run; ``"cuda"`` needs CuPy and a GPU.

    Returns
    -------
    Volume
        An index-layout volume on ``vol``'s topology (tiles read 0) named ``quantity``: one channel
        per active voxel for the flow quantities, in the units ``sample_grad`` gives them (``1/s^2``
        for Q of m/s over m); for ``"laplacian"`` one channel per component of ``vol`` (named like
        them), in units ``vol.units / vol.length_units²``; units only when the volume has both.

    Raises
    ------
    SamplingError
        A quantity that is neither ``"laplacian"`` nor a scalar of :mod:`vdbflow.analysis.flow`, a flow
        quantity of a volume that is not vec3, an unknown ``scheme`` or ``device``, or integer data.
    DeviceError
        ``device="cuda"`` without CuPy or a GPU.

    See Also
    --------
    q_criterion_field : ``derived_field(vol, "q_criterion")``.
    gradient_field, hessian_field
    """
    if quantity == "laplacian":
        hess = _grid_hessian(vol, scheme, distributed, device)
        lap = np.trace(hess, axis1=-2, axis2=-1)
        out = _on_voxels(
            vol,
            lap if vol.components > 1 else lap[:, 0],
            "laplacian",
            list(vol.component_names) if vol.components > 1 else None,
        )
        if vol.units and vol.length_units:
            out.units, out.length_units = units.divide(vol.units, units.power(vol.length_units, 2)), vol.length_units
        return out
    if quantity not in FIELD_QUANTITIES:
        close = difflib.get_close_matches(str(quantity), ("laplacian", *FIELD_QUANTITIES), n=1)
        raise SamplingError(
            f"expected a quantity among 'laplacian', {', '.join(map(repr, FIELD_QUANTITIES))}, got {quantity!r}"
            + (f"; did you mean {close[0]!r}?" if close else "")
            + (
                " (vectors and tensors are not fields of one channel: sample them with sample_grad)"
                if quantity in outputs.TABLE and outputs.TABLE[quantity].kind in ("derived", "tensor")
                else ""
            )
        )
    if vol.components != 3:
        raise SamplingError(f"expected a vec3 volume for {quantity!r}, got {vol.components} component(s)")
    jac = _grid_jacobian(vol, scheme, distributed, device)
    da = xr.DataArray(jac, dims=("point", "component", "axis"))
    named = getattr(flow, quantity, None)  # NumPy's; a quantity without one (r_invariant): the kernels' formula
    values = np.asarray((named(da) if named is not None else flow.derived(da, quantity)).values)
    out = _on_voxels(vol, values, quantity)
    if vol.units and vol.length_units:  # the units sample_grad gives the same quantity
        attrs = schema.derived_attrs(quantity, units.divide(vol.units, vol.length_units), vol.units)
        out.units, out.length_units = attrs.get("units"), vol.length_units
    return out


def q_criterion_field(vol: Volume, scheme: str = "fd4", *, distributed: Any = None, device: str = "cpu") -> Volume:
    """The Q-criterion of a velocity field at every active voxel, as a new volume on the same voxels.

    ``Q = (|Omega|² - |S|²) / 2`` (Frobenius norms of the rotation and strain rates) of the
    world-space velocity gradient from centred differences; Q > 0 where rotation dominates strain.
    The same as ``derived_field(vol, "q_criterion", ...)``.

    Parameters
    ----------
    vol : Volume
        A vec3 float32 or float64 velocity volume.
    scheme : {"fd2", "fd4", "fd6", "fd8"}, default ``"fd4"``
        The centred-difference scheme of the gradient.
    distributed : DistributedVolume, optional
        A :class:`~vdbflow.DistributedVolume` of ``vol``: computes the gradient on its cluster.
    device : {"cpu", "cuda"}, default ``"cpu"``
        Where the kernels run; ``"cuda"`` needs CuPy and a GPU.

    Returns
    -------
    Volume
        An index-layout scalar volume named ``"q_criterion"`` on ``vol``'s topology (tiles read 0),
        in the Jacobian dtype, in units of (velocity units / length units)² (1/s^2 for m/s over m)
        when the volume has both.

    Raises
    ------
    SamplingError
        A volume that is not vec3 float data, or an unknown ``scheme`` or ``device``.
    DeviceError
        ``device="cuda"`` without CuPy or a GPU.

    See Also
    --------
    derived_field : the other scalars of :mod:`vdbflow.analysis.flow`.
    vdbflow.analysis.flow.q_criterion : Q from a sampled Jacobian.

    Examples
    --------
    A solid-body rotation ``u = (-y, x, 0)`` about the volume's centre is pure rotation, Q = 1:

    >>> import numpy as np
    >>> import vdbflow
    >>> i, j, k = np.meshgrid(np.arange(8.0), np.arange(8.0), np.arange(8.0), indexing="ij")
    >>> u = np.stack([3.5 - j, i - 3.5, np.zeros_like(k)], axis=-1)
    >>> vel = vdbflow.Volume.from_dense(u, active=np.ones(i.shape, bool), name="velocity")
    >>> q = vdbflow.q_criterion_field(vel, "fd2")
    >>> q.name, q.components, q.active_voxel_count
    ('q_criterion', 1, 512)
    >>> q.sample([[3.0, 4.0, 3.0]], space="index")["q_criterion"].values.tolist()
    [1.0]
    """
    return derived_field(vol, "q_criterion", scheme, distributed=distributed, device=device)
