"""What the ``vdbflow`` commands print: results to stdout, messages to stderr as plain unwrapped text
(never rich markup: ``pip install -e ".[tables]"`` keeps its brackets), key-value tables and log lines,
every URL in them with its credentials redacted (:mod:`vdbflow.io.redact`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from vdbflow.io.redact import redact_text

if TYPE_CHECKING:
    from rich.console import Console


def stdout() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def stderr() -> Console:
    """Messages to stderr: plain text, not wrapped (a long path stays one line in a log)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False)


def say(kind: str, message: str, style: str = "red") -> None:
    """``kind: message`` on stderr; the message is text, never markup."""
    from rich.text import Text

    stderr().print(Text.assemble((f"{kind}:", style), " ", redact_text(message)))


def rows_table(title: str | None, rows: list[tuple[str, str]], sections: tuple[int, ...] = ()) -> Any:
    """A two-column table (key, value) whose values are text (not markup), wrapped to the terminal."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for n, (key, value) in enumerate(rows):
        if n in sections:
            table.add_section()
        table.add_row(Text(key), Text(redact_text(value)))
    return table


class RedactingFormatter(logging.Formatter):
    """A log formatter whose lines (message and traceback) have every URL's credentials redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))
