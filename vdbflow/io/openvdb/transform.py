"""A grid's transform: OpenVDB's map type name and its doubles, as vdbflow's (4, 4) index-to-world
matrix (``world = M @ [i, j, k, 1]``).  The linear maps are read; frustum and other non-linear maps
are refused, naming the map."""

from __future__ import annotations

import numpy as np

from vdbflow.io.openvdb import format as fmt
from vdbflow.io.openvdb.stream import Cursor


def read_transform(cur: Cursor) -> tuple[str, np.ndarray]:
    """(map type name, (4, 4) float64 index-to-world matrix) at the cursor; the cursor ends after it."""
    at = cur.pos
    name = cur.string("the transform's map type", limit=256)
    count = fmt.MAP_DOUBLES.get(name)
    if count is None:
        kind = (
            "a non-linear map, which vdbflow's affine transforms cannot hold"
            if name in fmt.NONLINEAR_MAPS
            else ("a map type vdbflow does not know")
        )
        raise cur.fail(f"one of the linear maps {sorted(fmt.MAP_DOUBLES)}", f"{name!r} ({kind})", at)
    values = cur.array("<f8", count, f"the {name}").astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise cur.fail(f"finite numbers in the {name}", f"{values.tolist()}", at)
    m = np.eye(4)
    if name in ("AffineMap", "UnitaryMap"):
        rows = values.reshape(4, 4)  # OpenVDB multiplies row vectors: world = [i j k 1] @ rows
        if not np.allclose(rows[:, 3], [0.0, 0.0, 0.0, 1.0]):
            raise cur.fail(f"an affine matrix (last column 0, 0, 0, 1) in the {name}", f"{rows[:, 3].tolist()}", at)
        m[:3, :] = rows[:, :3].T
        m[3] = (0.0, 0.0, 0.0, 1.0)
    elif name == "TranslationMap":
        m[:3, 3] = values[:3]
    elif name in ("ScaleMap", "UniformScaleMap"):
        m[:3, :3] = np.diag(values[:3])
    else:  # (Uniform)ScaleTranslateMap: translation first, then the scale
        m[:3, 3] = values[:3]
        m[:3, :3] = np.diag(values[3:6])
    return name, m
