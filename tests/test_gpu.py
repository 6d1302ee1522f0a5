"""GPU runtime tests: the CUDA backend against the CPU backend.  On a machine with a GPU they run on it
(scripts/gpu_check.sh); without one they run the same device code under vdbflow's emulation of CUDA
(tests/gpu_support.py), so they run on every CI machine.

Tolerances (docs/gpu.md "Bits"): a GPU contracts multiply-adds into FMAs by default, so sampled values,
Jacobians and Hessians are held to the per-scheme FMA bound (scripts/gpu_check_steps.py ``tolerance``, tested by
tests/test_gpu_bits.py); under ``VDBFLOW_CUDA_EXACT=1`` (``--fmad=false``) to the tight bounds the emulation
meets.  Counts, statuses, routes and closest samples stay exact."""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from gpu_support import EMULATED, cupy, emulate  # noqa: F401 - emulate: the autouse fixture
from reference import probe_points, random_sparse_voxels

import vdbflow

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from gpu_check_steps import tolerance  # noqa: E402 - scripts/ is not a package

pytestmark = [pytest.mark.gpu]
EXACT = os.environ.get("VDBFLOW_CUDA_EXACT", "0") == "1"


def bound(tight: float, mode: str, dtype, scale: float, derivative: int = 0) -> float:
    """How far a GPU result may lie from the CPU's: ``tight`` where the device code does not contract
    (VDBFLOW_CUDA_EXACT=1), else at least the FMA bound of ``mode`` (derivative 0 values, 1 Jacobians, 2
    Hessians) at data of ``scale``."""
    return tight if EXACT else max(tight, tolerance(mode, dtype, scale, derivative))


@pytest.mark.parametrize(
    ("dtype", "components", "index"),
    [
        (np.float32, 1, False),
        (np.float32, 3, False),
        (np.float32, 4, True),
        (np.float64, 3, False),
        (np.float64, 9, True),
        (np.int32, 1, False),
        (np.int64, 1, True),
        (np.uint32, 1, False),
    ],
)
def test_cuda_matches_cpu(rng, dtype, components, index):
    ijk, values = random_sparse_voxels(rng, components=components, dtype=dtype)
    tiles = (
        np.array([[256, 0, 0], [-4096, 4096, 0]]),
        np.array([128, 4096]),
        np.ones((2, components) if components > 1 else 2, dtype),
    )
    if index:
        topo = vdbflow.Volume.from_active(ijk, tiles=tiles[:2])
        order = {tuple(p): n for n, p in enumerate(ijk.tolist())}
        vol = topo.with_data(values[[order[tuple(p)] for p in topo.active_voxels().tolist()]], 0, tiles[2])
    else:
        vol = vdbflow.Volume.from_voxels(ijk, values, 0, tiles=tiles)
    pts = np.concatenate([probe_points(rng, ijk, 500), [[300.5, 5, 5], [-3000, 5000, 7]]])
    modes = ("closest", "linear") if np.dtype(dtype).kind == "f" else ("closest",)
    for mode in modes:
        cv, cj = vdbflow.sample_grad_arrays(vol, pts, mode)
        gv, gj = vdbflow.sample_grad_arrays(vol, cupy.asarray(pts), mode, device="auto")
        assert isinstance(gv, cupy.ndarray)
        scale = max(1, np.abs(values).max())
        tol = 0 if np.dtype(dtype).kind != "f" else 8 * np.finfo(dtype).eps * scale
        np.testing.assert_allclose(gv.get(), cv, atol=0 if tol == 0 else bound(tol, mode, dtype, scale), rtol=0)
        np.testing.assert_allclose(gj.get(), cj, atol=0 if tol == 0 else bound(2 * tol, mode, dtype, scale, 1), rtol=0)


def test_cuda_world_space_dataset(rng):
    ijk, values = random_sparse_voxels(rng, components=3, dtype=np.float32)
    M = np.eye(4)
    M[:3, :3] = [[0.9, 0.4, 0.0], [-0.3, 1.2, 0.2], [0.1, -0.2, 0.7]]
    vol = vdbflow.Volume.from_voxels(ijk, values, 0.0, M)
    pts = vol.transform.apply(ijk[:200] + 0.3)
    ds_cpu = vol.sample_grad(pts)
    ds_gpu = vol.sample_grad(pts, device="cuda")
    np.testing.assert_allclose(cupy.asnumpy(ds_gpu["value_jacobian"].data), ds_cpu["value_jacobian"].values, atol=1e-4)
    nan = vdbflow.sample_grad_arrays(vol, cupy.asarray([[np.nan, 0, 0]]), device="cuda")[0]
    assert bool(cupy.isnan(nan).all())


@pytest.mark.parametrize(("dtype", "components"), [(np.float32, 1), (np.float32, 4), (np.float64, 3), (np.float64, 9)])
def test_cuda_vjp_matches_cpu(rng, dtype, components):
    ijk, _ = random_sparse_voxels(rng, fill=0.5)
    topo = vdbflow.Volume.from_active(ijk)
    shape = (topo.active_voxel_count,) if components == 1 else (topo.active_voxel_count, components)
    vol = topo.with_data(rng.standard_normal(shape).astype(dtype), 0.5)
    pts = probe_points(rng, ijk, 300)
    n = len(pts)
    a_val = rng.standard_normal((n,) if components == 1 else (n, components)).astype(dtype)
    a_jac = rng.standard_normal((n, 3) if components == 1 else (n, components, 3)).astype(dtype)
    cpu = vdbflow.sample_grad_vjp(vol, pts, a_val, a_jac)
    gpu = vdbflow.sample_grad_vjp(vol, cupy.asarray(pts), cupy.asarray(a_val), cupy.asarray(a_jac), device="cuda")
    tol = 64 * np.finfo(dtype).eps * 10
    np.testing.assert_allclose(cupy.asnumpy(gpu.voxel_data), cpu.voxel_data, atol=tol, rtol=tol)
    np.testing.assert_allclose(cupy.asnumpy(gpu.background), cpu.background, atol=tol * 100, rtol=tol)
    np.testing.assert_allclose(cupy.asnumpy(gpu.points), cpu.points, atol=tol * 10, rtol=tol)


def test_distributed_on_gpu_workers(rng):
    """One worker per GPU (dask_cuda when installed, else a plain cluster on this GPU)."""
    distributed = pytest.importorskip("distributed")
    from vdbflow.distribution.volume import distribute

    try:
        from dask_cuda import LocalCUDACluster

        def make_cluster():
            return LocalCUDACluster(n_workers=1)
    except ImportError:

        def make_cluster():
            return distributed.LocalCluster(n_workers=1, processes=False)

    ijk, values = random_sparse_voxels(rng, n_leaves=30, components=3, dtype=np.float32)
    vol = vdbflow.Volume.from_voxels(ijk, values, 0.0)
    pts = probe_points(rng, ijk, 2000)
    with make_cluster() as cluster, distributed.Client(cluster) as client:
        dvol = distribute(vol, client, 3)
        got = dvol.sample_grad(pts, space="index", device="cuda").compute()
        want = vol.sample_grad(pts, space="index")
        scale = np.abs(values).max()
        tol = bound(2 * 8 * np.finfo(np.float32).eps * scale, "linear", np.float32, scale, 1)
        np.testing.assert_allclose(got["value_jacobian"].values, want["value_jacobian"].values, atol=tol)
        dvol.close()


@pytest.mark.parametrize("scheme", ["fd2", "fd4", "fd6"])
def test_gradient_field_on_the_gpu_matches_cpu(scheme):
    from vdbflow import synthetic

    vol = synthetic.flow_volume(synthetic.abc_flow(), resolution=32)
    cpu, gpu = vdbflow.gradient_field(vol, scheme), vdbflow.gradient_field(vol, scheme, device="cuda")
    scale = np.abs(cpu.active_values()).max()  # the FMA bound at the data's scale over a voxel's size
    data_scale = np.abs(vol.active_values()).max() / vol.voxel_size.min()
    tol = bound(8 * np.finfo(np.float32).eps * scale, scheme, np.float32, data_scale, 1)
    np.testing.assert_allclose(gpu.active_values(), cpu.active_values(), rtol=0, atol=tol)


@pytest.mark.parametrize("partitions", [1, 5, 17])
def test_cuda_routing_matches_cpu_routing(rng, partitions):
    """route.h on the GPU (then a stable CuPy argsort) groups points exactly as the CPU's counting sort."""
    from vdbflow.devices import cuda
    from vdbflow.distribution.plan import near_blocks, plan_partitions

    ijk, values = random_sparse_voxels(rng, components=3)
    vol = vdbflow.Volume.from_voxels(ijk, values, 0.0, voxel_size=0.5)
    plan = plan_partitions(vol.topology, partitions)
    near = near_blocks(vol.topology, plan.stencil, plan.router)
    pts = np.concatenate([probe_points(rng, ijk, 20_000), rng.uniform(-500, 500, (20_000, 3)), [[np.nan, 0, 0]]])
    r = plan.router
    for space in ("index", "world"):
        want = r.route(pts, vol.transform, space, near)
        got = cuda.route(
            cupy.asarray(pts),
            r.origin,
            r.shift,
            r.boundaries,
            vol.transform.kernel_parameters(),
            space == "world",
            near,
        )
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g.get(), w)


@pytest.mark.parametrize(("dtype", "components"), [(np.float32, 1), (np.float32, 3), (np.float64, 3), (np.float64, 4)])
def test_cuda_hessians_match_cpu(rng, dtype, components):
    from vdbflow.ops.hessian import HESSIAN_MODES, sample_hessian_arrays

    ijk, values = random_sparse_voxels(rng, components=components, dtype=dtype)
    vol = vdbflow.Volume.from_voxels(ijk, values, 0)
    pts = probe_points(rng, ijk, 400)
    for mode in HESSIAN_MODES:
        cpu = sample_hessian_arrays(vol, pts, mode, space="index", hessian_space="index")
        gpu = sample_hessian_arrays(vol, cupy.asarray(pts), mode, space="index", hessian_space="index", device="auto")
        scale = max(1.0, float(np.abs(values).max()))
        for derivative, (c, g) in enumerate(zip(cpu, gpu, strict=True)):  # values, Jacobians, Hessians
            assert isinstance(g, cupy.ndarray)
            tol = bound(64 * np.finfo(dtype).eps * scale, mode, dtype, scale, derivative)
            np.testing.assert_allclose(g.get(), c, atol=tol, rtol=0, err_msg=mode)


def test_device_record_is_the_host_record_with_device_pointers(rng):
    """The CUDA entry points read the same KernelAbi bytes as the CPU extension, their pointers into
    device copies made once per volume (kept in KernelArrays.device_cache)."""
    from vdbflow.core import kernel
    from vdbflow.devices import cuda

    ijk, values = random_sparse_voxels(rng, components=3)
    vol = vdbflow.Volume.from_voxels(ijk, values, 0.0, voxel_size=0.5)
    k = vol.kernel_arrays()
    host, dev = kernel.host_record(k).record, cuda.device_record(k).record
    pointers = ("tables", "masks", "prefix", "leaf_offset", "leaf_values_at", "values", "tile_values", "background")
    for name in kernel.ABI_DTYPE.names:
        if name not in pointers:
            np.testing.assert_array_equal(dev[name], host[name], err_msg=name)
    assert int(dev["values"]) != int(host["values"])
    vdbflow.sample_grad_arrays(vol, cupy.asarray(ijk[:10].astype(np.float64)), device="cuda")
    assert cuda.device_record(k) is cuda.device_record(vol.kernel_arrays())


def test_particles_on_the_gpu_match_the_cpu(rng):
    """Whole trajectories in one GPU thread a particle (advect.h) against the CPU kernels; statuses equal,
    positions and F to rounding (the GPU may fuse the sampler's multiply-adds)."""
    n = 32
    h = 2 * np.pi / n
    axis = (np.arange(n) + 0.5) * h
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    values = vdbflow.synthetic.abc_flow().velocity(grid).reshape(n, n, n, 3).astype(np.float32)
    vol = vdbflow.Volume.from_dense(values, voxel_size=h, origin=(axis[0],) * 3, active=np.ones((n, n, n), bool))
    seeds = np.concatenate([rng.uniform(2.0, 4.3, (500, 3)), rng.uniform(0.2, 6.0, (500, 3)), [[np.nan, 1, 1]]])
    for method in ("euler", "rk4"):
        cpu = vdbflow.advect(vol, seeds, 0.0, 1.0, 0.05, method, save_every=4, with_velocity=True)
        gpu = vdbflow.advect(vol, seeds, 0.0, 1.0, 0.05, method, save_every=4, with_velocity=True, device="cuda")
        np.testing.assert_array_equal(gpu.status.values, cpu.status.values)
        assert set(cpu.status.values.tolist()) == {0, 1, 2}
        np.testing.assert_allclose(gpu.position.values, cpu.position.values, atol=1e-5, rtol=0)
    F_cpu = vdbflow.ftle(vol, seeds[:100], 0.0, 0.5, 0.05)
    F_gpu = vdbflow.ftle(vol, seeds[:100], 0.0, 0.5, 0.05, device="cuda")
    np.testing.assert_allclose(F_gpu.ftle.values, F_cpu.ftle.values, atol=1e-4, rtol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_derived_quantities_on_the_gpu(rng, dtype):
    """The device's derive_point gives the CPU's bits on the same Jacobians (products rounded before
    they are added on both sides); the fused launch equals derive on its own Jacobians; the pinned host
    path returns the device results."""
    from vdbflow.core.kernel import DERIVED
    from vdbflow.devices import cpu, cuda
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays, sample_host_arrays

    ijk, values = random_sparse_voxels(rng, components=3, dtype=dtype)
    vol = vdbflow.Volume.from_voxels(ijk, values, 0)
    pts = probe_points(rng, ijk, 4000)
    fields = SampleRequest("linear", ("value", "jacobian"), device="cuda")
    base = sample_arrays(vol, fields, cupy.asarray(pts))
    J, u = base["jacobian"], base["value"]
    on_gpu = {name: cupy.empty((len(pts), 3) if name == "vorticity" else len(pts), J.dtype) for name in DERIVED}
    cuda.derive(J, u, on_gpu)
    on_cpu = {name: np.empty(a.shape, J.dtype) for name, a in on_gpu.items()}
    cpu.derive(J.get(), u.get(), on_cpu)
    for name in ("divergence", "vorticity", "vorticity_magnitude", "q_criterion", "helicity", "strain_rate_magnitude"):
        np.testing.assert_array_equal(on_gpu[name].get(), on_cpu[name], err_msg=name)
    for name in ("lambda2", "swirling_strength", "r_invariant"):  # float64 inside: libm and CUDA may differ in an ulp
        np.testing.assert_allclose(on_gpu[name].get(), on_cpu[name], rtol=1e-5, atol=1e-6)
    fused = sample_arrays(vol, fields.replace(outputs=("value", "jacobian") + DERIVED), cupy.asarray(pts))
    for name in DERIVED:
        np.testing.assert_array_equal(fused[name].get(), on_gpu[name].get(), err_msg=name)
    host = sample_host_arrays(vol, fields.replace(outputs=("q_criterion", "vorticity")), pts)
    assert isinstance(host["q_criterion"], np.ndarray)
    np.testing.assert_array_equal(host["q_criterion"], on_gpu["q_criterion"].get())
    np.testing.assert_array_equal(host["vorticity"], on_gpu["vorticity"].get())


def test_statistics_of_gpu_samples_match_the_cpu(rng):
    """device="cuda": the samples made by the GPU entries, reduced on the host by the CPU's accumulation: the
    same counts and moments as the CPU's fused pass (the samples agree to the last bit or nearly, the bins
    of the same points agree)."""
    ijk, values = random_sparse_voxels(rng, components=3, dtype=np.float64)
    vol = vdbflow.Volume.from_voxels(ijk, values, 0)
    pts = probe_points(rng, ijk, 20_000)
    of = ["q_criterion", "r_invariant"]
    kw = {"bins": [16, 16], "range": [(-2, 2), (-2, 2)], "space": "index"}
    cpu_h = vdbflow.histogram(vol, pts, of=of, **kw)
    gpu_h = vdbflow.histogram(vol, pts, of=of, device="cuda", **kw)
    np.testing.assert_array_equal(gpu_h["count"].values, cpu_h["count"].values)
    m_cpu = vdbflow.moments(vol, pts, of=["jacobian[0,1]", "vorticity_magnitude"], space="index")
    m_gpu = vdbflow.moments(vol, pts, of=["jacobian[0,1]", "vorticity_magnitude"], space="index", device="cuda")
    for name in ("count", "nan_count"):
        np.testing.assert_array_equal(m_gpu[name].values, m_cpu[name].values)
    for name in ("mean", "variance", "skewness", "flatness", "min", "max"):
        np.testing.assert_allclose(m_gpu[name].values, m_cpu[name].values, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_gpu_reduction_equals_the_cpu_reduction_of_its_samples(rng, dtype, monkeypatch):
    """reduce_kernel (counts through shared memory, the global ones past REDUCE_SHARED_COUNTS; one thread a
    moment and a per-bin item; block partials merged in block order on the device) against the oracle: the
    same GPU's samples, reduced by the CPU's accumulation.  Counts equal; the floats to rounding (the CPU's
    wider targets fuse multiply-adds the emulation leaves apart); several launches a call, as a long call has."""
    from vdbflow.devices import cpu, cuda
    from vdbflow.ops.reductions import Conditional, Histogram, Statistics, features_of, quantity
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays
    from vdbflow.ops.statistics import reduce

    ijk, values = random_sparse_voxels(rng, components=3, dtype=dtype)
    vol = vdbflow.Volume.from_voxels(ijk, values, 0)
    pts = probe_points(rng, ijk, 3 * 4096 + 1234)  # four blocks, the last one short
    q = {n: quantity(n, vol, "index") for n in ("q_criterion", "r_invariant", "vorticity_magnitude", "jacobian[0,1]")}
    small = Statistics(
        histograms=[
            Histogram((q["q_criterion"], q["r_invariant"]), (np.linspace(-2, 2, 17), np.linspace(-2, 2, 13))),
            Histogram((q["vorticity_magnitude"],), (np.linspace(0, 3, 9),), weight=q["q_criterion"]),
        ],
        moments=[q["jacobian[0,1]"], q["vorticity_magnitude"], q["r_invariant"]],
        conditionals=[Conditional(q["vorticity_magnitude"], q["q_criterion"], np.linspace(-2, 2, 11))],
    )
    large = Statistics(  # 100 x 100 bins: more counts than a block holds in shared memory (both kinds)
        histograms=[
            Histogram((q["q_criterion"], q["r_invariant"]), (np.linspace(-2, 2, 101), np.linspace(-2, 2, 101)))
        ],
        moments=[q["q_criterion"]],
    )
    launches = []
    real = cuda._function
    monkeypatch.setattr(cuda, "_function", lambda name: launches.append(name) or real(name))
    monkeypatch.setattr(cuda, "REDUCE_CHUNK_BLOCKS", 2)  # 2 blocks a launch: 2 launches of each phase
    for stats in (small, large):
        jacobian, derived = stats.needs()
        request = SampleRequest("linear", ("value", "jacobian", *derived), "index", device="cuda")
        launches.clear()
        on_gpu = reduce(vol, cupy.asarray(pts), stats, request)
        assert any(name.startswith("vdbflow::reduce_kernel<") for name in launches)
        arrays = {k: cupy.asnumpy(v) for k, v in sample_arrays(vol, request, cupy.asarray(pts)).items()}
        spec, edges, empty, _ = stats.layout()
        cpu.reduce_features(spec, features_of(stats, arrays, 3), edges, empty.ints, empty.reals)
        np.testing.assert_array_equal(on_gpu.ints, empty.ints)
        assert empty.ints.sum() > 0
        np.testing.assert_allclose(on_gpu.reals, empty.reals, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_gpu_reduction_of_a_run_time_component_count(rng, dtype, monkeypatch):
    """Four components take reduce_kernel<T, 0> (the entry name ends in ", 0>"), which samples each channel's
    component alone (component_view): the counts equal the CPU's reduction of the GPU's own samples, and those
    samples equal the CPU's (to the FMA bound)."""
    from vdbflow.devices import cpu, cuda
    from vdbflow.ops.reductions import Histogram, Statistics, features_of, quantity
    from vdbflow.ops.request import SampleRequest
    from vdbflow.ops.sampling import sample_arrays
    from vdbflow.ops.statistics import reduce

    ijk, values = random_sparse_voxels(rng, components=4, dtype=dtype)
    vol = vdbflow.Volume.from_voxels(ijk, values, 0)
    pts = probe_points(rng, ijk, 4096 + 77)
    names = vol.component_names
    q = [quantity(t, vol, "index") for t in (f"value[{names[3]}]", f"jacobian[{names[2]},j]", f"value[{names[1]}]")]
    stats = Statistics(
        histograms=[Histogram((q[0], q[1]), (np.linspace(-2, 2, 9), np.linspace(-3, 3, 7)))], moments=[q[2]]
    )
    entry, launches = cuda.entry("sample_reduce", dtype, 4), []
    assert entry.endswith(", 0>")
    real = cuda._function
    monkeypatch.setattr(cuda, "_function", lambda name: launches.append(name) or real(name))
    scale = max(1.0, float(np.abs(values).max()))
    for mode in ("linear", "lag4"):  # linear: the in-leaf corners (voxel_stride), lag4: read_voxel
        request = SampleRequest(mode, ("value", "jacobian"), "index", device="cuda")
        on_gpu = reduce(vol, cupy.asarray(pts), stats, request)
        assert entry in launches
        arrays = {k: cupy.asnumpy(v) for k, v in sample_arrays(vol, request, cupy.asarray(pts)).items()}
        on_cpu = sample_arrays(vol, SampleRequest(mode, ("value", "jacobian"), "index"), pts)
        for k in ("value", "jacobian"):
            tol = bound(0.0, mode, dtype, scale, int(k == "jacobian"))
            np.testing.assert_allclose(arrays[k], on_cpu[k], atol=tol, rtol=0, err_msg=mode)
        spec, edges, empty, _ = stats.layout()
        cpu.reduce_features(spec, features_of(stats, arrays, 4), edges, empty.ints, empty.reals)
        np.testing.assert_array_equal(on_gpu.ints, empty.ints)
        assert 0 < empty.ints.sum()
        np.testing.assert_allclose(on_gpu.reals, empty.reals, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("time", ["linear", "pchip"])
def test_series_windows_on_the_gpu_match_the_cpu(rng, time, monkeypatch):
    """Particles through a VolumeSeries in windows of steps on the GPU (advect_series_kernel): statuses
    equal, positions and flow-map gradients to rounding (bit for bit under the emulation's baseline)."""
    from vdbflow.synthetic import unsteady

    times = np.arange(0.0, 2.0 + 1e-9, 0.25)
    f = unsteady.double_gyre()
    series = vdbflow.open_series([unsteady.field_volume(f, t, 1 / 16, pad=3) for t in times], times)
    seeds = np.concatenate([rng.uniform(0.1, 1.9, (300, 3)) * [1, 0.5, 0], rng.uniform(-1, 3, (40, 3)) * [1, 1, 0]])
    kw = {"method": "rk4", "mode": "lag4", "time": time, "save_every": 5, "with_velocity": True}
    cpu = vdbflow.advect(series, seeds, 0.0, 1.5, 0.05, **kw)
    from vdbflow.devices import cuda

    windows = []
    real = cuda.advect_series
    monkeypatch.setattr(cuda, "advect_series", lambda *a, **k: windows.append(1) or real(*a, **k))
    gpu = vdbflow.advect(series, seeds, 0.0, 1.5, 0.05, device="cuda", **kw)
    assert windows  # the windows ran on the device
    np.testing.assert_array_equal(gpu.status.values, cpu.status.values)
    assert len(set(cpu.status.values.tolist())) >= 2  # some leave the data
    np.testing.assert_allclose(gpu.position.values, cpu.position.values, atol=1e-5, rtol=0)
    np.testing.assert_allclose(gpu.velocity.values, cpu.velocity.values, atol=1e-4, rtol=0)
    f_cpu = vdbflow.ftle(series, seeds[:100], 0.0, 1.0, 0.05, mode="lag4", time=time)
    f_gpu = vdbflow.ftle(series, seeds[:100], 0.0, 1.0, 0.05, mode="lag4", time=time, device="cuda")
    np.testing.assert_allclose(f_gpu.ftle.values, f_cpu.ftle.values, atol=1e-4, rtol=0)


def test_resident_particles_on_gpu_workers(rng, monkeypatch):
    """Particles resident on the partitions of a DistributedVolume integrate on their workers' GPUs
    (device="cuda"): the same run as on one GPU, worker to worker across partitions."""
    distributed = pytest.importorskip("distributed")
    from vdbflow import synthetic
    from vdbflow.devices import cuda

    omega = np.array([0.3, -0.5, 0.8])
    centre = np.full(3, np.pi)
    W = np.array([[0, -omega[2], omega[1]], [omega[2], 0, -omega[0]], [-omega[1], omega[0], 0]])
    box = synthetic.flow_volume(synthetic.linear_field(W, -W @ centre), 32, 2 * np.pi, np.float32)
    d = rng.normal(size=(200, 3))
    seeds = centre + rng.uniform(0.5, 2.8, (200, 1)) * d / np.linalg.norm(d, axis=1, keepdims=True)
    calls = []
    real = cuda.host_advect
    monkeypatch.setattr(cuda, "host_advect", lambda *a, **k: calls.append(1) or real(*a, **k))
    kw = {"save_every": 5, "with_velocity": True}
    want = vdbflow.advect(box, seeds, 0.0, 3.0, 0.05, "rk4", "linear", device="cuda", **kw)
    calls.clear()
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl,
        distributed.Client(cl) as client,
    ):
        dvol = vdbflow.distribute(box, client, partitions=5, halo=8)
        try:
            got = vdbflow.advect(dvol, seeds, 0.0, 3.0, 0.05, "rk4", "linear", device="cuda", **kw).compute()
        finally:
            dvol.close()
    assert calls  # the partitions' kernels ran on the (emulated) GPU
    assert got.attrs["rounds"] >= 2  # particles crossed partitions
    for name in ("status", "position", "velocity"):
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)


@pytest.mark.parametrize("time", ["linear", "pchip"])
def test_series_sampling_on_the_gpu(rng, time):
    """VolumeSeries.sample_grad with device="cuda": each step sampled on the GPU, then interpolated in time
    as on the CPU."""
    from vdbflow.synthetic import unsteady

    times = np.arange(0.0, 2.0 + 1e-9, 0.25)
    f = unsteady.double_gyre()
    series = vdbflow.open_series([unsteady.field_volume(f, t, 1 / 16, pad=3) for t in times], times)
    pts = rng.uniform(0.1, 1.9, (500, 3)) * [1, 0.5, 0]
    t = rng.uniform(0.0, 2.0, 500)
    cpu = series.sample_grad(pts, t, "lag4", time)
    gpu = series.sample_grad(pts, t, "lag4", time, device="cuda")
    for var in cpu.data_vars:
        assert isinstance(gpu[var].data, np.ndarray), var  # host results: the series interpolates on the host
        scale = max(1.0, float(np.nanmax(np.abs(cpu[var].values))))
        tol = bound(64 * 1.2e-7 * scale, "lag4", np.float32, scale, 1)  # Jacobians' bound for every variable
        np.testing.assert_allclose(gpu[var].values, cpu[var].values, atol=tol, rtol=0, err_msg=var)
    u, J = series.sample_grad_arrays(pts, t, "linear", time, device="cuda")
    u0, J0 = series.sample_grad_arrays(pts, t, "linear", time)
    assert isinstance(u, np.ndarray) and u.shape == u0.shape and J.shape == J0.shape
    for derivative, (got, want) in enumerate(((u, u0), (J, J0))):  # float32 steps
        scale = max(1.0, float(np.abs(want).max()))
        tol = bound(64 * 1.2e-7 * scale, "linear", np.float32, scale, derivative)
        np.testing.assert_allclose(got, want, atol=tol, rtol=0)


def test_a_job_with_device_cuda_writes_what_the_cpu_job_writes(tmp_path):
    """`sampling.device: cuda` end to end: the job's worker processes sample on the (emulated) GPU through
    their pinned pipelines; the store holds the CPU job's results to rounding."""
    import xarray as xr
    from test_cli import invoke, small_job

    sampling = {"mode": "lag4", "outputs": ["value", "jacobian", "q_criterion", "vorticity_magnitude"]}
    cluster = {"kind": "local", "workers": 2, "dashboard": False} if EMULATED else {"kind": "cuda", "dashboard": False}
    stores = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / f"{device}.zarr"
        job = small_job(tmp_path, sampling={**sampling, "device": device}, cluster=cluster, output={"path": str(out)})
        result = invoke("run", job)
        assert result.exit_code == 0, result.stderr
        if device == "cuda":
            assert "CUDA entries" in result.stdout, result.stdout  # the summary says what was built or loaded
        stores[device] = xr.open_zarr(out).load()
    cpu, gpu = stores["cpu"], stores["cuda"]
    assert set(cpu.data_vars) == set(gpu.data_vars) and len(cpu.point) == 2000
    for name in cpu.data_vars:
        scale = max(1.0, float(np.nanmax(np.abs(cpu[name].values))))
        np.testing.assert_allclose(gpu[name].values, cpu[name].values, atol=1e-5 * scale, rtol=0, err_msg=name)


def test_distributed_reverse_mode_on_gpu_workers(rng, monkeypatch):
    """DistributedVolume.sample_grad_vjp(device="cuda"): each partition's piece differentiated on its
    worker's GPU; equal to one process's reverse mode up to the order of the float additions."""
    distributed = pytest.importorskip("distributed")

    ijk, _ = random_sparse_voxels(rng, n_leaves=30, fill=0.6)
    topo = vdbflow.Volume.from_active(ijk)
    vol = topo.with_data(rng.standard_normal((topo.active_voxel_count, 3)), 0.25)
    pts = probe_points(rng, ijk, 3000)
    a_val, a_jac = rng.standard_normal((len(pts), 3)), rng.standard_normal((len(pts), 3, 3))
    want = vdbflow.sample_grad_vjp(vol, pts, a_val, a_jac)
    from vdbflow.devices import cuda

    calls = []
    real = cuda.sample_vjp
    monkeypatch.setattr(cuda, "sample_vjp", lambda *a, **k: calls.append(1) or real(*a, **k))
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl,
        distributed.Client(cl) as client,
    ):
        dvol = vdbflow.distribute(vol, client, 4)
        try:
            got = dvol.sample_grad_vjp(pts, a_val, a_jac, device="cuda")
            voxel_data, points = got.voxel_data(topo), got.points.compute()
            background = np.asarray(got.background.result())
        finally:
            dvol.close()
    assert len(calls) >= 4  # every partition's pieces on the (emulated) GPU
    tol = 1e-10 * max(1.0, float(np.abs(want.voxel_data).max()))
    np.testing.assert_allclose(voxel_data, want.voxel_data, atol=tol, rtol=0)
    np.testing.assert_allclose(points, want.points, atol=1e-10, rtol=0)
    np.testing.assert_allclose(background, want.background, atol=1e-8, rtol=0)


def test_torch_autograd_through_the_gpu(rng):
    """vdbflow.ops.autograd on the GPU: points, adjoints and results through DLPack, forward and reverse
    equal to the CPU's (CUDA tensors on a GPU machine; CPU tensors with device="cuda" under the emulation)."""
    torch = pytest.importorskip("torch")
    from vdbflow.ops import autograd

    ijk = np.argwhere(np.ones((6, 6, 6), bool)) - 2
    topo = vdbflow.Volume.from_active(ijk)
    where = "cpu" if EMULATED else "cuda"

    def leaves():
        data = torch.tensor(rng.standard_normal((topo.active_voxel_count, 3)), dtype=torch.float64, device=where)
        pts = torch.tensor(rng.uniform(-1.5, 2.5, (64, 3)), dtype=torch.float64, device=where)
        bg = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64, device=where)
        return [t.requires_grad_() for t in (pts, data, bg)]

    inputs = leaves()
    grads = {}
    for device in ("cpu", "cuda"):
        xs = [t.detach().clone().requires_grad_() for t in inputs]
        if device == "cpu" and where == "cuda":
            xs = [t.detach().cpu().requires_grad_() for t in inputs]
        values, jac = autograd.sample_grad(topo, *xs, device=device)
        assert values.device.type == (where if device == "cuda" else "cpu")
        loss = (values**2).sum() + (jac * jac).sum()
        loss.backward()
        grads[device] = [values.detach().cpu().numpy(), jac.detach().cpu().numpy()]
        grads[device] += [x.grad.detach().cpu().numpy() for x in xs]
    for got, want in zip(grads["cuda"], grads["cpu"], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-10, rtol=1e-10)


def test_the_host_rows_run_on_the_host_for_cupy_inputs_and_refuse_cupy_outputs():
    """reduce_features and merge_partials have no entry in sample.cu (OPERATION_HOST rows): the CUDA backend makes
    them from the row, the CPU's function with CuPy inputs copied to the host (the CPU's counts, to the bit); an
    array the row writes must be a host array."""
    from vdbflow.devices import cpu, cuda
    from vdbflow.errors import DeviceError
    from vdbflow.ops.reductions import Histogram, Statistics, quantity

    vol = vdbflow.Volume.from_dense(np.zeros((8, 8, 8), np.float32))
    stats = Statistics(histograms=[Histogram((quantity("value", vol, "index"),), (np.linspace(-3, 3, 13),))])
    spec, edges, want, _ = stats.layout()
    _, _, got, _ = stats.layout()
    features = np.random.default_rng(5).standard_normal((1000, 1)).astype(np.float32)
    cpu.reduce_features(spec, features, edges, want.ints, want.reals)
    cuda.reduce_features(spec, cupy.asarray(features)[::1], edges, got.ints, got.reals)
    np.testing.assert_array_equal(got.ints, want.ints)
    assert want.ints.sum() == 1000
    with pytest.raises(DeviceError, match="merge_partials runs on the host and writes ints: expected a NumPy"):
        cuda.merge_partials(spec, edges, cupy.asarray(got.ints), got.reals, want.ints, want.reals)
    cuda.merge_partials(spec, edges, got.ints, got.reals, cupy.asarray(want.ints), cupy.asarray(want.reals))
    np.testing.assert_array_equal(got.ints, 2 * want.ints)
