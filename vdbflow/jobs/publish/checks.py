"""The plan's checks of an output on an object store (``output.path`` a URL): its filesystem installed,
its bucket there and reachable with the ``storage_options`` given, and nothing at the URL but an earlier
result that ``output.overwrite: always`` may replace."""

from __future__ import annotations

from typing import Any

from vdbflow.io.location import filesystem
from vdbflow.jobs.config.output import BUCKETED as _BUCKETED
from vdbflow.jobs.publish.remote import exists
from vdbflow.jobs.publish.results import not_a_remote_result
from vdbflow.version import install_hint


def _filesystem(url: str, options: dict[str, Any] | None) -> tuple[Any, str] | str:
    try:
        return filesystem(url, options)
    except ImportError as err:
        return f"cannot open {url}: a missing package ({err}); for s3:// install the s3 extra: {install_hint('s3')}"
    except (ValueError, TypeError, OSError) as err:
        return f"cannot open {url} with output.storage_options: {type(err).__name__}: {err}"


def remote_output_problems(cfg: Any, key: str) -> list[str]:
    """Why the result cannot go to ``cfg.output.url``, one line each (none: it can)."""
    out = cfg.output
    url = out.url
    opened = _filesystem(url, out.storage_options)
    if isinstance(opened, str):
        return [f"{key}: {opened}"]
    fs, path = opened
    protocol = url.split("://", 1)[0].lower()
    try:
        if protocol in _BUCKETED and not fs.exists(path.split("/", 1)[0]):
            return [f"{key}: expected the bucket of {url} to exist, found none ({path.split('/', 1)[0]!r})"]
        present = exists(url, out.storage_options)
    except Exception as err:  # noqa: BLE001 - the store's own error types vary (botocore, aiohttp)
        return [f"{key}: cannot reach {url}: {type(err).__name__}: {err} (check output.storage_options)"]
    if not present:
        return []
    if out.overwrite == "never":
        return [
            f"{key}: {url} holds objects and output.overwrite is 'never' (set output.overwrite: always to replace "
            "an earlier result)"
        ]
    problem = not_a_remote_result(fs, path)
    if problem is not None:
        return [
            f"{key}: output.overwrite 'always' replaces only an earlier vdbflow result; {url} holds {problem}. "
            "Nothing was touched: choose another URL, or move it away yourself"
        ]
    return []


def shard_problem(cfg: Any) -> str | None:
    """Why ``output.shard`` does not fit the stored chunk (``output.chunk``, else ``points.chunk``), or None."""
    chunk, key = (cfg.output.chunk, "output.chunk") if cfg.output.chunk else (cfg.points.chunk, "points.chunk")
    problem = cfg.output.shard_problem(chunk)
    return None if problem is None else f"output.shard{cfg.where('output.shard')}: {problem} ({key})"
