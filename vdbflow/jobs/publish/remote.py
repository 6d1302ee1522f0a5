"""Results on object stores (``s3://``, ``gs://``, ``memory://``...), which have no rename: the result is
written whole under a hidden prefix beside the final one, ``.NAME.partial-TAG/``, then published by
copying it, root metadata last.

Publishing, with the complete result under its partial prefix:

1. a record ``.NAME.publishing-TAG`` (one object naming the partial prefix it publishes; the partial's
   ``TAG``, which names its writer) is written;
2. the root metadata of an earlier result at the final prefix (``.zmetadata``, ``.zgroup``, ``.zattrs``,
   ``zarr.json``) is deleted first: from then on a reader finds no store there, never a mixture;
3. every other object of the new result is copied (server-side) to the final prefix, and the objects of
   the earlier result that the new one does not have are deleted;
4. the root metadata is copied last (``.zattrs``, ``.zgroup``, then ``.zmetadata``; format 3: the one
   ``zarr.json``), and the record and the partial prefix are deleted.

A run that finds another run's publishing record beside ``final`` after writing its own (step 1) copies
nothing: of two runs publishing to one URL at once, each sees the other's record or the later one sees
the earlier's (listings are strongly consistent on S3, GCS and Azure), so at most one copies; the other
keeps its complete result at an unpublished prefix and says so.  A leftover record is finished by the
next run or ``vdbflow clean`` only if it names this output as its final and its own partial sibling
(``.NAME.partial-`` with the record's tag) as its source; any other record is left, and said.

``xr.open_zarr(final)`` therefore opens the earlier result (until step 2), fails with "no Zarr store"
(steps 2-4: the window of the copies), or opens the new, complete result.  A job killed during steps 2-4
leaves its record: the next run at that output, or ``vdbflow clean``, finishes the copy from the
partial prefix (which is complete) and says so.
"""

from __future__ import annotations

import logging
from typing import Any

from vdbflow.core.atomic import sibling_stem, writer_tag
from vdbflow.errors import OutputError
from vdbflow.io.location import filesystem, parent_and_name, read_json, write_json
from vdbflow.jobs.publish.results import not_a_remote_result

log = logging.getLogger("vdbflow.run")

ROOT_METADATA = (".zattrs", ".zgroup", ".zmetadata", "zarr.json")  # in the order they are written
MANIFEST = ".vdbflow-manifest"


def _objects(fs: Any, root: str) -> list[str]:
    """The keys under ``root`` relative to it (the manifest left out)."""
    fs.invalidate_cache()
    try:
        found = fs.find(root)
    except (OSError, ValueError):
        return []
    keys = [p[len(root) :].lstrip("/") for p in found if p.startswith(root)]
    return sorted(k for k in keys if k and not k.startswith(MANIFEST + "/"))


def roll_forward(fs: Any, source: str, final: str) -> None:
    """Steps 2-4 of publishing: the complete store at ``source`` copied to ``final``, root metadata last,
    whatever was at ``final`` gone (its root metadata first)."""
    old = _objects(fs, final)
    for name in ROOT_METADATA:
        if name in old:
            fs.rm_file(f"{final}/{name}")
    new = _objects(fs, source)
    body = [k for k in new if k not in ROOT_METADATA]
    if body:
        fs.copy([f"{source}/{k}" for k in body], [f"{final}/{k}" for k in body])
    stale = sorted(set(old) - set(new) - set(ROOT_METADATA))
    if stale:
        fs.rm([f"{final}/{k}" for k in stale])
    for name in ROOT_METADATA:
        if name in new:
            fs.copy(f"{source}/{name}", f"{final}/{name}")
    fs.invalidate_cache()


def exists(final: str, options: dict[str, Any] | None = None) -> bool:
    """Whether any object is under the prefix ``final``."""
    fs, path = filesystem(final, options)
    return bool(_objects(fs, path))


def sibling(final: str, kind: str) -> str:
    """A fresh hidden sibling URL of ``final``: ``.NAME.KIND-TAG``."""
    parent, name = parent_and_name(final)
    return f"{parent}/.{sibling_stem(name)}.{kind}-{writer_tag()}"


def keep(fs: Any, source: str, final: str) -> str:
    """The complete result at ``source`` copied to a visible ``NAME.unpublished-XXXXXXXX`` beside ``final``
    (which no cleanup removes) and its partial prefix removed; returns where it is now."""
    kept = f"{final}.unpublished-{writer_tag()[:8]}"
    keys = _objects(fs, source)
    fs.copy([f"{source}/{k}" for k in keys], [f"{kept}/{k}" for k in keys])
    fs.rm(source, recursive=True)
    return kept


def publish(
    target: str, final: str, overwrite: str, options: dict[str, Any] | None = None, listing: Any = None
) -> None:
    """Publish the complete store at the URL ``target`` (its partial prefix) at the URL ``final``, replacing
    an earlier vdbflow result there if ``overwrite`` is ``always`` (never anything else): steps 1-4 above.
    Anything at ``final`` that may not be replaced leaves the complete result at an unpublished prefix,
    named in the :class:`~vdbflow.errors.OutputError`."""
    fs, source = filesystem(target, options)
    _, dest = filesystem(final, options)
    fs.invalidate_cache()
    if _objects(fs, dest):
        if overwrite != "always":
            raise OutputError(
                f"{final} appeared while the job ran and output.overwrite is 'never'; the complete result is "
                f"kept at {_kept_url(fs, source, dest, final)} (vdbflow clean leaves it)"
            )
        problem = not_a_remote_result(fs, dest)
        if problem is not None:
            raise OutputError(
                f"expected an earlier vdbflow result at {final} to replace, found {problem}; it is left as it "
                f"is, and the complete new result is kept at {_kept_url(fs, source, dest, final)} (vdbflow clean "
                "leaves it)"
            )
    head, _, name = target.rstrip("/").rpartition("/")
    record = f"{head}/{name.replace('.partial-', '.publishing-', 1)}"  # the partial's tag: its writer
    _, record_path = filesystem(record, options)
    write_json(fs, record_path, {"source": source, "final": dest})
    other = _other_publisher(final, record_path, options, listing)
    if other is not None:  # two jobs publishing to one URL: neither copies over the other's objects
        fs.rm_file(record_path)
        raise OutputError(
            f"another run is publishing to {final} ({other}); this run's complete result is kept at "
            f"{_kept_url(fs, source, dest, final)} (vdbflow clean leaves it). Run one job a URL at a time; a "
            "record of a run that no longer exists goes with vdbflow clean (--force where it ran on another host)"
        )
    roll_forward(fs, source, dest)
    fs.rm_file(record_path)
    fs.rm(source, recursive=True)


def _other_publisher(final: str, own_record: str, options: dict[str, Any] | None, listing: Any) -> str | None:
    """Another run's publishing record beside ``final`` (listed after this run wrote its own: of two runs
    publishing at once, each sees the other's record, or the later one sees the earlier's), said as its
    name and writer; None where there is none.  ``listing``: :func:`vdbflow.jobs.publish.output.leftovers_at`
    (given by its caller, which imports this module)."""
    own = own_record.rstrip("/").rsplit("/", 1)[-1]
    for item in listing(final, options) if listing is not None else ():
        name = str(item.path).rstrip("/").rsplit("/", 1)[-1]
        if item.kind == "publishing" and name != own:
            return f"its record {name}, written by {item.writer}"
    return None


def _kept_url(fs: Any, source: str, dest: str, final: str) -> str:
    kept = keep(fs, source, dest)
    return final[: len(final) - len(dest)] + kept if final.endswith(dest) else kept


def expected_source(record_path: str) -> str:
    """The partial prefix a publishing record ``.NAME.publishing-TAG`` may publish: its own sibling
    ``.NAME.partial-TAG`` (the same writer's tag), in the same folder."""
    head, _, name = record_path.rstrip("/").rpartition("/")
    return f"{head}/{name.replace('.publishing-', '.partial-', 1)}"


def finish_publishing(fs: Any, record_path: str, final_path: str, dry_run: bool) -> tuple[str | None, str | None]:
    """Finish what a killed run's publishing record says (steps 2-4 again, from its complete partial
    prefix); returns ``(the final prefix it published, None)``, ``(None, None)`` where the record names no
    source any more (it is removed), or ``(None, why)`` where the record is not one this output's run
    wrote - its final is not ``final_path`` or its source not its own partial sibling - and is left alone:
    a record planted (or damaged) to name another prefix never makes vdbflow copy over or delete it."""
    record = read_json(fs, record_path)
    source = expected_source(record_path)
    if not isinstance(record, dict):
        return None, "it is not a JSON object naming a source and a final prefix"
    named = (record.get("source"), record.get("final"))
    if named != (source, final_path.rstrip("/")):
        return None, (
            f"it names source {named[0]!r} and final {named[1]!r}, expected its own partial prefix {source!r} "
            f"and this output {final_path.rstrip('/')!r}"
        )
    if not fs.exists(source):
        if not dry_run:
            fs.rm_file(record_path)
        return None, None
    if not dry_run:
        roll_forward(fs, source, final_path.rstrip("/"))
        fs.rm_file(record_path)
        fs.rm(source, recursive=True)
    return final_path.rstrip("/"), None
