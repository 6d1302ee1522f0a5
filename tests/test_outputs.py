"""The one table of outputs (vdbflow.core.outputs): it holds what the kernels export, the modules that need
output names read it, and nothing else in the package lists them."""

import ast
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import vdbflow
from vdbflow.analysis import flow, grid_fields, plot
from vdbflow.core import kernel, outputs
from vdbflow.jobs.config import model as config
from vdbflow.ops.request import SampleRequest

PACKAGE = Path(vdbflow.__file__).resolve().parent


def test_the_table_holds_the_kernels_derived_quantities():
    derived = outputs.names("derived")
    assert derived == kernel.DERIVED  # the kernels' names, in the kernels' order
    for name in derived:
        assert outputs.TABLE[name].width == kernel.DERIVED_WIDTHS[name]
        assert outputs.TABLE[name].long_name and outputs.TABLE[name].formula
    assert [n for n, o in outputs.TABLE.items() if o.velocity] == ["helicity"]


@pytest.mark.parametrize("components", [1, 3, 4])
def test_entries_are_the_request_shapes(components):
    """A point's entries of each output, as the table counts them, are the shapes the request makes."""
    asked = ("value", "jacobian", "hessian") if components != 3 else ("value", "jacobian", *kernel.DERIVED)
    shapes = SampleRequest("linear", asked).shapes((5,), components)
    for name in asked:
        assert int(np.prod(shapes[name])) == 5 * outputs.TABLE[name].entries(components), name
    assert outputs.bytes_per_point("inside", components, 4) == 1
    assert outputs.bytes_per_point("laplacian", components, 4) == 4 * components


def test_flow_functions_take_their_attrs_from_the_table():
    J = np.array([[[0.1, -2.0, 0.3], [2.0, 0.2, 0.0], [0.4, 0.0, -0.3]]])
    jac = xr.DataArray(J, dims=("point", "component", "axis"), attrs={"units": "1/s"})
    vel = xr.DataArray([[1.0, 2.0, 3.0]], dims=("point", "component"), attrs={"units": "m/s"})
    for name in (*outputs.names("derived"), *outputs.names("tensor")):
        named = getattr(flow, name, None)  # a quantity without a named function: flow.derived
        out = flow.helicity(vel, jac) if name == "helicity" else named(jac) if named else flow.derived(jac, name)
        o = outputs.TABLE[name]
        assert out.name == name and out.attrs["long_name"] == o.long_name and out.attrs["formula"] == o.formula
        want = {1: "1/s", 2: "1/s^2", 3: "1/s^3", None: "m/s^2"}[o.exponent]
        assert out.attrs["units"] == want, name


def test_readers_of_the_table():
    assert set(plot.DERIVED_SCALARS) == {n for n in kernel.DERIVED if outputs.TABLE[n].width == 1}
    assert "strain_rate_magnitude" in plot.DERIVED_SCALARS  # the list that had drifted
    assert set(grid_fields.FIELD_QUANTITIES) == set(plot.DERIVED_SCALARS) - {"helicity"}
    assert set(config.OUTPUTS) == set(outputs.TABLE)
    assert set(config.DERIVED) == set(outputs.names("derived", "tensor"))


def test_every_plot_quantity_is_computed_from_a_dataset():
    vel = vdbflow.synthetic.flow_volume(vdbflow.synthetic.abc_flow(), 16)
    ds = vel.sample_grad(np.random.default_rng(0).uniform(1.0, 5.0, (20, 3)))
    for name in plot.DERIVED_SCALARS:
        got = getattr(ds.vdbflow, name)()
        assert got.shape == (20,) and got.attrs["long_name"] == outputs.TABLE[name].long_name


def _listed_names(tree: ast.AST) -> list[tuple[int, list[str]]]:
    """Literal tuples, lists, sets and dict keys holding two or more names of derived quantities."""
    names = set(outputs.names("derived", "tensor"))
    found = []
    for node in ast.walk(tree):
        elements = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or elements is None:
            continue
        strings = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        hits = [s for s in strings if s in names]
        if len(hits) >= 2:
            found.append((node.lineno, hits))
    return found


def test_nothing_else_lists_output_names():
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "outputs.py" and path.parent.name == "core":
            continue
        found = _listed_names(ast.parse(path.read_text()))
        if found:
            offenders[str(path.relative_to(PACKAGE))] = found
    assert not offenders, offenders
    assert _listed_names(ast.parse((PACKAGE / "core" / "outputs.py").read_text()))  # the scan finds the table


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_derived_quantity_has_a_function_through_the_table(rng, dtype):
    """``flow.derived`` (the kernels' formula) answers each derived quantity of the table, as the named
    NumPy function does, with the same attrs: a quantity added to the kernels needs no Python of its own."""
    J = xr.DataArray(
        rng.standard_normal((40, 3, 3)).astype(dtype),
        dims=("point", "component", "axis"),
        coords={"component": list("uvw"), "axis": list("xyz")},
        attrs={"units": "1/s"},
    )
    u = xr.DataArray(rng.standard_normal((40, 3)).astype(dtype), dims=("point", "component"), attrs={"units": "m/s"})
    ds = xr.Dataset({"velocity": u, "velocity_jacobian": J})
    A = (
        J.values.astype(np.float64)
        - np.trace(J.values.astype(np.float64), axis1=1, axis2=2)[:, None, None] * np.eye(3) / 3
    )
    for name in outputs.names("derived"):
        got = flow.derived(J, name, u)
        tol = 2e-4 if dtype == np.float32 else 1e-10
        if name == "r_invariant":  # no named NumPy function: the invariant's definition here
            np.testing.assert_allclose(got.values, -np.linalg.det(A), rtol=tol, atol=tol)
            np.testing.assert_allclose(got.values, -np.einsum("nij,njk,nki->n", A, A, A) / 3, rtol=tol, atol=tol)
            assert got.attrs["units"] == "1/s^3" and got.dtype == dtype
            np.testing.assert_array_equal(ds.vdbflow.r_invariant().values, got.values)
            continue
        ref = flow.helicity(u, J) if name == "helicity" else getattr(flow, name)(J)
        np.testing.assert_allclose(got.values, ref.values, rtol=tol, atol=tol)
        assert got.dtype == ref.dtype and got.dims == ref.dims and got.attrs == ref.attrs, name
        np.testing.assert_array_equal(ds.vdbflow.derived(name).values, got.values)
    lazy = flow.derived(J.chunk({"point": 10}), "q_criterion")
    np.testing.assert_array_equal(lazy.compute().values, flow.derived(J, "q_criterion").values)
    with pytest.raises(
        vdbflow.SamplingError, match="expected a derived quantity among divergence, .*got 'strain_rate'"
    ):
        flow.derived(J, "strain_rate")
    with pytest.raises(vdbflow.SamplingError, match="helicity needs the velocity"):
        flow.derived(J, "helicity")
