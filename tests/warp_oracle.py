"""Build the same volume in warp-lang (CPU) and sample it there: a differential oracle."""

import functools

import numpy as np
import pytest

wp = pytest.importorskip("warp")

wp.config.quiet = True
wp.init()

WARP_TYPES = {
    "int32": wp.int32,
    "int64": wp.int64,
    "uint32": wp.uint32,
    "float32": wp.float32,
    "float64": wp.float64,
    "vec3f": wp.vec3f,
    "vec3d": wp.vec3d,
    "vec4f": wp.vec4f,
    "vec4d": wp.vec4d,
}
LENGTH = {"vec3f": 3, "vec3d": 3, "vec4f": 4, "vec4d": 4}
SCALAR = {
    "int32": wp.int32,
    "int64": wp.int64,
    "uint32": wp.uint32,
    "float32": wp.float32,
    "float64": wp.float64,
    "vec3f": wp.float32,
    "vec3d": wp.float64,
    "vec4f": wp.float32,
    "vec4d": wp.float64,
}


def _grad_type(type_name):
    n, scalar = LENGTH.get(type_name, 1), SCALAR[type_name]
    if n == 1:
        return wp.vec3d if scalar == wp.float64 else wp.vec3f
    return wp.types.matrix((n, 3), scalar)


def _warp_value(type_name, value):
    dtype = WARP_TYPES[type_name]
    return dtype(*np.broadcast_to(value, (LENGTH[type_name],)).tolist()) if type_name in LENGTH else dtype(value)


@functools.cache
def _store_kernel(type_name):
    dtype = WARP_TYPES[type_name]

    @wp.kernel(module="unique")
    def store(vid: wp.uint64, ijk: wp.array(dtype=wp.vec3i), values: wp.array(dtype=dtype)):
        t = wp.tid()
        p = ijk[t]
        wp.volume_store(vid, p[0], p[1], p[2], values[t])

    return store


@functools.cache
def _sample_kernel(type_name, with_grad):
    dtype = WARP_TYPES[type_name]
    grad_t = _grad_type(type_name)

    if with_grad:

        @wp.kernel(module="unique")
        def sample_grad(
            vid: wp.uint64,
            pts: wp.array(dtype=wp.vec3),
            mode: int,
            out: wp.array(dtype=dtype),
            jac: wp.array(dtype=grad_t),
        ):
            t = wp.tid()
            g = grad_t()
            out[t] = wp.volume_sample_grad(vid, pts[t], mode, g, dtype=dtype)
            jac[t] = g

        return sample_grad, grad_t

    @wp.kernel(module="unique")
    def sample(vid: wp.uint64, pts: wp.array(dtype=wp.vec3), mode: int, out: wp.array(dtype=dtype)):
        t = wp.tid()
        out[t] = wp.volume_sample(vid, pts[t], mode, dtype=dtype)

    return sample, None


@functools.cache
def _index_kernel(type_name):
    dtype = WARP_TYPES[type_name]
    grad_t = _grad_type(type_name)

    @wp.kernel(module="unique")
    def sample_index(
        vid: wp.uint64,
        pts: wp.array(dtype=wp.vec3),
        mode: int,
        data: wp.array(dtype=dtype),
        bg: dtype,
        out: wp.array(dtype=dtype),
        jac: wp.array(dtype=grad_t),
    ):
        t = wp.tid()
        g = grad_t()
        out[t] = wp.volume_sample_grad_index(vid, pts[t], mode, data, bg, g)
        jac[t] = g

    return sample_index, grad_t


def _transform_args(matrix):
    if matrix is None:
        return {"voxel_size": 1.0}
    m = np.asarray(matrix, dtype=np.float64)
    return {"transform": wp.mat33(m[:3, :3].astype(np.float32)), "translation": tuple(m[:3, 3])}


def warp_value_volume(type_name, ijk, values, background, matrix=None):
    """A Warp value grid holding ``values`` at ``ijk``; other voxels of the touched leaves read
    ``background`` (as in vdbflow's per-leaf layout)."""
    dtype = WARP_TYPES[type_name]
    leaves = np.unique((np.asarray(ijk) >> 3) << 3, axis=0).astype(np.int32)
    bg = _warp_value(type_name, background)
    vol = wp.Volume.allocate_by_tiles(
        wp.array(leaves, dtype=wp.vec3i, device="cpu"), bg_value=bg, device="cpu", **_transform_args(matrix)
    )
    wp.launch(
        _store_kernel(type_name),
        dim=len(ijk),
        inputs=[
            vol.id,
            wp.array(np.asarray(ijk, np.int32), dtype=wp.vec3i, device="cpu"),
            wp.array(np.asarray(values), dtype=dtype, device="cpu"),
        ],
        device="cpu",
    )
    return vol


def warp_index_volume(ijk, matrix=None):
    return wp.Volume.allocate_by_voxels(
        wp.array(np.asarray(ijk, np.int32), dtype=wp.vec3i, device="cpu"), device="cpu", **_transform_args(matrix)
    )


def warp_sample(vol, type_name, points, mode):
    """values and Jacobians from Warp's volume_sample_grad (value-only volume_sample for ints)."""
    dtype = WARP_TYPES[type_name]
    n = len(points)
    pts = wp.array(np.asarray(points, np.float32), dtype=wp.vec3, device="cpu")
    out = wp.zeros(n, dtype=dtype, device="cpu")
    m = wp.Volume.LINEAR if mode == "linear" else wp.Volume.CLOSEST
    if SCALAR[type_name] in (wp.float32, wp.float64):
        kernel, grad_t = _sample_kernel(type_name, True)
        jac = wp.zeros(n, dtype=grad_t, device="cpu")
        wp.launch(kernel, dim=n, inputs=[vol.id, pts, m, out, jac], device="cpu")
        return out.numpy(), jac.numpy()
    kernel, _ = _sample_kernel(type_name, False)
    wp.launch(kernel, dim=n, inputs=[vol.id, pts, m, out], device="cpu")
    return out.numpy(), None


def warp_sample_index(vol, type_name, points, mode, voxel_data, background):
    dtype = WARP_TYPES[type_name]
    kernel, grad_t = _index_kernel(type_name)
    n = len(points)
    pts = wp.array(np.asarray(points, np.float32), dtype=wp.vec3, device="cpu")
    out = wp.zeros(n, dtype=dtype, device="cpu")
    jac = wp.zeros(n, dtype=grad_t, device="cpu")
    bg = _warp_value(type_name, background)
    m = wp.Volume.LINEAR if mode == "linear" else wp.Volume.CLOSEST
    wp.launch(
        kernel,
        dim=n,
        inputs=[vol.id, pts, m, wp.array(np.asarray(voxel_data), dtype=dtype, device="cpu"), bg, out, jac],
        device="cpu",
    )
    return out.numpy(), jac.numpy()


@functools.cache
def _index_tape_kernel(type_name):
    dtype = WARP_TYPES[type_name]
    grad_t = _grad_type(type_name)

    @wp.kernel(module="unique")
    def sample_index(
        vid: wp.uint64,
        pts: wp.array(dtype=wp.vec3),
        data: wp.array(dtype=dtype),
        bg: wp.array(dtype=dtype),
        out: wp.array(dtype=dtype),
        jac: wp.array(dtype=grad_t),
    ):
        t = wp.tid()
        g = grad_t()
        out[t] = wp.volume_sample_grad_index(vid, pts[t], wp.Volume.LINEAR, data, bg[0], g)
        jac[t] = g

    return sample_index, grad_t


def warp_index_vjp(vol, type_name, points, voxel_data, background, adj_value, adj_jacobian):
    """Warp's tape: adjoints of sum(adj_value * value + adj_jacobian * jacobian) to voxel data,
    background and points."""
    dtype = WARP_TYPES[type_name]
    kernel, grad_t = _index_tape_kernel(type_name)
    n = len(points)
    pts = wp.array(np.asarray(points, np.float32), dtype=wp.vec3, device="cpu", requires_grad=True)
    data = wp.array(np.asarray(voxel_data), dtype=dtype, device="cpu", requires_grad=True)
    bg = wp.array(np.asarray([background]), dtype=dtype, device="cpu", requires_grad=True)
    out = wp.zeros(n, dtype=dtype, device="cpu", requires_grad=True)
    jac = wp.zeros(n, dtype=grad_t, device="cpu", requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, dim=n, inputs=[vol.id, pts, data, bg, out, jac], device="cpu")
    tape.backward(
        grads={
            out: wp.array(np.asarray(adj_value), dtype=dtype, device="cpu"),
            jac: wp.array(np.asarray(adj_jacobian), dtype=grad_t, device="cpu"),
        }
    )
    return data.grad.numpy(), bg.grad.numpy()[0], pts.grad.numpy()
