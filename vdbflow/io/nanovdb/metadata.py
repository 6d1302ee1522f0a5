"""vdbflow's own blind data record, ``vdbflow.metadata``: a volume's units, length units, component
names and periods as UTF-8 JSON, made when a grid is written and applied when it is read."""

from __future__ import annotations

import json
import warnings
from typing import Any

from vdbflow.core.periodic import Periodicity
from vdbflow.core.volume import Topology, Volume
from vdbflow.errors import NanoVDBError, VolumeError
from vdbflow.io import bounded_json
from vdbflow.io.bounded_json import not_text
from vdbflow.io.nanovdb.records import BlindData

# vdbflow's own blind data: units and component names as UTF-8 JSON, plain bytes to other tools
# (semantic, class and type Unknown, value size 1: NanoVDB's encoding of a char array)
METADATA_NAME = "vdbflow.metadata"


def metadata_record(obj: Volume | Topology) -> BlindData | None:
    """The ``vdbflow.metadata`` record of ``obj``: its units, length units and (when not the default
    x, y, z, w) component names; None when there is nothing to store."""
    meta: dict[str, Any] = {}
    for key in ("units", "length_units"):
        if getattr(obj, key, None):
            meta[key] = str(getattr(obj, key))
    names = getattr(obj, "component_names", None)
    if names is not None and tuple(names) != (
        ("x", "y", "z", "w")[: len(names)] if len(names) <= 4 else tuple(f"c{c}" for c in range(len(names)))
    ):
        meta["component_names"] = [str(n) for n in names]
    periodic = getattr(obj, "periodic", None)
    if periodic is not None:
        meta["periodic"] = periodic.to_json()
    if not meta:
        return None

    for key, value in meta.items():
        if key == "periodic":
            continue
        problem = next(filter(None, map(not_text, value if isinstance(value, list) else [value])), None)
        if problem is not None:
            raise NanoVDBError(f"expected the {key} of the grid as text a file can hold, got {problem}")
    data = json.dumps({"format": 1, **meta}, ensure_ascii=False).encode("utf-8")
    return BlindData(METADATA_NAME, 0, 0, 0, 1, data)


def stored_metadata(records: tuple[BlindData, ...]) -> dict[str, Any]:
    """What a grid's ``vdbflow.metadata`` record says (``units``, ``length_units``, ``component_names``),
    for listings: {} when it has none or one that does not parse (:func:`apply_metadata` warns then)."""
    for r in records:
        if r.name == METADATA_NAME:
            try:
                meta = bounded_json.loads(bytes(r.data))
            except (UnicodeDecodeError, ValueError):
                return {}
            if not isinstance(meta, dict):
                return {}
            names = meta.get("component_names")
            return {
                "units": str(meta["units"]) if meta.get("units") is not None else None,
                "length_units": str(meta["length_units"]) if meta.get("length_units") is not None else None,
                "component_names": tuple(map(str, names)) if isinstance(names, list) else None,
                "periodic": _periodic(meta.get("periodic")),
            }
    return {}


def apply_metadata(obj: Volume | Topology, records: tuple[BlindData, ...], base: int) -> tuple[BlindData, ...]:
    """Set ``obj``'s units and component names from its ``vdbflow.metadata`` record; the other records.
    A record that does not parse is left out with a warning (the grid itself is fine)."""
    rest = tuple(r for r in records if r.name != METADATA_NAME)
    for r in records:
        if r.name != METADATA_NAME:
            continue
        try:
            meta = bounded_json.loads(bytes(r.data))
            if not isinstance(meta, dict):
                raise ValueError(f"a JSON {type(meta).__name__}, not an object")
            names = meta.get("component_names")
            if names is not None:
                components = getattr(obj, "components", None)
                if (
                    components is None
                    or not isinstance(names, list)
                    or len(names) != components
                    or len(set(map(str, names))) != len(names)
                ):
                    raise ValueError(f"component names {names!r} for {components} component(s)")
                obj.component_names = tuple(str(n) for n in names)
            for key in ("units", "length_units"):
                if meta.get(key) is not None:
                    setattr(obj, key, str(meta[key]))
            if meta.get("periodic") is not None:
                topology = obj.topology if isinstance(obj, Volume) else obj
                topology.periodic = Periodicity.from_json(meta["periodic"])  # read before any kernel record
        except VolumeError as err:
            warnings.warn(
                f"expected the periods in {METADATA_NAME} of the grid at byte {base} as "
                f"{{'lo': [3 ints], 'size': [3 ints]}}: {err}; the grid is read without them",
                UserWarning,
                stacklevel=4,
            )
        except (UnicodeDecodeError, ValueError) as err:  # a lone surrogate too (bounded_json refuses it)
            warnings.warn(
                f"expected {METADATA_NAME} blind data of the grid at byte {base} to hold a UTF-8 JSON "
                f"object of units and component names, got {err}; ignored",
                UserWarning,
                stacklevel=4,
            )
    return rest


def _periodic(data: Any) -> Periodicity | None:
    """The periods a record's ``periodic`` entry holds, None when absent or unreadable (listings)."""
    try:
        return None if data is None else Periodicity.from_json(data)
    except VolumeError:
        return None
