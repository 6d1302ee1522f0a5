"""Grid-wide fields: the Jacobian, the Hessian or a derived quantity at every active voxel, as a new
sparse volume on the same topology."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from vdbflow.analysis import flow
from vdbflow.core import tree, units
from vdbflow.core.volume import Topology, Volume
from vdbflow.devices import cpu
from vdbflow.errors import SamplingError
from vdbflow.ops.sampling import MODES, sample_grad_arrays

GRID_SCHEMES = ("fd2", "fd4", "fd6", "fd8")  # centred differences of order 2, 4, 6, 8 at the voxels
HESSIAN_PAIRS = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))  # the channels of a Hessian field


def _grid_jacobian(vol: Volume, scheme: str, dvol: Any = None, device: str = "cpu") -> np.ndarray:
    """(n_active, C, 3) or (n_active, 3) world-space Jacobians at the active voxels."""
    if scheme not in GRID_SCHEMES:
        raise SamplingError(f"expected scheme to be one of {', '.join(map(repr, GRID_SCHEMES))}, got {scheme!r}")
    if not vol.value_type.is_float:
        raise SamplingError(f"expected float data for a gradient field, got {vol.value_type.name}")
    if dvol is not None:
        pts = vol.active_voxels().astype(np.float64)  # voxel centres: the kernels take the node differences there
        ds = dvol.sample_grad(pts, scheme, space="index", jacobian_space="world").compute(scheduler=dvol.client)
        jac = ds[f"{vol.name}_jacobian"].values
    elif device == "cuda":  # the same per-node kernel on the GPU, one thread per voxel
        from vdbflow.devices.cuda import cupy_module

        cupy = cupy_module()
        pts = cupy.asarray(vol.active_voxels().astype(np.float64))
        _, jac = sample_grad_arrays(vol, pts, scheme, space="index", jacobian_space="world", device="cuda")
        jac = jac.get()
    elif device == "cpu":  # the same per-node kernel, looping over the leaves' active voxels directly
        jac = cpu.grid_gradient(vol, MODES[scheme], vol.transform.kernel_parameters(), True)
        if vol.components == 1:
            jac = jac[:, 0, :]
    else:
        raise SamplingError(f"expected device 'cpu' or 'cuda', got {device!r}")
    return jac


def _on_voxels(vol: Volume, values: np.ndarray, name: str,
               component_names: list[str] | None = None) -> Volume:
    """An index-layout volume holding ``values`` (one row per active voxel, ``active_voxels()``
    order) on ``vol``'s topology; tiles read the background 0 (the gradient of a constant)."""
    t = vol.topology
    rows_follow_voxels = t.value_count == t.active_voxel_count and np.array_equal(
        t.leaf_offset, tree.word_prefix(t.masks)[1])
    if rows_follow_voxels:
        if t.tile_count:
            t = Topology(t.leaf_origins, t.masks, t.transform, t.tile_origins, t.tile_sizes)
        return t.with_data(values, background=0, name=name, component_names=component_names)
    # an index grid from a file whose value rows do not follow its active voxels: a fresh topology
    return Volume.from_active(vol.active_voxels(), vol.transform).with_data(values, background=0, name=name,
                                                            component_names=component_names)


def gradient_field(vol: Volume, scheme: str = "fd4", *, distributed: Any = None, device: str = "cpu") -> Volume:
    """The world-space Jacobian at every active voxel with centred differences (``fd2``, ``fd4``,
    ``fd6``, ``fd8``), as an index-layout volume on ``vol``'s topology with C x 3 channels named
    ``d<component>/d<axis>`` (tiles read 0).  ``distributed`` (a :class:`DistributedVolume` of
    ``vol``) computes it on the cluster, with the same result; ``device="cuda"`` on the GPU (CuPy).
    :func:`split_channels` turns the
    channels into vec3 volumes that .nvdb files can hold."""
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
    from vdbflow.ops.hessian import sample_hessian_arrays

    if scheme not in GRID_SCHEMES:
        raise SamplingError(f"expected scheme to be one of {', '.join(map(repr, GRID_SCHEMES))}, got {scheme!r}")
    if not vol.value_type.is_float:
        raise SamplingError(f"expected float data for a Hessian field, got {vol.value_type.name}")
    pts = vol.active_voxels().astype(np.float64)  # voxel centres: the node Hessians themselves
    if dvol is not None:
        ds = dvol.sample_hessian(pts, scheme, space="index", hessian_space="world").compute(scheduler=dvol.client)
        hess = ds[f"{vol.name}_hessian"].values
    elif device in ("cpu", "cuda"):
        if device == "cuda":
            from vdbflow.devices.cuda import cupy_module

            pts = cupy_module().asarray(pts)
        _, _, hess = sample_hessian_arrays(vol, pts, scheme, space="index", hessian_space="world", device=device)
        hess = hess.get() if device == "cuda" else hess
    else:
        raise SamplingError(f"expected device 'cpu' or 'cuda', got {device!r}")
    return hess.reshape(len(pts), vol.components, 3, 3)


def hessian_field(vol: Volume, scheme: str = "fd4", *, distributed: Any = None, device: str = "cpu") -> Volume:
    """The world-space Hessian at every active voxel from centred second differences (``fd2``,
    ``fd4``, ``fd6``, ``fd8``), as an index-layout volume on ``vol``'s topology with C x 6 channels
    ``d2<component>/d<a>d<b>`` in the order xx, yy, zz, xy, xz, yz (the Hessian is symmetric; tiles
    read 0)."""
    hess = _grid_hessian(vol, scheme, distributed, device)
    C = vol.components
    channels = np.stack([hess[:, :, a, b] for a, b in HESSIAN_PAIRS], axis=-1).reshape(len(hess), 6 * C)
    comps = vol.component_names if C > 1 else ("",)
    names = [f"d2{c}/d{'xyz'[a]}d{'xyz'[b]}" for c in comps for a, b in HESSIAN_PAIRS]
    out = _on_voxels(vol, channels, f"{vol.name}_hessian", names)
    if vol.units and vol.length_units:
        out.units, out.length_units = units.divide(vol.units, units.power(vol.length_units, 2)), vol.length_units
    return out


def derived_field(vol: Volume, quantity: str, scheme: str = "fd4", *, distributed: Any = None,
                  device: str = "cpu") -> Volume:
    """A derived quantity at every active voxel, as a volume on the same voxels: a scalar of a vec3
    field (any one-channel function of :mod:`vdbflow.flow`, e.g. ``"q_criterion"``, ``"lambda2"``,
    ``"divergence"``, ``"vorticity_magnitude"``), or ``"laplacian"`` of any float field (one channel
    per component, from the node second differences of ``scheme``)."""
    if quantity == "laplacian":
        hess = _grid_hessian(vol, scheme, distributed, device)
        lap = np.trace(hess, axis1=-2, axis2=-1)
        out = _on_voxels(vol, lap if vol.components > 1 else lap[:, 0], "laplacian",
                         list(vol.component_names) if vol.components > 1 else None)
        if vol.units and vol.length_units:
            out.units, out.length_units = units.divide(vol.units, units.power(vol.length_units, 2)), vol.length_units
        return out
    fn = getattr(flow, quantity, None)
    if vol.components != 3 or fn is None or quantity in ("vorticity", "strain_rate", "rotation_rate", "helicity"):
        raise SamplingError(f"expected a vec3 volume and a scalar quantity of vdbflow.flow, got {vol.components} "
                            f"components and {quantity!r}")
    jac = _grid_jacobian(vol, scheme, distributed, device)
    da = xr.DataArray(jac, dims=("point", "component", "axis"))
    values = np.asarray(fn(da).values)
    return _on_voxels(vol, values, quantity)


def q_criterion_field(vol: Volume, scheme: str = "fd4", *, distributed: Any = None, device: str = "cpu") -> Volume:
    """Q-criterion at every active voxel (see :func:`derived_field`)."""
    return derived_field(vol, "q_criterion", scheme, distributed=distributed, device=device)
