"""The house's seams, checked: short functions, a config layer that loads no runtime, the same sampling
arguments on every volume-like class, one writer module per output format, job steps read from graphs."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_layout import CONFIG_MODULES

import vdbflow
from vdbflow.distribution.volume import DistributedVolume
from vdbflow.temporal.series import DistributedSeries, VolumeSeries

PACKAGE = Path(vdbflow.__file__).parent
MAX_FUNCTION_LINES = 100


def _code_lines(lines: list[str], node: ast.AST) -> int:
    """Lines of a function that hold code: from its ``def`` to its end (decorators aside), without its
    docstring, blank lines and comment lines."""
    body = node.body
    skip: set[int] = set()
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        skip = set(range(first.lineno, first.end_lineno + 1))
    start = node.lineno
    count = 0
    for number in range(start, node.end_lineno + 1):
        text = lines[number - 1].strip()
        if number not in skip and text and not text.startswith("#"):
            count += 1
    return count


def test_no_function_is_longer_than_a_hundred_lines_of_code():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = _code_lines(lines, node)
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({n} lines)")
    assert long == []


def test_the_line_count_reads_code_only():
    source = '''def f(x):
    """A docstring
    of three
    lines."""
    # a comment

    return x
'''
    node = ast.parse(source).body[0]
    assert _code_lines(source.splitlines(), node) == 2


def test_validating_a_config_loads_no_runtime_module():
    """Config validation loads the tables, not the machinery: no xarray, Dask, pandas or zarr, and of
    vdbflow only the modules above (no sampling, no volumes, no files, no clusters)."""
    code = (
        "import sys, json\n"
        "from vdbflow.jobs.config.model import JobConfig\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('vdbflow', 'xarray', 'dask', 'distributed', 'pandas', 'zarr'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    import json

    loaded = set(json.loads(out))
    assert loaded <= CONFIG_MODULES, sorted(loaded - CONFIG_MODULES)


def test_a_missing_fsspec_package_still_names_the_s3_install_hint():
    """io/location.py imports vdbflow.version only when a missing package is reported (so that config
    validation does not load it): the message still ends with the s3 extra's install command."""
    from vdbflow.errors import StorageError
    from vdbflow.io.location import storage_error
    from vdbflow.version import install_hint

    err = storage_error("s3://bucket/a.nvdb", ImportError("No module named 's3fs'"))
    assert isinstance(err, StorageError)
    assert str(err).endswith(f"for s3:// install the s3 extra: {install_hint('s3')}"), str(err)
    assert "s3://bucket/a.nvdb" in str(err) and "s3fs" in str(err)


def _defaults(fn, names):
    params = inspect.signature(fn).parameters
    return {n: (params[n].default, params[n].kind) for n in names if n in params}, set(names) - set(params)


SAMPLING_ARGUMENTS = {
    "sample": ("mode", "space", "device", "dims"),
    "sample_grad": ("mode", "space", "jacobian_space", "device", "dims", "outputs"),
}


@pytest.mark.parametrize("method", list(SAMPLING_ARGUMENTS))
def test_every_volume_like_class_takes_the_same_sampling_arguments(method):
    """The same names, defaults and kinds on Volume, DistributedVolume, VolumeSeries and DistributedSeries
    (a series adds its times ``t`` and ``time``, a distributed volume its ``wave``)."""
    names = SAMPLING_ARGUMENTS[method]
    want, missing = _defaults(getattr(vdbflow.Volume, method), names)
    assert not missing
    for cls in (DistributedVolume, VolumeSeries, DistributedSeries):
        got, missing = _defaults(getattr(cls, method), names)
        assert not missing, f"{cls.__name__}.{method} lacks {sorted(missing)}"
        assert {n: d for n, (d, _) in got.items()} == {n: d for n, (d, _) in want.items()}, cls.__name__
    hessian = ("mode", "space", "jacobian_space", "hessian_space", "device", "dims")
    assert _defaults(DistributedVolume.sample_hessian, hessian) == _defaults(vdbflow.Volume.sample_hessian, hessian)


@pytest.fixture(scope="module")
def client():
    import distributed

    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def test_hessians_take_the_points_dims_on_every_volume(rng, client):
    i, j, k = np.meshgrid(np.arange(16), np.arange(16), np.arange(16), indexing="ij")
    vol = vdbflow.Volume.from_dense((1.0 + i * i + i * j * k).astype(np.float32))
    plane = rng.uniform(3, 12, (4, 5, 3))
    ds = vol.sample_hessian(plane, space="index", dims=("s", "t"))
    assert ds["value_hessian"].dims == ("s", "t", "axis", "axis2")
    # f = 1 + i^2 + i j k: d2f/di2 = 2, d2f/dj dk = i, exactly for the cubic lag4 scheme
    np.testing.assert_allclose(ds["value_hessian"].values[..., 0, 0], 2.0, atol=1e-3)
    np.testing.assert_allclose(ds["value_hessian"].values[..., 1, 2], plane[..., 0], rtol=1e-4)
    with vdbflow.distribute(vol, client, 2, halo=2) as dvol:
        far = dvol.sample_hessian(plane, space="index", dims=("s", "t")).compute()
    assert far["value_hessian"].dims == ("s", "t", "axis", "axis2")
    np.testing.assert_array_equal(far["value_hessian"].values, ds["value_hessian"].values)


def test_each_output_format_is_one_writer():
    from vdbflow.jobs.config.model import OUTPUT_FORMATS
    from vdbflow.jobs.config.output import OutputSpec
    from vdbflow.jobs.publish import writers
    from vdbflow.jobs.publish.writers.zarr_store import ZarrStore

    assert OUTPUT_FORMATS == tuple(writers.WRITERS)
    methods = ("prepare", "lazy_write", "add_attrs", "manifest_target", "discard")
    protocol = {m: list(inspect.signature(getattr(writers.Writer, m)).parameters) for m in methods}
    for name in writers.WRITERS:
        writer = writers.writer(name)
        assert writer.format == name
        for method, parameters in protocol.items():  # every method of the Writer protocol, with its parameters
            assert list(inspect.signature(getattr(type(writer), method)).parameters) == parameters, (name, method)
    # a writer holds its options, read from the config once: no config object reaches a store
    spec = OutputSpec(path="r.zarr", compression="zstd", shard=1000)
    assert writers.writer("zarr", spec) == ZarrStore(compression="zstd", zarr_format=3, shard=1000)
    staging = writers.writer("netcdf", OutputSpec(path="r.nc", compression="zstd")).staging
    assert staging == ZarrStore(compression="none", zarr_format=2, storage_options=None, shard=None)  # local, as stored
    assert writers.format_of_path(Path("a/b.NC")) == "netcdf" and writers.format_of_path(Path("b.zarr")) == "zarr"
    assert writers.format_of_path(Path("b")) == "zarr" and writers.format_of_path(Path("c.vtkhdf")) == "vtkhdf"
    with pytest.raises(vdbflow.WriteError, match="expected an output format among zarr, netcdf, vtkhdf, got 'hdf4'"):
        writers.writer("hdf4")


def test_each_kind_of_points_is_a_config_class_and_a_row_of_the_sources():
    import typing

    from vdbflow.jobs.config.model import PointsSpec
    from vdbflow.jobs.points import SOURCES

    classes = typing.get_args(typing.get_args(PointsSpec)[0])  # Annotated[A | B | ..., discriminator]
    kinds = [typing.get_args(c.model_fields["kind"].annotation)[0] for c in classes]
    assert len(classes) == 6 and sorted(kinds) == sorted(SOURCES)


def test_job_steps_are_read_from_the_graphs_not_from_dask_key_names():
    """Tasks of the points' graph are "points", the writer's own tasks "writing", the samples' unprefixed
    tasks "derived", and vdbflow's own prefixes win wherever they are."""
    import dask.array as da

    from vdbflow.distribution import keys
    from vdbflow.jobs.progress import step_of, steps_of_graphs

    points = da.ones((10, 3), chunks=(5, 3))
    samples = (points * 2).sum(axis=1)
    written = samples + 1  # stands for a writer's graph: it holds the samples' tasks and its own
    steps = steps_of_graphs({"points": points, "samples": samples, "writing": written})
    assert {steps[k] for k in points.__dask_graph__()} == {"points"}
    own = set(written.__dask_graph__()) - set(samples.__dask_graph__())
    assert own and {step_of(k, steps) for k in own} == {"writing"}
    mine = set(samples.__dask_graph__()) - set(points.__dask_graph__())
    assert {step_of(k, steps) for k in mine} == {"derived"}
    assert step_of((f"{keys.ROUTE}-abc", 0), steps) == "routing"
