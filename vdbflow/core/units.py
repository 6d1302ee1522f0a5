"""Units of sampled and derived quantities, simplified and checked with pint.

Unit strings are UDUNITS/CF-style text (``"m/s"``, ``"m s-1"``, ``"kg m-3"``, ``"1"``). Composing them
goes through pint so that the result is simplified: ``m/s`` over ``m`` is ``1/s``, its square
``1/s^2``, and a dimensionless result is ``"1"`` (never ``""``). Index space is measured in
``voxel`` (one voxel edge), a unit of its own that does not cancel against lengths.

A string pint cannot read is kept as given and a :class:`UnitsWarning` says so; nothing here raises
for a unit it does not know. ``None`` (or ``""``) means the units are unknown, and stays ``None``.
"""

from __future__ import annotations

import functools
import re
import warnings
from tokenize import TokenError
from typing import Any

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


@functools.lru_cache(maxsize=1024)
def _parse(text: str) -> Any:
    """A pint Quantity of ``text`` (magnitude 1 unless the text holds a number), or None if pint cannot
    read it."""
    reg = registry()
    import pint

    for candidate in (text, _CF_POWER.sub(r"^\1", text)):
        try:
            q = reg.parse_expression(candidate)
        except (pint.errors.PintError, AttributeError, TypeError, ValueError, SyntaxError, TokenError):
            continue
        return q if isinstance(q, reg.Quantity) else reg.Quantity(q)
    return None


def _warn(text: str) -> None:
    warnings.warn(
        f"expected a unit string pint can read, got {text!r}: kept as given (not simplified or checked)",
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


def normalize(units: str | None) -> str | None:
    """``units`` simplified (``"m/s/m"`` -> ``"1/s"``, ``"dimensionless"`` -> ``"1"``), or as given when
    it is already in its simplest form (``"m s-1"`` keeps its spelling); None when unknown."""
    text = _known(units)
    if text is None:
        return None
    q = _parse(text)
    if q is None:
        _warn(text)
        return text
    if _bare(q):
        return _format(q)
    if len(_NAME.findall(text)) <= len(tuple(q.unit_items())) and abs(q.magnitude - 1.0) <= 1e-12:
        return text  # nothing cancels: the caller's spelling stays ("m s-1", "degC")
    return _format(q)


def _combine(parts: list[tuple[str | None, int]], fallback: str | None) -> str | None:
    texts = [_known(t) for t, _ in parts]
    if any(t is None for t in texts) or fallback is None:
        return None
    reg = registry()
    q = reg.Quantity(1)
    for text, (_, exponent) in zip(texts, parts, strict=True):
        assert text is not None  # checked above
        parsed = _parse(text)
        if parsed is None:
            _warn(text)
            return fallback
        q = q * parsed**exponent
    return _format(q)


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
    if qa is None or qb is None:
        return ta == tb
    return bool(
        qa.dimensionality == qb.dimensionality
        and abs((qa / qb).to_reduced_units().magnitude - 1) < 1e-12
        and (qa / qb).to_reduced_units().unitless
    )
