"""The backend interface: both devices implement every operation of ``vdbflow.devices.interface.Backend``
with its parameters, and the device is chosen once, from the request and the points."""

from __future__ import annotations

import inspect
import pickle
import re

import numpy as np
import pytest

import vdbflow
import vdbflow.devices as devices
from vdbflow.core import kernel
from vdbflow.devices import backend, cpu, cuda
from vdbflow.devices.interface import OPERATIONS, Backend
from vdbflow.ops import sampling
from vdbflow.ops.request import SampleRequest


def _parameters(fn) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(fn).parameters.values() if p.name != "self"]


def test_the_interface_names_every_operation_of_the_kernels():
    """The Python interface and the kernels' table of operations (operations.h) list the same operations."""
    assert OPERATIONS == tuple(kernel.OPERATIONS)
    assert {name for name in vars(Backend) if not name.startswith("_")} == set(OPERATIONS)  # each declared
    assert {"sample", "derive", "sample_vjp", "route", "scatter_rows"} <= set(OPERATIONS)
    assert not set(kernel.GPU_STEPS) & set(OPERATIONS)  # a GPU step is no operation of its own
    for op in (*kernel.OPERATIONS.values(), *kernel.GPU_STEPS.values()):
        assert op.value_types in ("any", "float", "untyped", "host")
        assert (op.value_types == "untyped") == op.gpu_entry.startswith("vdbflow_")  # extern "C", else templates
        assert (op.value_types == "host") == (op.gpu_entry == "") == (op.gpu_parameters == ())  # run on the host
        assert op.gpu_components is None or (op.value_types in ("any", "float") and min(op.gpu_components) >= 1)
    assert all(op.cpu_parameters for op in kernel.OPERATIONS.values())  # every operation has a CPU entry
    assert all(not op.cpu_parameters for op in kernel.GPU_STEPS.values())


def test_each_rows_entries_are_defined_once_in_the_math_headers_with_its_parameters():
    """Each row's CPU entry and GPU entry are defined once, in the math headers, by the heads the row makes
    (operations.h VDBFLOW_CPU_ENTRY, VDBFLOW_GPU_ENTRY): no other file spells an entry's parameters.  The GPU
    entries sit under one of the two launch bounds, the untyped ones extern "C"; sample.cu and cpu_kernels.h define
    no entry of their own."""
    root = cuda.kernel_dir()
    headers = {f.name: f.read_text() for f in sorted((root / "vdbflow").glob("*.h")) if f.name != "operations.h"}
    text = "\n".join(headers.values())
    rows = {**kernel.OPERATIONS, **kernel.GPU_STEPS}
    for name, op in rows.items():
        cpu = re.findall(rf"^VDBFLOW_CPU_ENTRY\({name}\) {{", text, re.M)
        assert len(cpu) == (1 if op.cpu_parameters else 0), name
        gpu = re.findall(rf"^(.*)__global__ void (\w+) VDBFLOW_GPU_ENTRY\({name}\) {{", text, re.M)
        assert len(gpu) == (0 if op.value_types == "host" else 1), name
        if gpu:
            linkage, bounds = gpu[0]
            assert bounds in ("VDB_BOUNDS", "VDB_BOUNDS_FILL"), name
            assert (linkage == 'extern "C" ') == (op.value_types == "untyped"), name
    for own in ("sample.cu", "cpu_kernels.h"):
        source = (root / own).read_text()
        assert "__global__" not in source and not re.search(r"_entry\s*\(", source), own
    assert kernel.parameters("(const R* const* a, i64 n)") == (("const R* const*", "a"), ("i64", "n"))
    assert kernel.parameters("(const Real<T>* a)") == (("const Real<T>*", "a"),)


def test_a_launch_takes_its_arguments_by_the_rows_names_and_types():
    """The CUDA backend's argument list of a launch: in the row's order, scalars cast to their C types,
    None a null pointer, a missing name refused."""
    from vdbflow.devices import cuda_launch

    x = np.zeros(3)
    args = cuda_launch.arguments(
        "scatter_rows", {"dst": x, "index": None, "src": x, "m": 2, "row_bytes": 8, "other": 1}
    )
    assert [type(a) for a in args] == [np.ndarray, np.uint64, np.ndarray, np.int64, np.int64]
    assert args[1] == 0 and args[3] == 2 and args[4] == 8
    route = dict.fromkeys(name for _, name in kernel.OPERATIONS["route"].gpu_parameters)
    route.update(n=5, points_world=True, shift=3, partitions=2, near_mask=7)
    assert [type(a) for a in cuda_launch.arguments("route", route)][1:6] == [
        np.int64, np.uint64, np.int32, np.uint64, np.int32
    ]  # fmt: skip
    with pytest.raises(vdbflow.DeviceError, match="needs m, row_bytes, which the call lacks"):
        cuda_launch.arguments("scatter_rows", {"dst": x, "index": x, "src": x})
    with pytest.raises(vdbflow.DeviceError, match="no entry of its own"):
        cuda_launch.entry("merge_partials")


def test_run_dispatches_an_operation_of_the_table_by_its_arrays(rng):
    dst = np.zeros((4, 2), np.float32)
    devices.run("scatter_rows", dst, np.array([3, 1]), np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(dst.any(axis=1), [False, True, False, True])
    J = rng.standard_normal((5, 3, 3))
    out = {"q_criterion": np.empty(5)}
    devices.run("derive", J, None, out, device="cpu")
    S, W = (J + J.transpose(0, 2, 1)) / 2, (J - J.transpose(0, 2, 1)) / 2
    np.testing.assert_allclose(out["q_criterion"], 0.5 * ((W**2).sum((1, 2)) - (S**2).sum((1, 2))), rtol=1e-12)
    with pytest.raises(vdbflow.DeviceError, match="expected an operation of the kernels among sample, .*got 'warp'"):
        devices.run("warp", dst)
    with pytest.raises(vdbflow.DeviceError, match="expected device"):
        devices.run("derive", J, None, out, device="gpu")


def test_nothing_outside_devices_calls_a_backend_module_itself():
    """Code outside vdbflow/devices runs the kernels through ``devices.run`` or a request: no module of
    another layer imports the backend modules ``cpu`` / ``cuda`` (``cuda_build``'s records aside; the
    ``vdbflow build-cuda`` command lists the CUDA entries it compiles, and runs none)."""
    import re
    from pathlib import Path

    package = Path(vdbflow.__file__).parent
    backend_import = re.compile(r"from vdbflow\.devices(\.(cpu|cuda)\b| import [^\n]*\b(cpu|cuda)\b(?!_))")
    offenders = [
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if p.parent.name != "devices"
        and p.relative_to(package).as_posix() not in ("jobs/gpu_cli.py", "jobs/cli/gpu.py")
        and backend_import.search(p.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize("module", [cpu, cuda], ids=["cpu", "cuda"])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_backend_implements_the_whole_interface(module, operation):
    """Same names, same parameters and defaults, on both devices (the CUDA module imports CuPy only
    when called, so this runs without a GPU)."""
    fn = getattr(module, operation, None)
    assert callable(fn), f"vdbflow.devices.{module.__name__.rsplit('.', 1)[1]} lacks {operation}"
    assert _parameters(fn) == _parameters(getattr(Backend, operation))


def test_the_device_is_chosen_from_the_request_and_the_points():
    assert backend("cpu") is cpu and backend("cuda") is cuda
    points = np.zeros((2, 3))
    assert SampleRequest(device="auto").device_for(points) == "cpu"
    assert SampleRequest(device="cuda").device_for(points) == "cuda"
    with pytest.raises(vdbflow.DeviceError):
        SampleRequest(device="gpu")


def test_the_cpu_backend_answers_each_operation(rng):
    """The operations beyond sampling, each against a plain NumPy answer."""
    ijk = np.unique(rng.integers(-12, 12, (300, 3)), axis=0)
    vol = vdbflow.Volume.from_voxels(ijk, rng.standard_normal(len(ijk)))
    topo = vol.topology
    # defined voxels: exactly the active ones here (no tiles)
    probe = np.concatenate([ijk[:50], ijk[:50] + 100])
    np.testing.assert_array_equal(cpu.defined_voxels(topo, probe), [True] * 50 + [False] * 50)
    # the rank-select of active voxels: the tree-order list of active voxels
    counts = np.bitwise_count(topo.masks).sum(axis=1).astype(np.int64)
    ranks = rng.integers(0, counts.sum(), 40)
    got = cpu.active_voxels_at(topo.leaf_origins, topo.masks, np.cumsum(counts), ranks)
    np.testing.assert_array_equal(got, vol.active_voxels()[ranks])
    # scatter rows
    dst = np.zeros((6, 2), np.float32)
    cpu.scatter_rows(dst, np.array([4, 0, 2]), np.arange(6.0).reshape(3, 2))
    np.testing.assert_array_equal(dst[[4, 0, 2]], np.arange(6.0).reshape(3, 2))
    assert not dst[[1, 3, 5]].any()
    # the stencil of closest reads one voxel: inside exactly at the active voxels
    inside = cpu.stencil_inside(topo, probe.astype(np.float64), sampling.MODES["closest"], False)
    np.testing.assert_array_equal(inside, [True] * 50 + [False] * 50)


def test_the_backend_function_is_not_shadowed_by_a_submodule():
    """``vdbflow.devices.backend`` stays the function once every submodule is imported."""
    import importlib
    import pkgutil

    import vdbflow.devices as devices

    for info in pkgutil.iter_modules(devices.__path__):
        if info.name != "cuda" or importlib.util.find_spec("cupy") is not None:
            importlib.import_module(f"vdbflow.devices.{info.name}")
    assert callable(devices.backend) and devices.backend("cpu") is cpu


def test_both_particle_bindings_refuse_bad_arrays_alike(rng):
    """``_core.advect`` and ``_core.advect_series`` share their checks of the tableau, steps, outputs and
    per-particle arrays (cpu_module.cpp particle_spec): the same bad array gets the same refusal from both."""
    from vdbflow import _core

    ijk = np.unique(rng.integers(-5, 5, (200, 3)), axis=0)
    vol = vdbflow.Volume.from_voxels(ijk, rng.standard_normal((len(ijk), 3)))
    record = kernel.host_record(vol.kernel_arrays())  # held: the record points into its arrays
    raw = record.call(kernel.MODES["linear"], True, True).tobytes()
    n = 4
    common = {
        "x": np.zeros((n, 3)),
        "a": np.zeros((1, 1)),
        "b": np.ones(1),
        "h": 0.1,
        "save_slot": np.array([0, 1], np.int64),
        "position": np.full((n, 2, 3), np.nan),
        "velocity": None,
        "jacobian": None,
        "F": None,
        "status": np.zeros(n, np.int8),
        "last_step": np.zeros(n, np.int64),
    }
    window = {
        "records": [raw],
        "topology": np.zeros(1, np.int32),
        "time_kind": 2,
        "stage_grid": np.zeros((2, 1, 4), np.int32),
        "stage_coef": np.zeros((2, 1, 8)),
        "first_step": 0,
    }

    def both(**bad):
        one = {**common, "record": raw, "evaluations": np.zeros(n, np.int32), **bad}
        series = {**common, **window, "evaluations": np.zeros(n, np.int64), **bad}
        return [_call(_core.advect, one), _call(_core.advect_series, series)]

    assert both() == ["ok", "ok"]
    for bad, message in [
        ({"a": np.zeros((2, 2))}, "the tableau must be a (s, s) and b (s,), 1 <= s <= 4"),
        ({"status": np.zeros(3, np.int8)}, "status, last_step and evaluations must be (N,)"),
        ({"save_slot": np.array([0, 5], np.int64)}, "save slots must lie in [-1, S)"),
        ({"position": np.zeros((n, 2, 2))}, "position must be (N, S, 3)"),
        ({"F": np.zeros((n, 3))}, "F must be (N, 3, 3)"),
    ]:
        assert both(**bad) == [message, message]
    series = {**common, **window, "evaluations": np.zeros(n, np.int64)}
    assert _call(_core.advect_series, {**series, "stage_grid": np.zeros((3, 1, 4), np.int32)}) == (
        "stage_grid must be (m + 1, s, 4)"
    )


def _call(fn, kwargs: dict) -> str:
    try:
        fn(**kwargs)
    except ValueError as err:
        return str(err)
    return "ok"


def test_a_backend_function_binds_its_call_as_the_interface_declares_it():
    """``interface.implements``: positional, keyword and default arguments reach the body by the interface's
    names; a call the interface's signature refuses is refused with Python's TypeError."""
    from vdbflow.devices.interface import implements

    seen = []

    @implements
    def scatter_rows(c):
        seen.append(vars(c))

    @implements
    def route(c):
        return c.period

    scatter_rows(1, 2, 3)
    scatter_rows(1, src=3, index=2)
    assert seen == [{"dst": 1, "index": 2, "src": 3}] * 2
    assert route(*range(7)) is None and route(*range(7), period=9) == 9 and route(*range(8)) == 7
    for args, kwargs, message in [
        ((1, 2), {}, "missing a required argument: 'src'"),
        ((1, 2, 3, 4), {}, "too many positional arguments"),
        ((1, 2, 3), {"bogus": 1}, "unexpected keyword argument 'bogus'"),
        ((1, 2, 3), {"dst": 1}, "multiple values for argument 'dst'"),
    ]:
        with pytest.raises(TypeError, match=message):
            scatter_rows(*args, **kwargs)
    assert "dst[index] = src" in scatter_rows.__doc__


def test_an_operation_at_points_is_made_from_its_row_and_its_interface(rng, monkeypatch):
    """sample, sample_hessian and sample_vjp have no body in either backend: each backend makes their functions from
    the row (a record and points first) and the interface (the record's spaces are its ``*_world`` parameters, in
    order), and runs their checks first; an operation of another shape is refused, not guessed."""
    from vdbflow.devices import interface
    from vdbflow.errors import DeviceError, ShapeError

    assert interface.point_spaces("sample") == ("points_world", "jacobian_world")
    assert interface.point_spaces("sample_hessian") == ("points_world", "jacobian_world", "hessian_world")
    for other in ("route", "sample_derived", "sample_reduce"):  # another shape; a list of buffers; a spec
        with pytest.raises(DeviceError, match=f"expected a backend function for {other}: not an operation at points"):
            interface.point_spaces(other)
    for module in (cpu, cuda):
        made = module.sample_hessian
        assert made.__wrapped__.__code__ is module._point_operation("sample_hessian").__wrapped__.__code__
        assert pickle.loads(pickle.dumps(made)) is made  # a module function, pickled by reference
    # the spaces reach the record in the interface's order: of a grid of 2-unit voxels, world points are index points
    # times 2 and a world-space Hessian is the index-space one divided by 4; jacobian_world leaves the Hessian alone
    vol = vdbflow.Volume.from_dense(rng.normal(size=(12, 12, 12)).astype(np.float32), voxel_size=2.0)
    k, pts = vol.kernel_arrays(), rng.uniform(3, 8, size=(5, 3))

    def hessian(points_world, jacobian_world, hessian_world):
        h = np.empty(45, np.float32)
        at = pts * (2.0 if points_world else 1.0)
        cpu.sample_hessian(k, at, kernel.MODES["bspline3"], points_world, jacobian_world, hessian_world,
                           np.empty(5, np.float32), None, h)  # fmt: skip
        return h

    index = hessian(False, False, False)
    np.testing.assert_allclose(hessian(True, False, False), index, rtol=1e-5)
    np.testing.assert_array_equal(hessian(False, True, False), index)
    np.testing.assert_allclose(hessian(False, False, True), index / 4, rtol=1e-5)
    assert np.abs(index).max() > 0.1
    with pytest.raises(ShapeError, match="out_hessian"):  # its checks ran: a short buffer is refused
        short = np.empty(9, np.float32)
        cpu.sample_hessian(k, pts, kernel.MODES["bspline3"], False, False, False, np.empty(5, np.float32), None, short)
