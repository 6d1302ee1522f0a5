"""vdbflow: values and Jacobians sampled from sparse NanoVDB-style volumes, as xarray.

Names are imported when first used (``vdbflow.sample`` imports xarray, ``vdbflow.run`` Dask), so
``import vdbflow`` and the ``vdbflow`` command start without loading xarray, pandas or Dask.  The
``ds.vdbflow`` accessor is registered as soon as xarray is imported, whoever imports it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import TYPE_CHECKING, Any

from vdbflow.errors import (
    DeviceError,
    NanoVDBError,
    OpenVDBError,
    PointsError,
    SamplingError,
    ShapeError,
    StorageError,
    VdbflowError,
    VolumeError,
    WriteError,
)

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and IDEs
    from vdbflow.analysis.grid_fields import derived_field, gradient_field, hessian_field, q_criterion_field
    from vdbflow.core.transform import Transform
    from vdbflow.core.units import UnitsWarning
    from vdbflow.core.value_types import VALUE_TYPES, ValueType
    from vdbflow.core.volume import Topology, Volume
    from vdbflow.distribution.volume import DistributedVolume, distribute
    from vdbflow.errors import ChecksumWarning, ClusterError, DistributionError, TimeError
    from vdbflow.io.labels import open_result
    from vdbflow.io.nanovdb import BlindData, GridInfo, save
    from vdbflow.io.volumes import list_grids, open_zarr, split_channels
    from vdbflow.io.volumes import open_volume as open  # noqa: A004 - vdbflow.open(path) reads like xarray.open_dataset
    from vdbflow.jobs.config.model import ConfigError
    from vdbflow.jobs.inputs import InputError
    from vdbflow.jobs.runner import JobError, JobResult, run
    from vdbflow.ops.hessian import sample_hessian, sample_hessian_arrays
    from vdbflow.ops.reductions import Statistics
    from vdbflow.ops.sampling import sample, sample_grad, sample_grad_arrays
    from vdbflow.ops.statistics import conditional_mean, histogram, moments, statistics
    from vdbflow.ops.vjp import SampleGradVJP, sample_grad_vjp
    from vdbflow.temporal.particles import advect, ftle
    from vdbflow.temporal.series import DistributedSeries, VolumeSeries, open_series

# public name -> (module, attribute); imported on first access by __getattr__
_LAZY = {
    "BlindData": ("io.nanovdb", "BlindData"),
    "ChecksumWarning": ("errors", "ChecksumWarning"),
    "ClusterError": ("errors", "ClusterError"),
    "ConfigError": ("jobs.config.model", "ConfigError"),
    "DistributedVolume": ("distribution.volume", "DistributedVolume"),
    "DistributionError": ("errors", "DistributionError"),
    "GridInfo": ("io.nanovdb", "GridInfo"),
    "InputError": ("jobs.inputs", "InputError"),
    "JobError": ("jobs.runner", "JobError"),
    "JobResult": ("jobs.runner", "JobResult"),
    "SampleGradVJP": ("ops.vjp", "SampleGradVJP"),
    "TimeError": ("errors", "TimeError"),
    "Topology": ("core.volume", "Topology"),
    "Transform": ("core.transform", "Transform"),
    "UnitsWarning": ("core.units", "UnitsWarning"),
    "VALUE_TYPES": ("core.value_types", "VALUE_TYPES"),
    "VolumeSeries": ("temporal.series", "VolumeSeries"),
    "DistributedSeries": ("temporal.series", "DistributedSeries"),
    "ValueType": ("core.value_types", "ValueType"),
    "Volume": ("core.volume", "Volume"),
    "advect": ("temporal.particles", "advect"),
    "conditional_mean": ("ops.statistics", "conditional_mean"),
    "histogram": ("ops.statistics", "histogram"),
    "moments": ("ops.statistics", "moments"),
    "statistics": ("ops.statistics", "statistics"),
    "Statistics": ("ops.reductions", "Statistics"),
    "derived_field": ("analysis.grid_fields", "derived_field"),
    "distribute": ("distribution.volume", "distribute"),
    "ftle": ("temporal.particles", "ftle"),
    "gradient_field": ("analysis.grid_fields", "gradient_field"),
    "hessian_field": ("analysis.grid_fields", "hessian_field"),
    "list_grids": ("io.volumes", "list_grids"),
    "open": ("io.volumes", "open_volume"),
    "open_series": ("temporal.series", "open_series"),
    "open_result": ("io.labels", "open_result"),
    "open_zarr": ("io.volumes", "open_zarr"),
    "q_criterion_field": ("analysis.grid_fields", "q_criterion_field"),
    "run": ("jobs.runner", "run"),
    "sample": ("ops.sampling", "sample"),
    "sample_grad": ("ops.sampling", "sample_grad"),
    "sample_grad_arrays": ("ops.sampling", "sample_grad_arrays"),
    "sample_grad_vjp": ("ops.vjp", "sample_grad_vjp"),
    "sample_hessian": ("ops.hessian", "sample_hessian"),
    "sample_hessian_arrays": ("ops.hessian", "sample_hessian_arrays"),
    "save": ("io.nanovdb", "save"),
    "split_channels": ("io.volumes", "split_channels"),
}

# modules users reach as vdbflow.<name> (``from vdbflow import flow``), wherever they live
_MODULES = {
    "flow": "analysis.flow",
    "plot": "analysis.plot",
    "units": "core.units",
    "autograd": "ops.autograd",
    "coverage": "ops.coverage",
    "unsteady": "synthetic.unsteady",
    "points": "ops.points",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from vdbflow.version import __version__ as value
    elif name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
    elif name in _MODULES:
        value = importlib.import_module(f".{_MODULES[name]}", __name__)
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)  # the subpackages: vdbflow.core, vdbflow.ops, ...
    else:
        raise AttributeError(f"module 'vdbflow' has no attribute {name!r}")
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})


class _RegisterAccessor(importlib.abc.MetaPathFinder):
    """Imports ``vdbflow.analysis.flow`` (the ``ds.vdbflow`` accessor) right after xarray is imported."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "xarray":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once; the other finders locate xarray
        spec = importlib.util.find_spec("xarray")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run_module(module)
            try:
                importlib.import_module(".analysis.flow", __name__)
            except Exception as err:  # xarray itself imported fine: don't fail its import
                warnings.warn(f"vdbflow could not register the ds.vdbflow accessor: {err!r}", stacklevel=2)

        spec.loader.exec_module = exec_module  # this loader instance serves this one import
        return spec


if "xarray" in sys.modules:
    from vdbflow.analysis import flow  # noqa: F401 - registers the ds.vdbflow accessor
elif not any(isinstance(f, _RegisterAccessor) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAccessor())

# the public names: the error types (imported above) and the lazy names; tests/test_api.py checks that the
# TYPE_CHECKING imports above name the same objects as _LAZY
_ERRORS = tuple(n for n, v in dict(globals()).items() if isinstance(v, type) and issubclass(v, Exception))
__all__ = sorted([*_ERRORS, *_LAZY])
