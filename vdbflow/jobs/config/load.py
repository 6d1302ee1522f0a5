"""Reading a job config (:func:`load_config`): YAML composed with a bound on its size and on its aliases'
expansion, a line map of its keys, ``--set`` and Python overrides by dotted key path, and validation
errors worded with the key and its line; :func:`dump_config` writes a config back as YAML.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import types
import typing
from collections.abc import Mapping
from decimal import Decimal, DecimalException
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from vdbflow.errors import StorageError
from vdbflow.io.location import filesystem, is_url, local_path, storage_error
from vdbflow.jobs.config.base import booleans_for_numbers
from vdbflow.jobs.config.model import ConfigError, JobConfig

MAX_CONFIG_BYTES = 1 << 20  # a job config is a few hundred bytes; anything this large is not one
MAX_CONFIG_NODES = 10_000  # scalars, lists and mappings once aliases are expanded


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that also reads ``1e6`` and ``2.5e3`` as numbers (YAML 1.2 and Python do; YAML 1.1
    wants ``1.0e+6``): counts written as ``1e9``, as the docs write them, are exact integers; a number too
    large for a float stays the text it was, which the key's check then names."""


_EXPONENT = "tag:vdbflow:exponent-number"
_MAX_EXACT = Decimal(2) ** 63


def _exponent_number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | float | str:
    text = loader.construct_scalar(node)
    try:
        number = Decimal(text.replace("_", ""))
        if number == number.to_integral_value() and abs(number) < _MAX_EXACT:
            return int(number)
    except (DecimalException, ValueError, OverflowError):  # an exponent beyond Decimal's (1e9999999)
        return text  # the key's check names it
    value = float(number)
    return text if math.isinf(value) else value


_EXPONENT_FORM = re.compile(r"^[-+]?[0-9][0-9_]*(\.[0-9_]*)?[eE][-+]?[0-9]+$")
_Loader.add_implicit_resolver(_EXPONENT, _EXPONENT_FORM, list("-+0123456789"))
_Loader.add_constructor(_EXPONENT, _exponent_number)


def _load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _expanded_nodes(root: yaml.Node, source: str) -> int:
    """Nodes of ``root`` with every alias expanded, counted without expanding (each node once).

    Raises :class:`ConfigError` for a recursive alias or more than ``MAX_CONFIG_NODES`` nodes: an
    alias bomb (nested aliases, a few hundred bytes that expand to billions of nodes) fails here.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError(
                f"{source}: expected a tree of keys, found a recursive alias at line "
                f"{node.start_mark.line + 1} (an anchor used inside itself)"
            )
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        active.add(key)
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_CONFIG_NODES:
                raise ConfigError(
                    f"{source}: expected at most {MAX_CONFIG_NODES:,} keys and values with aliases "
                    f"expanded, found more under line {node.start_mark.line + 1} (nested aliases "
                    "multiply: a YAML alias bomb?)"
                )
        active.discard(key)
        sizes[key] = total
        return total

    return size(root)


def _compose(text: str, source: str) -> yaml.Node | None:
    """The YAML node graph of ``text``, refused when too large or when its aliases expand too far."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: expected a config of at most {MAX_CONFIG_BYTES:,} bytes, got {len(text):,}")
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{source} is not valid YAML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{source}: expected a config, found YAML nested too deeply to read") from None
    if node is not None:
        _expanded_nodes(node, source)
    return node


def _line_map(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    """Key path -> 1-based line of every mapping key and sequence item under ``node``."""
    out = {} if out is None else out
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            p = path + (key.value,)
            out[p] = key.start_mark.line + 1
            _line_map(value, p, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[path + (i,)] = item.start_mark.line + 1
            _line_map(item, path + (i,), out)
    return out


def _put(raw: dict, dotted: str, value: Any, label: str) -> None:
    """Set the key path ``dotted`` (``points.count``) of ``raw`` to ``value``, making mappings on the way."""
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError(f"expected {label} key.path=value with non-empty keys, got {dotted!r}")
    node = raw
    for k in keys[:-1]:
        child = node.get(k)
        if child is None:
            child = node[k] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"{label} {dotted}: {k!r} holds {type(child).__name__}, not a mapping")
        node = child
    node[keys[-1]] = value


def _set(raw: dict, dotted: str, text: str) -> None:
    """Apply one ``--set key.path=value`` (the value parsed as YAML) to ``raw``."""
    if not all(dotted.split(".")):
        raise ConfigError(f"expected --set key.path=value with non-empty keys, got {dotted!r}")
    _compose(text, f"--set {dotted}")
    try:
        value = _load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"--set {dotted}: the value {text!r} is not valid YAML ({err})") from None
    _put(raw, dotted, value, "--set")


def _plain(value: Any, where: str) -> Any:
    """A Python value as the YAML loader would give it: paths as strings, tuples as lists."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, where) for v in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a NumPy scalar
        return value.item()
    raise ConfigError(
        f"{where}: expected a config value (str, number, bool, path, list or mapping), got {type(value).__name__}"
    )


def _describe(loc: tuple, lines: dict[tuple, int], overridden: dict[tuple, str], source: str) -> str:
    """``key.path (file, line N)`` for a pydantic error location."""
    # pydantic puts the union tag into the location ('points', 'random', 'count'): the YAML has none
    path = [part for i, part in enumerate(loc) if not (i == 1 and part in _UNION_TAGS.get(loc[0], ()))]
    key = ".".join(str(p) for p in path) or "(top level)"
    for n in range(len(path), 0, -1):  # an override replaces what the file had under its key
        if tuple(path[:n]) in overridden:
            return f"{key} (from {overridden[tuple(path[:n])]})"
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in lines:
            return f"{key} ({source}, line {lines[tuple(path[:n])]})"
    return key


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The config models an annotation may hold (through Optional, unions, Annotated and lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def _keys_at(path: tuple) -> list[str]:
    """The keys a config allows in the section at ``path`` (every form of a ``kind`` union together)."""
    models: list[type[BaseModel]] = [JobConfig]
    for part in path:
        if isinstance(part, int):
            continue
        models = [
            m for model in models if part in model.model_fields for m in _models_in(model.model_fields[part].annotation)
        ]
    return sorted({name for model in models for name in model.model_fields})


def _forms(section: str) -> dict[str, list[str]]:
    """The keys of each form of a ``kind`` union section (``points``: random, plane, ...), by kind."""
    forms = _models_in(JobConfig.model_fields[section].annotation)
    return {typing.get_args(m.model_fields["kind"].annotation)[0]: sorted(m.model_fields) for m in forms}


# the sections that take one of several forms by `kind`, and their kinds (pydantic puts the kind in error locations)
_UNION_TAGS = {section: tuple(_forms(section)) for section in ("points", "cluster")}


def _unknown_key(loc: tuple) -> str:
    """``unknown key`` with the nearest allowed key, or the allowed keys; a key of another ``kind`` of the
    section says which kinds take it."""
    tagged = len(loc) == 3 and loc[1] in _UNION_TAGS.get(loc[0], ())
    path = [part for i, part in enumerate(loc) if not (i == 1 and part in _UNION_TAGS.get(loc[0], ()))]
    allowed = _keys_at(tuple(path[:-1]))
    if tagged:  # a key directly in `points:` or `cluster:`, whose kind is loc[1]
        forms = _forms(loc[0])
        allowed = forms[loc[1]]
        others = [kind for kind, keys in forms.items() if loc[2] in keys]
        if others:
            return (
                f"{loc[2]!r} is a key of {loc[0]}.kind: {' | '.join(others)}, not of kind: {loc[1]} (which takes "
                + ", ".join(repr(k) for k in allowed if k != "kind")
                + ")"
            )
    if not allowed:
        return "unknown key"
    close = difflib.get_close_matches(str(path[-1]), allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    if tagged:  # a misspelt key of another kind
        keys = sorted({key for form in forms.values() for key in form})
        close = difflib.get_close_matches(str(loc[2]), keys, n=1, cutoff=0.6)
        if close:
            kinds = " | ".join(kind for kind, form in forms.items() if close[0] in form)
            return f"unknown key; did you mean {close[0]!r} (a key of {loc[0]}.kind: {kinds})?"
    return "unknown key; expected one of " + ", ".join(repr(k) for k in allowed)


def _message(err: dict) -> str:
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return _unknown_key(tuple(err["loc"]))
    if kind == "literal_error" and isinstance(err.get("input"), str):
        expected = [part.strip(" '") for part in re.split(r",| or ", msg.removeprefix("Input should be "))]
        close = difflib.get_close_matches(err["input"], [e for e in expected if e], n=1, cutoff=0.6)
        if close:
            return f"{msg}, got {err['input']!r}; did you mean {close[0]!r}?"
    if kind == "missing":
        return "missing required key"
    if kind == "union_tag_invalid":
        return msg.replace("Input tag", "kind").replace(
            "found using 'kind' does not match any of the expected tags:", "is not one of"
        )
    if kind == "union_tag_not_found":
        return "missing 'kind' (it selects which form this section takes)"
    if kind == "value_error":
        return msg.removeprefix("Value error, ")
    return f"{msg}, got {err.get('input')!r}" if "input" in err and not isinstance(err["input"], dict) else msg


_KEYED = re.compile(r"(?P<key>[a-z_]+(?:\.[a-z_]+)+): (?P<rest>.*)", re.DOTALL)


def _problem(err: dict, lines: dict[tuple, int], overridden: dict[tuple, str], source: str) -> str:
    """One line of a validation error; a check of the whole config names its key in front of its
    message (``points.chunk: expected ...``), and that key is where it is reported."""
    loc, message = tuple(err["loc"]), _message(err)
    keyed = _KEYED.fullmatch(message) if not loc else None
    if keyed is not None:
        loc, message = tuple(keyed["key"].split(".")), keyed["rest"]
    return f"  {_describe(loc, lines, overridden, source)}: {message}"


def _read_url(url: str) -> str:
    """The first ``MAX_CONFIG_BYTES + 1`` bytes of the object at ``url`` (fsspec: credentials and endpoint
    from the environment, e.g. AWS_ENDPOINT_URL), as text."""

    try:
        fs, key = filesystem(url)
        if fs.isdir(key):
            raise IsADirectoryError(f"{url} is a prefix (a directory), not an object")
        with fs.open(key, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)  # enough to refuse an oversized object without reading it all
    except FileNotFoundError:
        raise ConfigError(f"expected a config file, found nothing at {url}") from None
    except IsADirectoryError as err:
        raise ConfigError(f"cannot read the config file {url}: {err}") from None
    except StorageError as err:
        raise ConfigError(f"cannot read the config file {url}: {err}") from None
    except Exception as err:  # noqa: BLE001 - the store's own error types vary (botocore, aiohttp)
        raise ConfigError(f"cannot read the config file {url}: {storage_error(url, err)}") from None
    if len(data) > MAX_CONFIG_BYTES:  # refused by _compose as a local file is
        return data.decode("utf-8", errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"cannot read the config file {url}: {err}") from None


def _read_config(path: str | Path, source: str) -> str:
    """The text of the config file ``path``: a local file, or an object at a URL (``s3://``, ``gs://``, ...)."""
    if is_url(path):
        return _read_url(str(path))
    try:
        with open(local_path(path), encoding="utf-8") as f:
            return f.read(MAX_CONFIG_BYTES + 1)  # enough to refuse an oversized file without reading it all
    except FileNotFoundError:
        raise ConfigError(f"expected a config file, found nothing at {source}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise ConfigError(f"cannot read the config file {source}: {err}") from None


def as_config(config: Any, values: Mapping[str, Any] | None = None) -> JobConfig:
    """A :class:`JobConfig` from a config path, a mapping of sections or a JobConfig, with ``values`` set
    (``{"points.count": 1000}``, by dotted key path)."""
    if isinstance(config, JobConfig):
        # its fields as they are (a JSON dump would redact the credentials of its URLs and storage_options)
        return load_config(data=config.model_dump(exclude_unset=True), values=values) if values else config
    if isinstance(config, Mapping):
        return load_config(data=config, values=values)
    if isinstance(config, (str, os.PathLike)):
        return load_config(config, values=values)
    raise ConfigError(f"expected a config path, mapping or JobConfig, got {type(config).__name__}")


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    text: str | None = None,
    values: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
) -> JobConfig:
    """Read and validate a job config from a YAML file (or YAML ``text``, or a mapping ``data``), with
    ``--set`` style ``overrides`` (``"points.count=1000"``, the value read as YAML) and then ``values``
    (``{"points.count": 1000}``, Python values by dotted key path).

    Raises :class:`ConfigError` naming every bad key, with its line in the file.
    """
    source = "<text>" if path is None else str(path)
    if data is not None:
        if path is not None or text is not None:
            raise ConfigError("expected one of a config path, YAML text or a mapping, got more than one")
        if not isinstance(data, Mapping):
            raise ConfigError(f"expected a mapping of sections (volume, points, ...), got {type(data).__name__}")
        source, raw, node = "<mapping>", _plain(dict(data), "config"), None
    else:
        if text is None:
            text = _read_config(path, source)
        node = _compose(text, source)  # first: refuses alias bombs before anything expands them
        try:
            raw = _load(text)
        except yaml.YAMLError as err:
            raise ConfigError(f"{source} is not valid YAML: {err}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"expected a mapping of sections (volume, points, ...) in {source}, got {type(raw).__name__}")
    lines = _line_map(node) if node is not None else {}
    overridden: dict[tuple, str] = {}
    given = set(raw)
    for item in overrides:
        dotted, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"expected --set key.path=value, got {item!r}")
        _set(raw, dotted.strip(), value)
        overridden[tuple(dotted.strip().split("."))] = "--set"
    for dotted, value in (values or {}).items():
        _put(raw, dotted, _plain(value, dotted), "override")
        overridden[tuple(dotted.split("."))] = "an override"
    for section in _UNION_TAGS:  # `--set cluster.memory_limit=1GB` alone: the section's default form
        default = JobConfig.model_fields[section].default
        made = raw.get(section)
        if section not in given and isinstance(made, dict) and "kind" not in made and isinstance(default, BaseModel):
            raw[section] = {"kind": getattr(default, "kind"), **made}  # noqa: B009 - every union form has one
    booleans = booleans_for_numbers(JobConfig, raw)
    if booleans:  # pydantic reads `count: true` as 1
        problems = [f"  {_describe(k, lines, overridden, source)}: expected a number, got a boolean" for k in booleans]
        raise ConfigError(f"{len(problems)} problem(s) in the job config {source}:\n" + "\n".join(problems))
    try:
        cfg = JobConfig.model_validate(raw)
    except ValidationError as err:
        problems = [_problem(e, lines, overridden, source) for e in err.errors()]
        raise ConfigError(f"{len(problems)} problem(s) in the job config {source}:\n" + "\n".join(problems)) from None
    cfg.record_where({k: f" ({source}, line {n})" for k, n in lines.items()})
    cfg.record_where({k: f" (from {how})" for k, how in overridden.items()})
    return cfg


def dump_config(cfg: JobConfig) -> str:
    """The resolved config as YAML (stored with every result)."""
    return yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True), sort_keys=False)
