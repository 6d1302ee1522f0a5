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

from .errors import (
    DeviceError,
    NanoVDBError,
    PointsError,
    SamplingError,
    ShapeError,
    VdbflowError,
    VolumeError,
)

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and IDEs
    from .config import ConfigError
    from .distributed import DistributedVolume, distribute
    from .errors import TimeError
    from .grid_fields import derived_field, gradient_field, hessian_field, q_criterion_field
    from .hessian import sample_hessian, sample_hessian_arrays
    from .job import InputError, JobError, JobResult, run
    from .nanovdb import BlindData, GridInfo, list_grids, save
    from .particles import advect, ftle
    from .sampling import sample, sample_grad, sample_grad_arrays
    from .series import VolumeSeries, open_series
    from .transform import Transform
    from .units import UnitsWarning
    from .value_types import VALUE_TYPES, ValueType
    from .vjp import SampleGradVJP, sample_grad_vjp
    from .volume import Topology, Volume
    from .volume_io import open_volume as open  # noqa: A004 - vdbflow.open(path) reads like xarray.open_dataset
    from .volume_io import open_zarr, split_channels

# public name -> (module, attribute); imported on first access by __getattr__
_LAZY = {
    "BlindData": ("nanovdb", "BlindData"),
    "ConfigError": ("config", "ConfigError"),
    "DistributedVolume": ("distributed", "DistributedVolume"),
    "GridInfo": ("nanovdb", "GridInfo"),
    "InputError": ("job", "InputError"),
    "JobError": ("job", "JobError"),
    "JobResult": ("job", "JobResult"),
    "SampleGradVJP": ("vjp", "SampleGradVJP"),
    "TimeError": ("errors", "TimeError"),
    "Topology": ("volume", "Topology"),
    "Transform": ("transform", "Transform"),
    "UnitsWarning": ("units", "UnitsWarning"),
    "VALUE_TYPES": ("value_types", "VALUE_TYPES"),
    "VolumeSeries": ("series", "VolumeSeries"),
    "ValueType": ("value_types", "ValueType"),
    "Volume": ("volume", "Volume"),
    "advect": ("particles", "advect"),
    "derived_field": ("grid_fields", "derived_field"),
    "distribute": ("distributed", "distribute"),
    "ftle": ("particles", "ftle"),
    "gradient_field": ("grid_fields", "gradient_field"),
    "hessian_field": ("grid_fields", "hessian_field"),
    "list_grids": ("nanovdb", "list_grids"),
    "open": ("volume_io", "open_volume"),
    "open_series": ("series", "open_series"),
    "open_zarr": ("volume_io", "open_zarr"),
    "q_criterion_field": ("grid_fields", "q_criterion_field"),
    "run": ("job", "run"),
    "sample": ("sampling", "sample"),
    "sample_grad": ("sampling", "sample_grad"),
    "sample_grad_arrays": ("sampling", "sample_grad_arrays"),
    "sample_grad_vjp": ("vjp", "sample_grad_vjp"),
    "sample_hessian": ("hessian", "sample_hessian"),
    "sample_hessian_arrays": ("hessian", "sample_hessian_arrays"),
    "save": ("nanovdb", "save"),
    "split_channels": ("volume_io", "split_channels"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("vdbflow")
        except PackageNotFoundError:  # pragma: no cover - source tree without install
            value = "0+unknown"
    elif name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)  # vdbflow.flow, vdbflow.synthetic, ...
    else:
        raise AttributeError(f"module 'vdbflow' has no attribute {name!r}")
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})


class _RegisterAccessor(importlib.abc.MetaPathFinder):
    """Imports ``vdbflow.flow`` (the ``ds.vdbflow`` accessor) right after xarray is imported."""

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
                importlib.import_module(".flow", __name__)
            except Exception as err:  # xarray itself imported fine: don't fail its import
                warnings.warn(f"vdbflow could not register the ds.vdbflow accessor: {err!r}", stacklevel=2)

        spec.loader.exec_module = exec_module  # this loader instance serves this one import
        return spec


if "xarray" in sys.modules:
    from . import flow  # noqa: F401 - registers the ds.vdbflow accessor
elif not any(isinstance(f, _RegisterAccessor) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAccessor())

__all__ = [
    "BlindData",
    "ConfigError",
    "VALUE_TYPES",
    "DeviceError",
    "DistributedVolume",
    "GridInfo",
    "InputError",
    "JobError",
    "JobResult",
    "NanoVDBError",
    "PointsError",
    "SamplingError",
    "SampleGradVJP",
    "ShapeError",
    "TimeError",
    "Topology",
    "Transform",
    "UnitsWarning",
    "ValueType",
    "VdbflowError",
    "Volume",
    "VolumeError",
    "VolumeSeries",
    "advect",
    "derived_field",
    "distribute",
    "ftle",
    "gradient_field",
    "hessian_field",
    "list_grids",
    "open",
    "open_series",
    "open_zarr",
    "q_criterion_field",
    "run",
    "sample",
    "save",
    "split_channels",
    "sample_grad",
    "sample_grad_arrays",
    "sample_grad_vjp",
    "sample_hessian",
    "sample_hessian_arrays",
]
