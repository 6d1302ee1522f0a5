"""Gradient fields over the grid: the Jacobian (or a derived scalar) at every active voxel, as a new
sparse volume on the same topology."""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from . import flow
from .errors import SamplingError
from .sampling import sample_grad_arrays
from .volume import Volume

GRID_SCHEMES = ("fd2", "fd4", "fd6")  # centred differences of order 2, 4, 6 at the voxels


def _grid_jacobian(vol: Volume, scheme: str, dvol: Any = None) -> tuple[np.ndarray, np.ndarray]:
    if scheme not in GRID_SCHEMES:
        raise SamplingError(f"expected scheme to be one of {', '.join(map(repr, GRID_SCHEMES))}, got {scheme!r}")
    ijk = vol.active_voxels()
    pts = ijk.astype(np.float64)  # voxel centres: the schemes' node differences, exactly
    if dvol is not None:
        ds = dvol.sample_grad(pts, scheme, space="index", jacobian_space="world").compute(scheduler=dvol.client)
        jac = ds[f"{vol.name}_jacobian"].values
    else:
        _, jac = sample_grad_arrays(vol, pts, scheme, space="index", jacobian_space="world")
    return ijk, jac


def gradient_field(vol: Volume, scheme: str = "fd4", *, distributed: Any = None) -> Volume:
    """The world-space Jacobian at every active voxel with centred differences (``fd2``, ``fd4``,
    ``fd6``), as an index-layout volume on ``vol``'s topology with C x 3 channels named
    ``d<component>/d<axis>``.  ``distributed`` (a :class:`DistributedVolume` of ``vol``) computes
    it on the cluster, with the same result."""
    ijk, jac = _grid_jacobian(vol, scheme, distributed)
    C = vol.components
    names = [f"d{c}/d{a}" for c in vol.component_names for a in "xyz"] if C > 1 else ["d/dx", "d/dy", "d/dz"]
    out = vol.topology.with_data(jac.reshape(len(ijk), 3 * C), background=0, name=f"{vol.name}_jacobian",
                                 component_names=names) if vol.index_layout else \
        Volume.from_voxels(ijk, jac.reshape(len(ijk), 3 * C), 0, vol.transform, name=f"{vol.name}_jacobian",
                           component_names=names)
    return out


def derived_field(vol: Volume, quantity: str, scheme: str = "fd4", *, distributed: Any = None) -> Volume:
    """A derived scalar of a vec3 field (any one-channel function of :mod:`vdbflow.flow`, e.g.
    ``"q_criterion"``, ``"lambda2"``, ``"divergence"``, ``"vorticity_magnitude"``) at every active
    voxel, as a one-channel volume on the same voxels."""
    fn = getattr(flow, quantity, None)
    if vol.components != 3 or fn is None or quantity in ("vorticity", "strain_rate", "rotation_rate", "helicity"):
        raise SamplingError(f"expected a vec3 volume and a scalar quantity of vdbflow.flow, got {vol.components} "
                            f"components and {quantity!r}")
    ijk, jac = _grid_jacobian(vol, scheme, distributed)
    da = xr.DataArray(jac, dims=("point", "component", "axis"))
    values = np.asarray(fn(da).values)
    if vol.index_layout:
        return vol.topology.with_data(values, background=0, name=quantity)
    return Volume.from_voxels(ijk, values, 0, vol.transform, name=quantity)


def q_criterion_field(vol: Volume, scheme: str = "fd4", *, distributed: Any = None) -> Volume:
    """Q-criterion at every active voxel (see :func:`derived_field`)."""
    return derived_field(vol, "q_criterion", scheme, distributed=distributed)
