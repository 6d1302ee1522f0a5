"""Units of sampled and derived quantities, simplified and checked with pint.

Unit strings are UDUNITS/CF-style text (``"m/s"``, ``"m s-1"``, ``"kg m-3"``, ``"1"``). Composing them
goes through pint so that the result is simplified: ``m/s`` over ``m`` is ``1/s``, its square
``1/s^2``, and a dimensionless result is ``"1"`` (never ``""``). Index space is measured in
``voxel`` (one voxel edge), a unit of its own that does not cancel against lengths.

A string pint cannot read is kept as given and a :class:`UnitsWarning` says so; nothing here raises
for a unit it does not know. ``None`` (or ``""``) means the units are unknown, and stays ``None``.

Unit strings come from files, so pint only sees text that passes a bounded grammar first: at most
256 characters, 32 factors and 8 nested parentheses; powers are numbers (``m^2``, ``s**-1``,
``m^(1/2)``, ``m2``), never chained (``9**9**9``), and no unit ends up raised beyond the 32nd power;
numbers at most 1e30.  Anything else is an unknown unit, as is a pint result that is not finite.
"""

from __future__ import annotations

import functools
import math
import re
import warnings
from collections.abc import Callable
from typing import Any

from vdbflow.errors import VolumeError

__all__ = ["UnitsWarning", "divide", "multiply", "normalize", "power", "registry", "same"]


class UnitsWarning(UserWarning):
    """A unit string that pint cannot read: it is kept as given, not simplified or checked."""


@functools.lru_cache(maxsize=1)
def registry() -> Any:
    """vdbflow's pint ``UnitRegistry`` (made on first use: about 0.3 s), with ``voxel`` defined."""
    import pint

    reg: Any = pint.UnitRegistry()
    reg.define("voxel = [index_length]")
    return reg


# UDUNITS writes powers as trailing integers ("m s-1", "m2"); pint needs an operator
_CF_POWER = re.compile(r"(?<=[A-Za-z_])(-?\d+)(?![\d.])")
_NAME = re.compile(r"[^\W\d][^\W\d]*")  # unit names in a string (powers and numbers left out)


def _known(text: str | None) -> str | None:
    if text is None:
        return None
    text = str(text).strip()
    return text or None


_MAX_LENGTH = 256
_MAX_FACTORS = 32
_MAX_DEPTH = 8
_MAX_EXPONENT = 32  # of a written power, of powers of powers, and of any unit in a result
_MAX_NUMBER = 1e30
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<name>(?:[^\W\d]|[°%])(?:[^\W\d]|°)*)(?P<cf>[-+]?\d+(?![\d.]))?  # a name, a UDUNITS power ("m2")
    | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)
    | (?P<power>\*\*|\^)
    | (?P<op>[-+*/()])
    )""",
    re.VERBOSE,
)
_POWER_WORDS = re.compile(r"\b(?:square|squared|sq|cubic|cubed)\b", re.IGNORECASE)  # pint: "m squared" -> m**2


class _Refused(ValueError):
    """Text outside the bounded unit grammar; the message says why."""


class _Grammar:
    """A bounded recursive-descent check of a unit expression (nothing is evaluated):
    ``expr := term ([*/]? term)*``, ``term := atom (power exponent)?``,
    ``atom := name | number | "(" expr ")"``, ``exponent := [+-]? number | "(" [+-]? number ("/" number)? ")"``.
    ``check`` returns the largest power any unit or number is raised to."""

    def __init__(self, text: str):
        self.tokens: list[tuple[str, str, str | None]] = []
        pos, end = 0, len(text.rstrip())
        while pos < end:
            m = _TOKEN.match(text, pos)
            if m is None or m.end() == pos:
                raise _Refused(f"unexpected {text[pos : pos + 10].strip()!r} at character {pos}")
            kind = m.lastgroup if m.lastgroup != "cf" else "name"
            assert kind is not None
            self.tokens.append((kind, m.group(kind), m.group("cf")))
            pos = m.end()
        if sum(kind in ("name", "number") for kind, _, _ in self.tokens) > _MAX_FACTORS:
            raise _Refused(f"more than {_MAX_FACTORS} factors")
        self.at = 0

    def check(self) -> float:
        weight = self._expr(0)
        if self.at != len(self.tokens):
            raise _Refused(f"unexpected {self.tokens[self.at][1]!r}")
        return weight

    def _peek(self) -> tuple[str, str]:
        return self.tokens[self.at][:2] if self.at < len(self.tokens) else ("end", "")

    def _take(self, kind: str, value: str | None = None) -> str:
        got = self._peek()
        if got[0] != kind or (value is not None and got[1] != value):
            raise _Refused(f"expected {value or kind}, got {got[1] or 'the end'!r}")
        self.at += 1
        return got[1]

    def _expr(self, depth: int) -> float:
        weight = self._term(depth)
        while self._peek()[1] not in (")", ""):
            if self._peek()[1] in ("*", "/"):
                self.at += 1
            weight = max(weight, self._term(depth))
        return weight

    def _term(self, depth: int) -> float:
        kind, value = self._peek()
        if kind == "name":
            cf = self.tokens[self.at][2]
            self.at += 1
            weight = abs(int(cf)) if cf else 1.0
        elif kind == "number":
            self.at += 1
            if not float(value) <= _MAX_NUMBER:
                raise _Refused(f"a number above {_MAX_NUMBER:g}")
            weight = 1.0
        elif value == "(":
            if depth >= _MAX_DEPTH:
                raise _Refused(f"parentheses nested deeper than {_MAX_DEPTH}")
            self.at += 1
            weight = self._expr(depth + 1)
            self._take("op", ")")
        else:
            raise _Refused(f"expected a unit, a number or '(', got {value or 'the end'!r}")
        if self._peek()[0] == "power":
            self.at += 1
            weight *= self._exponent()
        if weight > _MAX_EXPONENT:
            raise _Refused(f"a power beyond {_MAX_EXPONENT}")
        return weight

    def _exponent(self) -> float:
        grouped = self._peek()[1] == "("
        if grouped:
            self.at += 1
        if self._peek()[1] in ("+", "-"):
            self.at += 1
        value = float(self._take("number"))
        if grouped:
            if self._peek()[1] == "/":
                self.at += 1
                value /= max(float(self._take("number")), 1.0)
            self._take("op", ")")
        return abs(value)


def _refusal(text: str) -> str | None:
    """Why ``text`` is outside the bounded unit grammar, or None when pint may read it."""
    if len(text) > _MAX_LENGTH:
        return f"longer than {_MAX_LENGTH} characters"
    try:
        weight = _Grammar(text).check()
    except _Refused as err:
        return str(err)
    if weight * 3 ** len(_POWER_WORDS.findall(text)) > _MAX_EXPONENT:
        return f"a power beyond {_MAX_EXPONENT}"
    return None


def _bounded(q: Any) -> bool:
    """A finite, non-zero magnitude and no unit beyond the largest power allowed."""
    try:
        magnitude = float(q.magnitude)
    except (OverflowError, TypeError, ValueError):
        return False
    return (
        math.isfinite(magnitude) and magnitude != 0 and all(abs(float(e)) <= _MAX_EXPONENT for _, e in q.unit_items())
    )


def _parse(text: str) -> Any:
    """A pint Quantity of ``text`` (magnitude 1 unless the text holds a number), or why pint may not or
    cannot read it (a str)."""
    return _refusal(text) if len(text) > _MAX_LENGTH else _parse_bounded(text)  # long text: never cached


def _pint_quantity(reg: Any, text: str) -> Any:
    return reg.Quantity(reg.parse_expression(text))


@functools.lru_cache(maxsize=1024)
def _parse_bounded(text: str) -> Any:
    reg = registry()
    whys = []
    for candidate in (text, _CF_POWER.sub(r"^\1", text)):
        refused = _refusal(candidate)
        if refused is not None:
            whys.append(refused)
            continue
        q = _safely(functools.partial(_pint_quantity, reg, candidate))
        if q is not None and _bounded(q):
            return q
        whys.append("pint cannot read it" if q is None else "not a finite, non-zero quantity")
    return whys[0]


def _warn(text: str, why: str) -> None:
    shown = repr(text) if len(text) <= 80 else f"{text[:80]!r}... ({len(text)} characters)"
    warnings.warn(
        f"expected a unit string pint can read, got {shown} ({why}): kept as given (not simplified or checked)",
        UnitsWarning,
        stacklevel=3,
    )


def _bare(q: Any) -> bool:
    """No unit names at all (``percent`` has one, though it is dimensionless)."""
    return q.unitless


def _format(q: Any) -> str:
    """``q``'s units as compact text: ``1/s^2``, ``m/s``; ``1`` when dimensionless.  Factors that do
    not cancel stay in front (``0.001 1/s`` for m/s/km)."""
    reduced = q.to_reduced_units()
    if abs(reduced.magnitude - 1.0) <= 1e-12:
        q = reduced
    scale = "" if abs(q.magnitude - 1.0) <= 1e-12 else f"{q.magnitude:g}"
    if _bare(q):
        return scale or "1"
    text = format(q.units, "~C")
    if not text.isascii():  # e.g. °C, µm, Ω: the full names are plain ASCII
        text = format(q.units, "C")
    text = text.replace("**", "^")
    return f"{scale} {text}" if scale else text


def _safely(compute: Callable[[], Any]) -> Any:
    """``compute()``, or None when pint raises: any failure on grammatical text is an unknown unit."""
    try:
        return compute()
    except Exception:  # noqa: BLE001 - pint raises many kinds (AssertionError, ZeroDivisionError, ...)
        return None


def normalize(units: str | None) -> str | None:
    """``units`` simplified (``"m/s/m"`` -> ``"1/s"``, ``"dimensionless"`` -> ``"1"``), or as given when
    it is already in its simplest form (``"m s-1"`` keeps its spelling); None when unknown."""
    text = _known(units)
    if text is None:
        return None
    q = _parse(text)
    if isinstance(q, str):
        _warn(text, q)
        return text

    def simplest() -> str:
        if not _bare(q) and len(_NAME.findall(text)) <= len(tuple(q.unit_items())) and abs(q.magnitude - 1) <= 1e-12:
            return text  # nothing cancels: the caller's spelling stays ("m s-1", "degC")
        return _format(q)

    simplified = _safely(simplest)
    if simplified is None:
        _warn(text, "pint cannot simplify it")
        return text
    return str(simplified)


def _combine(parts: list[tuple[str | None, int]], fallback: str | None) -> str | None:
    texts = [_known(t) for t, _ in parts]
    if any(t is None for t in texts) or fallback is None:
        return None
    quantities = []
    for text, (_, exponent) in zip(texts, parts, strict=True):
        assert text is not None  # checked above
        parsed = _parse(text)
        if isinstance(parsed, str) or abs(exponent) > _MAX_EXPONENT:
            _warn(text, parsed if isinstance(parsed, str) else f"raised to {exponent}, beyond {_MAX_EXPONENT}")
            return fallback
        quantities.append((parsed, exponent))

    def product() -> str | None:
        q = functools.reduce(lambda a, part: a * part[0] ** part[1], quantities, registry().Quantity(1))
        return _format(q) if _bounded(q) else None

    combined = _safely(product)
    if combined is None:
        _warn(fallback, "pint cannot combine its parts into a finite quantity")
        return fallback
    return str(combined)


def divide(numerator: str | None, denominator: str | None) -> str | None:
    """Units of ``numerator / denominator``, simplified (``"m/s"``, ``"m"`` -> ``"1/s"``); None if either is
    unknown."""
    return _combine([(numerator, 1), (denominator, -1)], f"{numerator}/{denominator}")


def multiply(*factors: str | None) -> str | None:
    """Units of a product, simplified (``"m/s"``, ``"1/s"`` -> ``"m/s^2"``); None if any is unknown."""
    return _combine([(f, 1) for f in factors], " ".join(f"({f})" for f in factors))


def power(units: str | None, exponent: int) -> str | None:
    """Units raised to ``exponent``, simplified (``"m/s/m"``, 2 -> ``"1/s^2"``); None if unknown."""
    return _combine([(units, exponent)], units if exponent == 1 else f"({units})^{exponent}")


def same(a: str | None, b: str | None) -> bool:
    """True when two unit strings name the same units (``"m s-1"`` and ``"m/s"``), by pint; falls back
    to comparing the text when pint cannot read one of them."""
    ta, tb = _known(a), _known(b)
    if ta is None or tb is None:
        return ta == tb
    qa, qb = _parse(ta), _parse(tb)
    if isinstance(qa, str) or isinstance(qb, str):
        return ta == tb

    def equal() -> bool:
        ratio = (qa / qb).to_reduced_units()
        return bool(qa.dimensionality == qb.dimensionality and abs(ratio.magnitude - 1) < 1e-12 and ratio.unitless)

    result = _safely(equal)
    return ta == tb if result is None else bool(result)


def given(text: Any, what: str) -> str | None:
    """Units a caller gives (``Volume.from_dense(units=...)``): None, or printable text (a lone surrogate,
    a control character or a non-string is a :class:`~vdbflow.VolumeError` naming ``what``)."""
    if text is None or (isinstance(text, str) and text.isprintable()):
        return text
    raise VolumeError(f"expected {what} as printable text (e.g. 'm/s'), got {text!r}")
