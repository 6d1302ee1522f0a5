"""vdbflow: values and Jacobians sampled from sparse NanoVDB-style volumes, as xarray."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from . import flow, plot  # noqa: F401 - flow registers the ds.vdbflow accessor; plot imports matplotlib lazily
from .distributed import DistributedVolume, distribute
from .errors import (
    DeviceError,
    NanoVDBError,
    PointsError,
    SamplingError,
    ShapeError,
    VdbflowError,
    VolumeError,
)
from .gradient_field import derived_field, gradient_field, q_criterion_field
from .nanovdb import BlindData, GridInfo, list_grids, save
from .nanovdb import open_grid as open  # noqa: A004 - vdbflow.open(path) reads like xarray.open_dataset
from .sampling import sample, sample_grad, sample_grad_arrays
from .transform import Transform
from .value_types import VALUE_TYPES, ValueType
from .vjp import SampleGradVJP, sample_grad_vjp
from .volume import Topology, Volume
from .volume_io import open_zarr, split_channels

try:
    __version__ = version("vdbflow")
except PackageNotFoundError:  # pragma: no cover - source tree without install
    __version__ = "0+unknown"

__all__ = [
    "BlindData",
    "VALUE_TYPES",
    "DeviceError",
    "DistributedVolume",
    "GridInfo",
    "NanoVDBError",
    "PointsError",
    "SamplingError",
    "SampleGradVJP",
    "ShapeError",
    "Topology",
    "Transform",
    "ValueType",
    "VdbflowError",
    "Volume",
    "VolumeError",
    "derived_field",
    "distribute",
    "gradient_field",
    "list_grids",
    "open",
    "open_zarr",
    "q_criterion_field",
    "sample",
    "save",
    "split_channels",
    "sample_grad",
    "sample_grad_arrays",
    "sample_grad_vjp",
]
