"""Inputs of a job config that may be URLs: ``volume.path``, ``volume.series.paths`` and ``points.path``
take local paths or URLs fsspec opens (``s3://``, ``gs://``, ``https://``), read with the section's
``storage_options`` (docs/storage.md)."""

from __future__ import annotations

import glob as local_glob
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import Field, PlainSerializer, PlainValidator, field_serializer, model_validator

from vdbflow.io.location import Url, glob, is_url, local_path
from vdbflow.jobs.config.base import StrictModel


def _location(value: Any) -> Path | Url:
    """A URL as a :class:`~vdbflow.io.location.Url` (``file://`` and plain paths: a Path)."""
    if isinstance(value, (Path, Url)):
        text = str(value)
    elif isinstance(value, (str, os.PathLike)) and not isinstance(value, bytes):
        text = os.fspath(value)
    else:
        raise ValueError(f"expected a path or a URL (s3://...), got {type(value).__name__} {value!r:.80}")
    if "\0" in text:
        raise ValueError(f"expected a path without NUL bytes, got {text!r:.80}")
    if not is_url(text):
        return Path(local_path(text))
    from fsspec.registry import known_implementations, registry

    protocol = text.split("://", 1)[0].lower()
    if protocol not in known_implementations and protocol not in registry:
        raise ValueError(f"expected a URL whose protocol fsspec knows (s3, gs, az, https, ...), got {text!r:.80}")
    return Url(text)


def redact(options: Any) -> Any:
    """``storage_options`` with credential-like values redacted (:func:`vdbflow.io.redact.redact`; imported
    when a config is written, not when it is validated)."""
    from vdbflow.io.redact import redact as redact_options

    return redact_options(options)


def _url_text(value: Any) -> str:
    """A path, or a URL with any credentials in it (user:password@, presigned signatures) redacted."""
    from vdbflow.io.redact import redact_url

    return redact_url(str(value))


# a local path (pathlib.Path) or a URL (Url: a str); as JSON (the stored config), the text given with any
# credentials in it redacted
InputPath = Annotated[Any, PlainValidator(_location), PlainSerializer(_url_text, when_used="json")]

__all__ = ["InputPath", "InputSection", "redact", "series_files"]


def _with_options(value: Any, options: dict[str, Any] | None) -> Any:
    if isinstance(value, Url):
        return Url(str(value), options)
    if isinstance(value, list):
        return [_with_options(v, options) for v in value]
    return value


def _holds_url(value: Any) -> bool:
    if isinstance(value, str):  # a Url, or a URL glob pattern
        return is_url(value)
    if isinstance(value, list):
        return any(_holds_url(v) for v in value)
    return isinstance(value, InputSection) and value.holds_urls()


class InputSection(StrictModel):
    """A config section whose paths may be URLs, read with its ``storage_options`` (which sections inside
    it that give none inherit)."""

    storage_options: dict[str, Any] | None = Field(
        None,
        repr=False,  # credentials: never in a printed config
        description="fsspec's options for URL paths (s3://...): credentials, endpoint_url, anon, ... "
        "(default: the environment's, e.g. AWS_* variables)",
    )

    url_fields: ClassVar[tuple[str, ...]] = ()  # the fields holding paths or URLs, or sections that do

    @field_serializer("storage_options", when_used="json")
    def _redacted(self, options: dict[str, Any] | None) -> dict[str, Any] | None:
        """As stored with results and compared on resume: credentials replaced by "<redacted>"."""
        return None if options is None else redact(options)

    def holds_urls(self) -> bool:
        """Whether any path of the section (or of a section inside it) is a URL."""
        return any(_holds_url(getattr(self, name)) for name in self.url_fields)

    @model_validator(mode="after")
    def _attach_options(self) -> InputSection:
        """Each URL of the section carries the section's storage_options; given without a URL: an error."""
        options = self.storage_options
        for name in self.url_fields:
            value = getattr(self, name)
            if isinstance(value, InputSection):
                if options is not None and value.storage_options is None:
                    raw = {**value.model_dump(exclude_unset=True), "storage_options": options}
                    object.__setattr__(self, name, type(value).model_validate(raw))
            else:
                object.__setattr__(self, name, _with_options(value, options))
        if options and not self.holds_urls():
            raise ValueError("'storage_options' apply to URL paths (s3://...), and this section names none")
        return self


def series_files(paths: Any, storage_options: dict[str, Any] | None) -> list[Path | Url]:
    """The files of ``volume.series.paths``: a glob pattern's matches in name order (a URL pattern through
    fsspec), or the list as given."""
    if isinstance(paths, str) and not isinstance(paths, Url):
        if is_url(paths):
            return list(glob(paths, storage_options))

        return [Path(p) for p in sorted(local_glob.glob(paths))]
    return list(paths)
