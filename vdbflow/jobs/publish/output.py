"""Result stores for batch jobs: a Dataset written by the workers to a hidden partial path, and moved
to its final path only once complete, so an interrupted job never leaves a result that looks finished.

Every hidden file a job leaves next to its output - ``.NAME.partial-TAG`` (a result being written),
``.NAME.replaced-TAG`` (the earlier result during the swap), ``.NAME.input-TAG`` (a private snapshot of
an input), ``.NAME.tmp-TAG`` (the private directory of a file being saved, :mod:`vdbflow.core.atomic`) -
names its writer in ``TAG`` (``XXXXXXXX-PID@HOST``), so :func:`tidy` can tell a running job's files
from those of a killed one, remove the latter and restore an earlier result that a kill during the
swap left aside.

A complete result that could not be published (its output path appeared while the job ran) is moved
to ``NAME.unpublished-XXXXXXXX``: a visible name that no cleanup ever touches.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vdbflow.core.atomic import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    hidden_sibling,
    put_back_aside,
    put_back_exchanged,
    remove_tree,
    renameat2,
    sibling_stem,
    writer_tag,
)
from vdbflow.errors import OutputError
from vdbflow.io.location import Target, filesystem, is_url
from vdbflow.jobs.publish.remote import finish_publishing, sibling
from vdbflow.jobs.publish.remote import publish as publish_remote
from vdbflow.jobs.publish.results import not_a_result

log = logging.getLogger("vdbflow.run")


_KINDS = ("partial", "replaced", "input", "tmp", "publishing")  # publishing: object stores (jobs.publish.remote)
# the host is matched lazily so that the ".tmp-PID" suffix of an older vdbflow's save() inside a
# partial path (".NAME.partial-TAG.tmp-PID") is not read as part of the host name
_LEFTOVER = re.compile(
    r"\.(?P<name>.+)\.(?P<kind>partial|replaced|input|tmp|publishing)-(?P<token>[0-9a-f]{8})"
    r"(?:-(?P<pid>\d+)@(?P<host>.+?))?(?:\.tmp-(?P<saver>\d+))?"
)


KEPT_PARTIALS: set[str] = set()  # names of the partial results failed jobs of this process kept (writers gone)


def partial_path(final: Target) -> Target:
    """A fresh hidden sibling of ``final`` (a path or a URL) for one attempt: ``.NAME.partial-XXXXXXXX-PID@HOST``."""
    if is_url(final):
        return sibling(str(final), "partial")
    return hidden_sibling(Path(final), "partial")


def snapshot_path(final: Path) -> Path:
    """A fresh hidden sibling of ``final`` for a private copy of an input: ``.NAME.input-TAG``."""
    return hidden_sibling(final, "input")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


@dataclass(frozen=True)
class Leftover:
    """A hidden file of a job next to ``final``: what it is and who wrote it (paths, or URLs of an object
    store)."""

    path: Any
    final: Any
    kind: str  # partial | replaced | input | tmp | publishing
    pid: int | None
    host: str | None

    @property
    def writer_gone(self) -> bool | None:
        """True when its writer ran on this host and has exited; False while it runs; None: unknown
        (another host, or a file named before writers were recorded).  A partial result of this process
        is gone once a failed job of this process kept it (a failed ``vdbflow.run`` in a notebook)."""
        if self.pid is None or self.pid <= 0 or self.host != socket.gethostname():
            return None
        if self.kind in ("partial", "publishing", "tmp") and self.pid == os.getpid():
            # a publishing record, a NetCDF job's store of chunks (.NAME.tmp-TAG): its partial's tag
            name = str(self.path).rstrip("/").rsplit("/", 1)[-1]
            name = name.replace(".publishing-", ".partial-", 1).replace(".tmp-", ".partial-", 1)
            if name in KEPT_PARTIALS:
                return True
        return not _pid_alive(self.pid)

    @property
    def writer(self) -> str:
        return "an unrecorded writer" if self.pid is None else f"pid {self.pid} on {self.host}"


def _leftover(path: Path) -> Leftover | None:
    m = _LEFTOVER.fullmatch(path.name)
    if m is None:
        return None
    pid = m.group("pid")
    return Leftover(
        path, path.parent / m.group("name"), m.group("kind"), None if pid is None else int(pid), m.group("host")
    )


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def leftovers(final: Path | None = None, directory: Path | None = None) -> list[Leftover]:
    """The hidden files jobs left next to ``final`` (or next to any output in ``directory``), oldest first."""
    where = directory if final is None else final.parent
    pattern = "*" if final is None else f".{_glob_escape(sibling_stem(final.name))}.*-*"
    found = []
    try:
        candidates = list(where.glob(pattern))
    except OSError:
        return []
    for path in candidates:
        item = _leftover(path)
        if item is None:
            continue
        if final is not None:  # a long name stands shortened in its siblings' names (sibling_stem)
            if item.final != final.parent / sibling_stem(final.name):
                continue
            item = dataclasses.replace(item, final=final)
        found.append(item)
    return sorted(found, key=lambda item: _mtime(item.path))


def leftovers_at(final: Target, options: dict[str, Any] | None = None) -> list[Leftover]:
    """:func:`leftovers` of a local path, or of a URL (the prefixes beside it, in name order)."""
    if not is_url(final):
        return leftovers(Path(final))
    fs, path = filesystem(final, options)
    parent, name = path.rstrip("/").rpartition("/")[::2]
    stem = sibling_stem(name)
    fs.invalidate_cache()
    try:
        entries = fs.ls(parent, detail=False)
    except (OSError, ValueError):
        return []
    found = []
    for entry in sorted(entries):
        item = _leftover(Path(entry.rstrip("/").rsplit("/", 1)[-1]))
        if item is not None and item.final.name == stem:
            found.append(dataclasses.replace(item, path=fs.unstrip_protocol(entry.rstrip("/")), final=str(final)))
    return found


def _glob_escape(name: str) -> str:
    """``name`` with glob's special characters made literal."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def stale_partials(final: Path) -> list[Path]:
    """Partial results of earlier attempts at ``final``, oldest first."""
    return [item.path for item in leftovers(final) if item.kind == "partial"]


def tidy(
    final: Any = None,
    directory: Path | None = None,
    force: bool = False,
    dry_run: bool = False,
    keep: set | None = None,
    options: dict[str, Any] | None = None,
) -> list[str]:
    """Deal with the leftovers of killed jobs at ``final`` (or at every output in ``directory``).

    A partial store or input snapshot whose writer has exited is removed; an earlier result set aside
    by a swap that was killed half-way is put back at its path if nothing is there (else removed).
    Leftovers of a running writer are kept; those of an unknown writer (another host, or no record)
    only go with ``force``; those in ``keep`` (a resumed partial result, its staging store) stay.
    ``final`` may be a URL (``options``: its storage options): a publishing record of a killed run is
    then finished first (:mod:`~vdbflow.jobs.publish.remote`).  Returns one line per leftover saying what
    was (or, ``dry_run``, would be) done.
    """
    if final is not None and is_url(final):
        return _tidy_remote(str(final), options, force, dry_run, keep)
    report = []
    restored: set[Path] = set()
    for item in reversed(leftovers(final, directory)):
        if keep is not None and item.path in keep:
            report.append(f"kept {item.path}: the partial result this run resumes")
            continue  # newest first: the newest set-aside result is restored
        gone = item.writer_gone
        what = {
            "partial": "the partial result",
            "replaced": "the earlier result set aside",
            "input": "the input snapshot",
            "tmp": "the private directory of an unfinished save",
            "publishing": "the record of an unfinished publication",
        }[item.kind]
        if gone is False:
            report.append(f"kept {item.path}: {what} of a running job ({item.writer})")
            continue
        if gone is None and not force:
            report.append(
                f"kept {item.path}: {what} of {item.writer}, which cannot be checked from here "
                "(vdbflow clean --force removes it)"
            )
            continue
        verb = "would " if dry_run else ""
        if (
            item.kind == "replaced"
            and item.final not in restored
            and not (item.final.exists() or item.final.is_symlink())
        ):
            if not dry_run:
                os.replace(item.path, item.final)
            restored.add(item.final)
            report.append(
                f"{verb}{'restore' if dry_run else 'restored'} {item.final} from {item.path}: a run "
                f"({item.writer}) was killed while replacing it, after it set the earlier result aside"
            )
            continue
        if not dry_run:
            remove_tree(item.path)
        why = "of an interrupted run" if item.kind != "replaced" else "of a run killed after publishing"
        report.append(
            f"{verb}{'remove' if dry_run else 'removed'} {item.path}: {what} {why} ({item.writer}, "
            f"{'exited' if gone else 'not checked'})"
        )
    return report


def publish(target: Target, final: Target, overwrite: str, options: dict[str, Any] | None = None) -> None:
    """Move a complete store from its partial path to ``final``, replacing an earlier vdbflow result
    there if ``overwrite`` is ``always`` (never anything else).  The final path holds either the old
    result or the new one, never a mixture: the two are exchanged in one step where Linux allows
    (``renameat2``); elsewhere the old one is first set aside as ``.NAME.replaced-TAG``, which
    :func:`tidy` puts back should the job be killed between the two renames.  Whatever stops the
    move (something appeared at ``final``, a rename that fails), the complete result is kept at an
    unpublished path, named in the :class:`OutputError`.  On an object store (URLs) the result is copied,
    root metadata last (:func:`vdbflow.jobs.publish.remote.publish`)."""
    if is_url(final):
        publish_remote(str(target), str(final), overwrite, options, listing=leftovers_at)
        return
    target, final = Path(target), Path(final)
    try:
        _move_into_place(target, final, overwrite)
    except OutputError:
        raise
    except OSError as err:
        raise OutputError(
            f"could not move the complete result to {final} ({err}); it is kept at {keep(target, final)} "
            "(vdbflow clean leaves it)"
        ) from None


def _move_into_place(target: Path, final: Path, overwrite: str) -> None:
    if final.exists() or final.is_symlink():
        if overwrite != "always":
            raise OutputError(
                f"{final} appeared while the job ran and output.overwrite is 'never'; the complete result "
                f"is kept at {keep(target, final)} (vdbflow clean leaves it)"
            )
        problem = not_a_result(final)
        if problem is not None:
            raise OutputError(
                f"expected an earlier vdbflow result at {final} to replace, found {problem}; it is "
                f"left as it is, and the complete new result is kept at {keep(target, final)} (vdbflow "
                "clean leaves it)"
            )
        if renameat2(target, final, RENAME_EXCHANGE):  # `target` now holds what was at `final`
            _checked_out(target, target, final, lambda: put_back_exchanged(target, final))
            remove_tree(target)
            return
        retired = hidden_sibling(final, "replaced")
        os.replace(final, retired)
        _checked_out(retired, target, final, lambda: put_back_aside(retired, final))
        os.replace(target, final)
        remove_tree(retired)
    else:
        try:
            done = renameat2(target, final, RENAME_NOREPLACE)
        except FileExistsError:
            raise OutputError(
                f"{final} appeared while the job was publishing; the complete result is kept at "
                f"{keep(target, final)} (vdbflow clean leaves it)"
            ) from None
        if not done:
            os.replace(target, final)


def _checked_out(out: Path, target: Path, final: Path, put_back: Callable[[], str]) -> None:
    """What came out of ``final`` (now at ``out``) checked again before it is deleted: the earlier result
    checked before the exchange, or another result.  Anything else appeared at ``final`` between that
    check and the exchange: it is put back (or kept at a visible name) and the complete new result is
    kept at an unpublished path, both said in the :class:`OutputError`."""
    problem = not_a_result(out)
    if problem is None:
        return
    where = put_back()
    new = f"kept at {keep(target, final)}" if os.path.lexists(target) else f"at {final}"  # not put back: published
    raise OutputError(
        f"expected the earlier vdbflow result checked at {final} to replace, found {problem} there when "
        f"publishing (it appeared after the check); {where}, and the complete new result is {new} (vdbflow "
        "clean leaves it)"
    )


def unpublished_path(final: Path) -> Path:
    """A fresh visible sibling of ``final`` for a complete result that could not be published:
    ``NAME.unpublished-XXXXXXXX`` (no leftover pattern matches it, so no cleanup removes it)."""
    return final.parent / f"{final.name}.unpublished-{writer_tag()[:8]}"


def keep(target: Path, final: Path) -> Path:
    """Move the complete result at ``target`` (a partial path) to :func:`unpublished_path` and return
    where it is now (``target`` itself if it cannot be moved)."""
    kept = unpublished_path(final)
    try:
        if not renameat2(target, kept, RENAME_NOREPLACE):
            os.rename(target, kept)
    except OSError as err:  # it stays at its partial path, which a later cleanup may remove: say so
        log.warning(
            "could not move the complete result %s to %s (%s): move it yourself before the next run or "
            "vdbflow clean, which take it for the partial of an interrupted run",
            target,
            kept,
            err,
        )
        return target
    return kept


def discard(target: Path) -> None:
    """Remove the partial store of a failed attempt."""
    remove_tree(target)


def _tidy_remote(final: str, options: dict[str, Any] | None, force: bool, dry_run: bool, keep: set | None) -> list[str]:
    """:func:`tidy` at a URL: publishing records of killed runs finished first, then their partial prefixes
    removed as local leftovers are."""
    report: list[str] = []
    verb = "would " if dry_run else ""
    items = leftovers_at(final, options)
    fs, final_path = filesystem(final, options)
    finished = set()
    for item in items:
        if item.kind != "publishing" or (item.writer_gone is not True and not force):
            continue
        done, refused = finish_publishing(fs, filesystem(item.path, options)[1], final_path, dry_run)
        if refused is not None:
            report.append(
                f"left {item.path}: a publishing record ({item.writer}) that this output's runs did not write - "
                f"{refused}; nothing was copied or deleted (check it and remove it yourself)"
            )
        elif done is not None:
            finished.add(item.path)
            report.append(
                f"{verb}{'finish' if dry_run else 'finished'} publishing {final} from its complete partial result: "
                f"a run ({item.writer}) was killed while publishing it"
            )
    for item in items:
        if item.kind == "publishing":
            continue
        if keep is not None and item.path in keep:
            report.append(f"kept {item.path}: the partial result this run resumes")
            continue
        gone = item.writer_gone
        if gone is False or (gone is None and not force):
            why = "of a running job" if gone is False else "whose writer cannot be checked from here"
            report.append(f"kept {item.path}: the partial result {why} ({item.writer})")
            continue
        if not fs.exists(filesystem(item.path, options)[1]):
            continue  # published from just now
        if not dry_run:
            fs.rm(filesystem(item.path, options)[1], recursive=True)
        report.append(
            f"{verb}{'remove' if dry_run else 'removed'} {item.path}: the partial result of an interrupted run "
            f"({item.writer}, {'exited' if gone else 'not checked'})"
        )
    return report
