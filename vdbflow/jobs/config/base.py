"""The base of every section of a job config: unknown keys refused, values frozen once read."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict

_NUMBERS = (int, float)


class StrictModel(BaseModel):
    """A config section: extra keys are errors, fields are read-only, numbers given for text are taken."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


def _numeric(annotation: Any) -> bool:
    """Whether a field of ``annotation`` holds a number (``int``, ``float``, or either or None), not a bool."""
    if annotation in _NUMBERS:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(args) and all(a in _NUMBERS for a in args)
    return False


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The config sections an annotation may hold (through Annotated, unions and None)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models(arg)


def booleans_for_numbers(model: type[BaseModel], raw: Any, path: tuple = ()) -> list[tuple]:
    """The key paths of ``raw`` (a config's mapping before validation) where ``model`` wants a number and
    a boolean is given: pydantic would read ``count: true`` as 1."""
    found: list[tuple] = []
    if not isinstance(raw, dict):
        return found
    for key, value in raw.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            continue
        if isinstance(value, bool) and _numeric(field.annotation):
            found.append((*path, key))
        elif isinstance(value, dict):
            seen = set()
            for sub in _models(field.annotation):
                for bad in booleans_for_numbers(sub, value, (*path, key)):
                    if bad not in seen:
                        seen.add(bad)
                        found.append(bad)
    return found


# -- field types ----------------------------------------------------------------------------------------


def matching(regex: str, example: str) -> AfterValidator:
    """A string check that names what was expected."""

    def check(v: str) -> str:
        if not re.fullmatch(regex, v, flags=re.IGNORECASE):
            raise ValueError(f"expected {example}, got {v!r}")
        return v

    return AfterValidator(check)


Address = Annotated[
    str, matching(r"(tcp|tls|ucx|inproc|ws|wss)://[^\s/]+(:\d+)?/?", "a scheduler address like 'tcp://host:8786'")
]
Walltime = Annotated[
    str, matching(r"(\d+-)?\d{1,3}:\d{2}(:\d{2})?", "a SLURM walltime like '01:30:00' or '2-00:00:00'")
]


def no_nul(value: Any) -> Any:
    """A path or pattern the system can name: no NUL byte (``os`` functions raise ValueError on it)."""
    if "\0" in str(value):
        raise ValueError(f"expected a path without NUL bytes, got {str(value)!r:.80}")
    return value


FilePath = Annotated[Path, AfterValidator(no_nul)]
FilePattern = Annotated[str, AfterValidator(no_nul)]  # a glob pattern
MemorySize = Annotated[str, matching(r"\d+(\.\d+)?\s*([KMGT]i?B|[KMGT])", "a memory size like '64GB' or '512GiB'")]
