"""Every output a sampling request, a Dataset or a job can ask for, in one table.

The kernels export what they compute in their fused pass (:mod:`vdbflow.core.kernel`: ``DERIVED``, the
names in the kernels' order, and ``DERIVED_WIDTHS``); this module completes that with what only Python
knows: each output's kind, CF ``long_name``, the power of the Jacobian's units it carries, its formula
and what it needs besides the Jacobian.  The request, the schema of results, the flow functions, grid
fields, plots, job configs and plans read this table; nothing else lists output names.

Kinds:
    ``field``    sampled: ``value`` (C entries a point), ``jacobian`` (3 C)
    ``second``   from the Hessian: ``hessian`` (9 C), ``laplacian`` (C)
    ``derived``  computed by the kernels from the Jacobian in the sampling pass (widths from the kernels)
    ``tensor``   3 x 3 tensors of the Jacobian, computed by :mod:`vdbflow.analysis.flow` (not in the kernels)
    ``flag``     ``inside``: one byte a point, whether the point's stencil reads only defined voxels

Adding a derived quantity: its formula in ``kernels/vdbflow/derived.h`` (name and width there), its facts
in ``_FACTS`` below, and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from vdbflow.core import kernel


@dataclass(frozen=True)
class Output:
    """One output.  ``width``: entries a point, per value component for ``field`` and ``second`` outputs;
    ``exponent``: the power of the Jacobian's units (None: the velocity's units times the Jacobian's, or
    no units rule); ``velocity``: needs the sampled value as well (helicity)."""

    name: str
    kind: str
    width: int
    long_name: str = ""
    exponent: int | None = None
    formula: str = ""
    velocity: bool = False

    def entries(self, components: int) -> int:
        """Entries a point of a grid of ``components`` value components."""
        return self.width * components if self.kind in ("field", "second") else self.width

    @property
    def scalar(self) -> bool:
        """A quantity of the flow with one entry a point (what a plot or a grid field can show)."""
        return self.kind == "derived" and self.width == 1


# long name, exponent of the Jacobian's units, formula (kinds derived and tensor, and the Laplacian)
_FACTS: dict[str, tuple[str, int | None, str]] = {
    "divergence": ("velocity divergence", 1, "du_x/dx + du_y/dy + du_z/dz"),
    "vorticity": ("vorticity", 1, "(dw/dy - dv/dz, du/dz - dw/dx, dv/dx - du/dy)"),
    "vorticity_magnitude": ("vorticity magnitude", 1, "|curl u|"),
    "q_criterion": ("Q-criterion", 2, "Q = (|Omega|_F^2 - |S|_F^2) / 2"),
    "lambda2": ("lambda-2 criterion", 2, "middle eigenvalue of S^2 + Omega^2"),
    "swirling_strength": ("swirling strength", 1, "|Im(lambda)| of the complex eigenvalues of J"),
    "helicity": ("helicity density", None, "u . curl u"),
    "strain_rate_magnitude": ("strain-rate magnitude", 1, "|S| = sqrt(2 S:S), S = (J + J^T) / 2"),
    "r_invariant": ("R invariant of the velocity gradient", 3, "R = -det(A), A = J - tr(J) I / 3"),
    "strain_rate": ("strain-rate tensor", 1, "S = (J + J^T) / 2"),
    "rotation_rate": ("rotation-rate tensor", 1, "Omega = (J - J^T) / 2"),
    "laplacian": ("Laplacian", None, "d2/dx2 + d2/dy2 + d2/dz2"),
}
_NEEDS_VELOCITY = {"helicity"}
TENSOR_NAMES = ("strain_rate", "rotation_rate")


def _table() -> dict[str, Output]:
    missing = [name for name in kernel.DERIVED if name not in _FACTS]
    if missing:  # a quantity added to derived.h without its facts here
        raise RuntimeError(f"expected the facts of every derived quantity of the kernels, found none for {missing}")
    rows = [Output("value", "field", 1), Output("jacobian", "field", 3)]
    rows += [
        Output(name, "derived", kernel.DERIVED_WIDTHS[name], *_FACTS[name], velocity=name in _NEEDS_VELOCITY)
        for name in kernel.DERIVED
    ]
    rows += [Output(name, "tensor", 9, *_FACTS[name]) for name in TENSOR_NAMES]
    rows += [Output("hessian", "second", 9), Output("laplacian", "second", 1, *_FACTS["laplacian"])]
    rows += [Output("inside", "flag", 1)]
    return {o.name: o for o in rows}


TABLE: dict[str, Output] = _table()


def names(*kinds: str) -> tuple[str, ...]:
    """The outputs of these kinds, in the table's order."""
    return tuple(name for name, o in TABLE.items() if o.kind in kinds)


def scalar_quantities(velocity: bool = True) -> tuple[str, ...]:
    """The scalar quantities of the flow (``velocity=False``: those of the Jacobian alone)."""
    return tuple(name for name, o in TABLE.items() if o.scalar and (velocity or not o.velocity))


def bytes_per_point(name: str, components: int, itemsize: int) -> int:
    """Bytes of output ``name`` a point for a grid of ``components`` components of ``itemsize`` bytes."""
    o = TABLE[name]
    return 1 if o.kind == "flag" else o.entries(components) * itemsize
