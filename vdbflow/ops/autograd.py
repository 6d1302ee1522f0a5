"""PyTorch hook: sampling as a differentiable ``torch.autograd.Function``.

Optional (``pip install torch``); the forward and backward passes run the kernels in kernels/
through :func:`vdbflow.sample_grad_arrays` and :func:`vdbflow.sample_grad_vjp`.  CUDA tensors run on
the GPU: points, adjoints and results cross between PyTorch and CuPy through DLPack, without a copy
(the voxel data are copied to the host once a call: a volume lives on the host and the backend puts it
on the GPU).  ``device="cuda"`` with CPU tensors copies them to the GPU and the results back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow.core.volume import Topology
from vdbflow.devices import array_module
from vdbflow.errors import DeviceError
from vdbflow.ops.sampling import sample_grad_arrays
from vdbflow.ops.vjp import sample_grad_vjp

try:
    import torch
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("vdbflow.ops.autograd needs PyTorch: pip install torch") from err


def _device_of(*tensors: torch.Tensor, device: str = "auto") -> str:
    """``"cuda"`` for CUDA tensors (or ``device="cuda"``), ``"cpu"`` for CPU tensors; tensors on other
    devices, or mixed, are refused."""
    kinds = {t.device.type for t in tensors}
    if not kinds <= {"cpu", "cuda"} or len(kinds) > 1:
        raise DeviceError(f"expected CPU tensors or CUDA tensors for vdbflow.ops.autograd, got tensors on {kinds}")
    if device not in ("auto", "cpu", "cuda"):
        raise DeviceError(f"expected device 'auto', 'cpu' or 'cuda', got {device!r}")
    found = kinds.pop()
    if device == "cpu" and found == "cuda":
        raise DeviceError("expected CPU tensors for device='cpu', got CUDA tensors")
    return "cuda" if "cuda" in (device, found) else "cpu"


def _to_kernels(t: torch.Tensor, device: str) -> Any:
    """A tensor as the backend of ``device`` takes it: NumPy; CuPy through DLPack for a CUDA tensor (no
    copy); a CPU tensor with ``device="cuda"`` copied to the GPU."""
    if device == "cpu":
        return t.detach().numpy()

    xp = array_module("cuda")
    t = t.detach().contiguous()
    return xp.from_dlpack(t) if t.device.type == "cuda" else xp.asarray(t.numpy())


def _to_torch(a: Any, like: torch.Tensor) -> torch.Tensor:
    """A result as a tensor on ``like``'s device: DLPack from CuPy for a CUDA tensor (no copy), else on the host."""
    if isinstance(a, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(a))
    if like.device.type == "cuda":
        return torch.from_dlpack(a)
    return torch.from_numpy(np.ascontiguousarray(a.get()))  # CPU tensors run with device="cuda"


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
        device: str = "auto",
    ) -> tuple[torch.Tensor, torch.Tensor]:
        device = _device_of(points, voxel_data, background, device=device)
        vol = topology.with_data(voxel_data.detach().cpu().numpy(), background.detach().cpu().numpy())
        pts = _to_kernels(points, device)
        values, jac = sample_grad_arrays(vol, pts, mode, space=space, jacobian_space=jacobian_space, device=device)
        ctx.volume, ctx.points, ctx.device = vol, pts, device
        ctx.options = (mode, space, jacobian_space)
        ctx.like = points
        return _to_torch(values, points), _to_torch(jac, points)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, adj_values: torch.Tensor, adj_jacobian: torch.Tensor) -> tuple:
        mode, space, jacobian_space = ctx.options
        device = ctx.device
        r = sample_grad_vjp(
            ctx.volume,
            ctx.points,
            _to_kernels(adj_values, device),
            _to_kernels(adj_jacobian, device),
            mode,
            space,
            jacobian_space,
            device=device,
        )
        need_points, need_data, need_bg = ctx.needs_input_grad[:3]
        bg = r.background if device == "cuda" else np.asarray(r.background)
        like = ctx.like
        return (
            _to_torch(r.points, like) if need_points else None,
            _to_torch(r.voxel_data, like) if need_data else None,
            _to_torch(bg, like).reshape(adj_values.shape[1:]) if need_bg else None,
            None,
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
    device: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable values (N,) / (N, C) and Jacobians (N, 3) / (N, C, 3) of the field
    ``voxel_data`` ((n_active,) or (n_active, C), in ``topology.active_voxels()`` order) at ``points``
    (N, 3).  Gradients flow to ``points``, ``voxel_data`` and ``background`` (second derivatives
    through the Jacobian included, as in :func:`vdbflow.sample_grad_vjp`).  ``device``: ``"auto"``
    follows the tensors (CUDA tensors: on the GPU, results as CUDA tensors); ``"cuda"`` runs CPU tensors
    on the GPU too (the emulation of CUDA runs this way)."""
    background = torch.as_tensor(background, dtype=voxel_data.dtype, device=voxel_data.device)
    jacobian_space = space if jacobian_space is None else jacobian_space
    return SampleGrad.apply(points, voxel_data, background, topology, mode, space, jacobian_space, device)
