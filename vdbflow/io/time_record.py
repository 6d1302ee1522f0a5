"""A time step's time, stored in its .nvdb file as a blind data record named ``vdbflow.time`` holding
UTF-8 JSON ``{"time": t}`` (written by :func:`vdbflow.synthetic.unsteady.write_series`, read by
:func:`vdbflow.open_series` when no ``times=`` are given)."""

from __future__ import annotations

import json
import math
from typing import Any

from vdbflow.io import bounded_json
from vdbflow.io.nanovdb import BlindData

TIME_RECORD = "vdbflow.time"


def time_record(t: float) -> BlindData:
    """The blind data record of time ``t``."""
    return BlindData(TIME_RECORD, 0, 0, 0, 1, json.dumps({"time": float(t)}).encode("utf-8"))


def record_time(blind_data: Any) -> float | None:
    """The time held by a grid's blind data records, or None when there is no readable time record (not
    UTF-8 JSON within :mod:`~vdbflow.io.bounded_json`'s limits, no ``"time"``, or not a finite number)."""
    for r in blind_data or ():
        if r.name == TIME_RECORD:
            try:
                t = float(bounded_json.loads(bytes(r.data))["time"])
            except (ValueError, KeyError, TypeError, IndexError, OverflowError):
                return None
            return t if math.isfinite(t) else None
    return None
