"""vdbflow's exception types: every error says what was expected and what was found."""

from __future__ import annotations


class VdbflowError(Exception):
    """Base class of every error raised by vdbflow."""


class VolumeError(VdbflowError, ValueError):
    """A volume, its topology, values, tiles or transform is malformed."""


class PointsError(VdbflowError, ValueError):
    """Sample points have the wrong shape, dtype or values for the request."""


class ShapeError(VdbflowError, ValueError):
    """An output buffer has the wrong shape or dtype."""


class SamplingError(VdbflowError, ValueError):
    """A sampling request is not possible (mode, space or value type)."""


class NoValuesError(SamplingError, AttributeError):
    """A :class:`~vdbflow.Topology` (which voxels exist, no values) was asked for what needs a Volume; an
    AttributeError too, so ``hasattr`` and ``getattr(..., default)`` still answer."""


class DeviceError(VdbflowError, RuntimeError):
    """The requested device or its runtime (CUDA, CuPy, NVRTC) is not available."""


class NanoVDBError(VdbflowError, ValueError):
    """A .nvdb file or grid buffer is malformed, truncated or of an unsupported kind."""


class OpenVDBError(VdbflowError, ValueError):
    """An OpenVDB .vdb file is malformed, truncated or holds a grid vdbflow does not read."""


class TimeError(VdbflowError, ValueError):
    """A time is outside a series or an integration, or a series' times are not strictly increasing."""


class WriteError(VdbflowError, OSError):
    """A file or store could not be written (a full disk, no permission); its path is as it was."""


class StorageError(VdbflowError, OSError):
    """A path or URL (``s3://``, ``https://``, ...) could not be read: no such object, no permission (bad
    credentials in ``storage_options``), an unknown protocol or a missing fsspec package; the URL is named."""


class OutputError(VdbflowError, RuntimeError):
    """A job's result could not be written or moved into place."""


class ClusterError(VdbflowError, RuntimeError):
    """A Dask cluster did not start, or its workers did not arrive in time."""


class DistributionError(ClusterError):
    """A volume cannot be distributed as asked: partitions that do not fit the workers' memory (the
    numbers needed and available are named), or partition tasks left with no worker that can run them."""


class ChecksumWarning(UserWarning):
    """A NanoVDB grid's stored checksum matches none of the rules of its version (a writer left it stale);
    the grid was read after its structural checks.  ``open(..., checksum="strict")`` raises instead."""
