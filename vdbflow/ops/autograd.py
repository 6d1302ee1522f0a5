"""PyTorch hook: sampling as a differentiable ``torch.autograd.Function``.

Optional (``pip install torch``); the forward and backward passes run the kernels in kernels/
through :func:`vdbflow.sample_grad_arrays` and :func:`vdbflow.sample_grad_vjp`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow.core.volume import Topology
from vdbflow.errors import DeviceError
from vdbflow.ops.sampling import sample_grad_arrays
from vdbflow.ops.vjp import sample_grad_vjp

try:
    import torch
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("vdbflow.ops.autograd needs PyTorch: pip install torch") from err


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.device.type != "cpu":
        raise DeviceError(f"expected CPU tensors for vdbflow.ops.autograd, got a tensor on {t.device}")
    return t.detach().numpy()


class SampleGrad(torch.autograd.Function):
    """(points, voxel_data, background) -> (values, jacobian) on an index-layout topology."""

    @staticmethod
    def forward(
        ctx: Any,
        points: torch.Tensor,
        voxel_data: torch.Tensor,
        background: torch.Tensor,
        topology: Topology,
        mode: str,
        space: str,
        jacobian_space: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        vol = topology.with_data(_numpy(voxel_data), _numpy(background))
        pts = _numpy(points)
        values, jac = sample_grad_arrays(vol, pts, mode, space=space, jacobian_space=jacobian_space)
        ctx.volume, ctx.points = vol, pts
        ctx.options = (mode, space, jacobian_space)
        return torch.from_numpy(values), torch.from_numpy(jac)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, adj_values: torch.Tensor, adj_jacobian: torch.Tensor) -> tuple:
        mode, space, jacobian_space = ctx.options
        r = sample_grad_vjp(
            ctx.volume,
            ctx.points,
            _numpy(adj_values.contiguous()),
            _numpy(adj_jacobian.contiguous()),
            mode,
            space,
            jacobian_space,
        )
        need_points, need_data, need_bg = ctx.needs_input_grad[:3]
        return (
            torch.from_numpy(np.ascontiguousarray(r.points)) if need_points else None,
            torch.from_numpy(np.ascontiguousarray(r.voxel_data)) if need_data else None,
            torch.as_tensor(np.asarray(r.background)) if need_bg else None,
            None,
            None,
            None,
            None,
        )


def sample_grad(
    topology: Topology,
    points: torch.Tensor,
    voxel_data: torch.Tensor,
    background: torch.Tensor,
    mode: str = "linear",
    space: str = "index",
    jacobian_space: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable values (N,) / (N, C) and Jacobians (N, 3) / (N, C, 3) of the field
    ``voxel_data`` ((n_active,) or (n_active, C), in ``topology.active_voxels()`` order) at ``points``
    (N, 3).  Gradients flow to ``points``, ``voxel_data`` and ``background`` (second derivatives
    through the Jacobian included, as in :func:`vdbflow.sample_grad_vjp`)."""
    background = torch.as_tensor(background, dtype=voxel_data.dtype)
    return SampleGrad.apply(
        points, voxel_data, background, topology, mode, space, space if jacobian_space is None else jacobian_space
    )
