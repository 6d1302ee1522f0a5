"""The ``output:`` section of a job config: where the result goes (a local path or an fsspec URL with
``storage_options``), its format, chunks, Zarr format and shards, and whether an earlier result there
may be replaced.

``output.path`` keeps a URL as text (``s3://bucket/out.zarr``): read as a path, its ``//`` would fold
into a local folder ``s3:/bucket``.  ``file://`` URLs are local paths.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_serializer, model_validator

from vdbflow.jobs.config.base import StrictModel
from vdbflow.jobs.publish.writers import WRITERS, format_of_path

OUTPUT_FORMATS = tuple(WRITERS)
COMPRESSIONS = ("lz4", "zstd", "none")  # of Zarr chunks (jobs.publish.writers.zarr_store)
MAX_CHUNK_POINTS = 1 << 27  # points of one chunk: one task holds them and every output (gigabytes)
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# protocols whose first path segment is a bucket (or container): a result needs a prefix inside it
BUCKETED = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss")


def url_protocol(path: Any) -> str | None:
    """The protocol of a URL other than ``file://`` (``s3``, ``memory``, ...); None for a local path."""
    match = _URL.match(str(path)) if isinstance(path, str) else None
    if match is None or match.group(1).lower() == "file":
        return None
    return match.group(1).lower()


def _path_or_url(value: Any) -> Any:
    """A local path as a Path (``file://`` dropped); a URL kept as text, its protocol one fsspec knows."""
    if "\0" in str(value):
        raise ValueError(f"expected a path without NUL bytes, got {str(value)!r:.80}")
    if not isinstance(value, str):
        return value
    protocol = url_protocol(value)
    if protocol is None:
        return Path(value[len("file://") :] if value.lower().startswith("file://") else value)
    from fsspec.registry import known_implementations, registry

    if protocol not in known_implementations and protocol not in registry:
        raise ValueError(f"expected a local path or a URL whose protocol fsspec knows, got {value!r}")
    rest = value[len(protocol) + 3 :].strip("/")
    if not rest:
        raise ValueError(f"expected a URL naming the result's prefix, got {value!r}")
    if protocol in BUCKETED and "/" not in rest:
        raise ValueError(
            f"expected a URL naming a prefix inside a bucket ({protocol}://BUCKET/NAME.zarr), got the bucket root "
            f"{value!r}: a result is written beside its final prefix, and a bucket has nothing beside it"
        )
    return value.rstrip("/")


OutputPath = Annotated[Path | str, BeforeValidator(_path_or_url)]


class OutputSpec(StrictModel):
    """Where and how the result is written."""

    path: OutputPath = Field(description="a local path, or a URL (s3://, gs://, memory://, ...) fsspec opens")
    storage_options: dict[str, Any] | None = Field(
        None, description="with a URL: fsspec's options (credentials, endpoint_url, ...)"
    )
    format: Literal[OUTPUT_FORMATS] | None = Field(  # type: ignore[valid-type]
        None, description="default: netcdf for .nc, .nc4 and .netcdf, vtkhdf for .vtkhdf, else zarr"
    )
    chunk: int | None = Field(
        None, ge=1, le=MAX_CHUNK_POINTS, description="points per stored chunk; default: the points' chunk"
    )
    overwrite: Literal["never", "always"] = "never"
    compression: Literal[COMPRESSIONS] = Field(  # type: ignore[valid-type]
        "lz4",
        description="Zarr chunks: Blosc lz4 or zstd (byte shuffle), or none (fastest: float samples compress "
        "to ~0.8-0.9 of their size)",
    )
    zarr_format: Literal[2, 3] | None = Field(
        None, description="Zarr format of the store: 2 (default) or 3 (default with shard)"
    )
    shard: int | None = Field(
        None, ge=1, description="Zarr 3: points per shard (one object), a multiple of the chunk; default none"
    )

    @field_serializer("path", when_used="json")
    def _path_text(self, path: Path | str) -> str:
        """As stored with results: the path, or the URL with any credentials in it redacted."""
        from vdbflow.io.redact import redact_url

        return redact_url(path) if isinstance(path, str) else str(path)

    @field_serializer("storage_options", when_used="json")
    def _options_text(self, options: dict[str, Any] | None) -> dict[str, Any] | None:
        """As stored with results: credentials replaced by "<redacted>"."""
        from vdbflow.io.redact import redact

        return None if options is None else redact(options)

    @model_validator(mode="after")
    def _consistent(self) -> OutputSpec:
        if self.storage_options and self.url is None:
            raise ValueError(
                f"expected storage_options only with a URL output.path (s3://...), got the local path {self.path}"
            )
        if self.shard is not None and self.zarr_format == 2:
            raise ValueError("expected zarr_format 3 with shard (shards are a Zarr format 3 codec), got 2")
        if self.resolved_format != "zarr":  # one file: netcdf, vtkhdf
            fmt = self.resolved_format
            if self.zarr_format is not None or self.shard is not None:
                raise ValueError(f"expected zarr_format and shard only with format zarr, got format {fmt}")
            if self.url is not None:
                what = "NetCDF" if fmt == "netcdf" else "VTKHDF"
                raise ValueError(
                    f"expected a local path for a {what} result, got the URL {self.url}: write format zarr to "
                    f"object stores (one object a chunk or shard), or a {what} file to a local path"
                )
        return self

    @property
    def url(self) -> str | None:
        """The URL of the result, or None where ``path`` is local."""
        return self.path if isinstance(self.path, str) else None

    @property
    def local(self) -> Path:
        """The local path of the result (a ValueError for a URL: check :attr:`url` first)."""
        if isinstance(self.path, str):
            raise ValueError(f"expected a local output.path, got the URL {self.path}")
        return self.path

    @property
    def resolved_format(self) -> str:
        """The output format: ``format``, else what the path's suffix implies."""
        if self.format is not None:
            return self.format
        return format_of_path(PurePosixPath(self.path) if isinstance(self.path, str) else self.path)

    @property
    def resolved_zarr_format(self) -> int:
        """The Zarr format written: ``zarr_format``, else 3 with a shard, else 2."""
        if self.zarr_format is not None:
            return self.zarr_format
        return 3 if self.shard is not None else 2

    def shard_problem(self, chunk: int) -> str | None:
        """Why ``shard`` does not fit chunks of ``chunk`` points (the stored chunk), or None."""
        if self.shard is None or self.shard % chunk == 0:
            return None
        lo, hi = max(chunk, self.shard // chunk * chunk), -(-self.shard // chunk) * chunk
        return (
            f"expected output.shard a multiple of the stored chunk ({chunk:,} points), got {self.shard:,}; "
            f"{lo:,} or {hi:,} would do"
        )
