"""Secrets out of what vdbflow writes or prints: credentials in ``storage_options`` (keys, tokens,
passwords, connection strings) and in URLs (``user:password@``, presigned ``X-Amz-Signature`` /
``X-Amz-Credential`` / ``X-Amz-Security-Token``, Google's ``X-Goog-*``, Azure SAS ``sig``), each replaced by
``<redacted>``.  Used by the stored config (``vdbflow_config``), the CLI's messages and tables, its log and
:class:`~vdbflow.errors.StorageError`; what is read keeps the real values.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

REDACTED = "<redacted>"
# names of storage options and URL query parameters whose values are credentials
SECRET_NAME = re.compile(
    r"key|secret|token|password|passwd|credential|signature|^sig$|sas|auth|connection|session|cookie",
    re.IGNORECASE,
)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>()\[\]{},]+")
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#]*)@")
_PARAM = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&;#]+)=(?P<value>[^&;#]*)")


def redact(options: Any) -> Any:
    """``storage_options`` with the values of credential-like keys (key, secret, token, password,
    connection_string, ...) replaced by ``<redacted>``, nested dicts and lists too, and every URL in a text
    value redacted (:func:`redact_url`)."""
    if isinstance(options, dict):
        return {k: REDACTED if SECRET_NAME.search(str(k)) else redact(v) for k, v in options.items()}
    if isinstance(options, (list, tuple)):
        return [redact(v) for v in options]
    if isinstance(options, str):
        return redact_text(options)
    return options


def _param(match: re.Match[str]) -> str:
    if SECRET_NAME.search(unquote(match.group("name"))):
        return f"{match.group('lead')}{match.group('name')}={REDACTED}"
    return match.group(0)


def redact_url(url: str) -> str:
    """``url`` with its userinfo (``user:password@``) and its credential query parameters redacted."""
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", str(url), count=1)
    head, sep, rest = text.partition("?")
    if not sep:
        return text
    return head + _PARAM.sub(_param, "?" + rest)


def redact_text(text: str) -> str:
    """Every URL in ``text`` (a message, a config) redacted by :func:`redact_url`."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), str(text))
