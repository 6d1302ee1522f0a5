"""The PyTorch wrapper: gradcheck against finite differences, and consistency with the Jacobian."""

import numpy as np
import pytest

import vdbflow

torch = pytest.importorskip("torch")
autograd = pytest.importorskip("vdbflow.ops.autograd")


@pytest.fixture
def field(rng):
    ijk = np.argwhere(np.ones((6, 6, 6), bool)) - 2
    topo = vdbflow.Volume.from_active(ijk)
    data = torch.tensor(rng.standard_normal((topo.active_voxel_count, 3)), dtype=torch.float64, requires_grad=True)
    pts = torch.tensor(
        np.array([[0.3, 0.6, 0.2], [1.7, -0.4, 2.25], [-1.2, 0.1, 0.9]]), dtype=torch.float64, requires_grad=True
    )
    bg = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64, requires_grad=True)
    return topo, pts, data, bg


def test_gradcheck(field):
    topo, pts, data, bg = field

    def f(p, d, b):
        values, jac = autograd.sample_grad(topo, p, d, b)
        return values, jac

    assert torch.autograd.gradcheck(f, (pts, data, bg), eps=1e-6, atol=1e-6)


def test_value_gradient_is_the_jacobian(field):
    topo, pts, data, bg = field
    values, jac = autograd.sample_grad(topo, pts, data, bg)
    (grad,) = torch.autograd.grad(values[:, 1].sum(), pts)
    np.testing.assert_allclose(grad.numpy(), jac[:, 1, :].detach().numpy(), atol=1e-12)


@pytest.mark.slow
def test_trains_a_field(rng):
    """A few steps of gradient descent fit voxel data to a target Jacobian."""
    ijk = np.argwhere(np.ones((8, 8, 8), bool))
    topo = vdbflow.Volume.from_active(ijk)
    target = np.array([[1.0, -2.0, 0.5]])
    pts = torch.tensor(rng.uniform(1, 6, (256, 3)))
    data = torch.zeros(topo.active_voxel_count, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([data], lr=0.1)
    for _ in range(150):
        opt.zero_grad()
        _, jac = autograd.sample_grad(topo, pts, data, 0.0)
        loss = ((jac - torch.tensor(target)) ** 2).mean()
        loss.backward()
        opt.step()
    assert loss.item() < 1e-2


def test_cuda_tensors_are_refused_clearly(field):
    topo, pts, data, bg = field
    meta = pts.detach().to("meta")
    with pytest.raises(vdbflow.DeviceError, match="expected CPU tensors"):
        autograd.sample_grad(topo, meta, data, bg)
