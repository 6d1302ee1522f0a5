"""The names and attributes of vdbflow's results, written once (docs/results.md describes them).

Point samples: a variable named for the volume with the points' dims (``point``) and, for several
components, ``component``; its Jacobian ``<name>_jacobian`` adds ``axis``, its Hessian
``<name>_hessian`` adds ``axis, axis2`` (or ``haxis, haxis2`` where the Hessian's space is not the
Jacobian's).  Particle trajectories (``featureType: trajectory``): ``position`` on
``(particle, time, axis)``, ``status``, ``end_time``, the velocity and its Jacobian along the path,
``ftle``.  The eager, lazy, distributed, particle and job paths all take their names and attrs from
here.  Plain data and functions of strings: no xarray.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow.core import outputs, units

CONVENTIONS = "CF-1.10"
COMPONENT = "component"
AXIS = "axis"
HESSIAN_AXES = ("axis", "axis2")  # the Hessian's axes when they are the Jacobian's
OWN_HESSIAN_AXES = ("haxis", "haxis2")  # when its space differs from the Jacobian's
AXIS_LABELS = {"index": ("i", "j", "k"), "world": ("x", "y", "z")}
RESERVED_DIMS = (COMPONENT, AXIS, "x", "y", "z", "i", "j", "k")  # names point dims may not take
POINT = "point"
PARTICLE, TIME = "particle", "time"
INSIDE = "inside"  # the output name that asks for the stencil-inside flag (sample_grad, job configs)
STENCIL_INSIDE = "stencil_inside"  # its variable
# every name a result gives a coordinate, a dim or a variable of its own (point, series, particle and job
# results): a grid of one of these names is sampled into ``<name>_value`` (value_name), never clashing
RESULT_NAMES = frozenset(
    {POINT, COMPONENT, AXIS, *HESSIAN_AXES, *OWN_HESSIAN_AXES, "x", "y", "z", "i", "j", "k", PARTICLE, TIME}
    | {"position", "status", "end_time", "ftle", STENCIL_INSIDE, "plane_s", "plane_t"}
    | {f"lattice_{a}" for a in "xyzijk"}
)  # a grid named for a derived quantity keeps its name: the quantity is then <grid>_<quantity>

# particle status codes (kernels/vdbflow/advect.h) and their CF flag meanings
STATUS_VALUES = (0, 1, 2)
STATUS_MEANINGS = "active left_data non_finite"


def value_name(name: str) -> str:
    """The variable of grid ``name``'s values in a result: the grid's name, or ``<name>_value`` where the
    name is one the result gives a coordinate, dim or variable of its own (:data:`RESULT_NAMES`, and
    ``point_0``, ``point_1``, ... the dims of shaped points), e.g. a grid named ``z`` is sampled into
    ``z_value`` beside the ``z`` coordinate.  Its Jacobian and Hessian keep the grid's name
    (``z_jacobian``, ``z_hessian``)."""
    clash = name in RESULT_NAMES or (name.startswith("point_") and name[6:].isdigit())
    return f"{name}_value" if clash else name


def jacobian_name(name: str) -> str:
    return f"{name}_jacobian"


def hessian_name(name: str) -> str:
    return f"{name}_hessian"


def labels(names: Any) -> np.ndarray:
    """String labels as variable-length strings (object dtype): a type Zarr v3 specifies, unlike
    fixed-width unicode."""
    return np.array([str(n) for n in names], dtype=object)


def length_of(length_units: str | None, space: str) -> str | None:
    """The unit of a coordinate or derivative axis: the volume's length (world) or ``voxel`` (index)."""
    return units.normalize(length_units) if space == "world" else "voxel"


def jacobian_attrs(name: str, value_units: str | None, length: str | None, components: int) -> dict[str, Any]:
    """Attrs of a Jacobian ``d name / d axis`` per ``length`` (units simplified by pint)."""
    junits = units.divide(value_units, length)
    comp = "[component]" if components > 1 else ""
    jname = jacobian_name(name)
    return {
        "long_name": f"Jacobian of {name}" if components > 1 else f"gradient of {name}",  # a scalar's: its gradient
        **({"units": junits} if junits else {}),
        "convention": f"{jname}[{'component, ' if components > 1 else ''}axis] = d {name}{comp} / d axis",
    }


def derived_attrs(quantity: str, jacobian_units: str | None, velocity_units: str | None) -> dict[str, str]:
    """``long_name``, ``units`` (where the Jacobian has units) and ``formula`` of a derived quantity (or a
    tensor of the Jacobian), from the table of outputs (:mod:`vdbflow.core.outputs`)."""
    o = outputs.TABLE[quantity]
    long_name, exponent, formula = o.long_name, o.exponent, o.formula
    if exponent is None:
        out_units = units.multiply(velocity_units, jacobian_units) if velocity_units and jacobian_units else None
    else:
        out_units = units.power(jacobian_units, exponent)
    return {"long_name": long_name, **({"units": out_units} if out_units else {}), "formula": formula}


def hessian_attrs(name: str, value_units: str | None, length: str | None, components: int) -> dict[str, Any]:
    """Attrs of a Hessian ``d2 name / d axis d axis2`` (units per ``length`` squared)."""
    comp = "[component]" if components > 1 else ""
    attrs: dict[str, Any] = {
        "long_name": f"Hessian of {name}",
        "convention": f"{hessian_name(name)}[{'component, ' if components > 1 else ''}axis, axis2] = "
        f"d2 {name}{comp} / d axis d axis2",
    }
    if value_units and length:
        attrs["units"] = units.divide(value_units, units.power(length, 2))
    return attrs


def stencil_inside_attrs(mode: str, name: str, tiles: bool = True) -> dict[str, Any]:
    """Attrs of the flag that says whether a point's ``mode`` stencil reads only active voxels of ``name``
    (and, with ``tiles``, voxels of its tiles: not for a level set, whose tiles are its constant inside)."""
    where = "active voxels or tiles" if tiles else "active voxels (its tiles are not data: a level set)"
    return {
        "long_name": f"the {mode} stencil of the point reads only {where} of {name}",
        "flag_values": np.array([0, 1], np.int8),
        "flag_meanings": "reads_background all_data",
        "tiles_are_data": np.int8(tiles),
        "comment": "where 0, values and derivatives mix in the background or tile values: the edge of the data",
    }


# -- particle trajectories ----------------------------------------------------------------------


def status_attrs() -> dict[str, Any]:
    return {
        "long_name": "particle status",
        "flag_values": np.array(STATUS_VALUES, np.int8),
        "flag_meanings": STATUS_MEANINGS,
    }


FTLE_ATTRS = {"long_name": "finite-time Lyapunov exponent", "method": "variational"}


def ftle_attrs(value_units: str | None, length_units: str | None, method: str = "variational") -> dict[str, Any]:
    """Attrs of an FTLE: per unit of time, the velocity's units over the length's (``1/s`` for m/s in m)."""
    per_time = units.divide(units.normalize(value_units), units.normalize(length_units))
    return {**FTLE_ATTRS, "method": method, **({"units": per_time} if per_time else {})}


TIME_ATTRS = {"long_name": "time", "standard_name": "time"}
WORLD_AXIS_ATTRS = {"long_name": "axis (world space)"}


def trajectory_attrs(name: str, value_units: str | None, length_units: str | None) -> dict[str, dict[str, Any]]:
    """Attrs of each trajectory variable: ``position``, ``status``, ``end_time``, the velocity
    ``name`` and its Jacobian along the path, ``ftle``."""
    length = units.normalize(length_units)
    vunits = units.normalize(value_units)
    lattrs = {"units": length} if length else {}
    junits = units.divide(vunits, length)
    return {
        "position": {"long_name": "particle position", **lattrs},
        "status": status_attrs(),
        "end_time": {"long_name": "time of the last valid position"},
        value_name(name): {
            "long_name": f"{name} along the path",
            **({"units": vunits} if vunits else {}),
            **({"grid_name": name} if value_name(name) != name else {}),
        },
        jacobian_name(name): {
            "long_name": f"Jacobian of {name} along the path",
            **({"units": junits} if junits else {}),
            "convention": f"{jacobian_name(name)}[component, axis] = d {name}[component] / d axis",
        },
        "ftle": ftle_attrs(value_units, length_units),
    }


def trajectory_dims(name: str) -> dict[str, tuple[str, ...]]:
    """Dims of each trajectory variable (``particle`` first)."""
    return {
        "position": (PARTICLE, TIME, AXIS),
        "status": (PARTICLE,),
        "end_time": (PARTICLE,),
        value_name(name): (PARTICLE, TIME, COMPONENT),
        jacobian_name(name): (PARTICLE, TIME, COMPONENT, AXIS),
        "ftle": (PARTICLE,),
    }


def seed_coord_attrs(label: str, length_units: str | None) -> dict[str, Any]:
    length = units.normalize(length_units)
    return {"long_name": f"{label} of the seed at t0", **({"units": length} if length else {})}
