"""One sampling request: what to sample and how, checked once.

A :class:`SampleRequest` names the interpolation ``mode``, the ``outputs`` (``value``, ``jacobian``,
``hessian``, and the flow quantities the kernels derive from the Jacobian of a vec3 field:
``vdbflow.core.kernel.DERIVED``), the spaces of the points and of the derivatives, and the ``device``.  It is checked
when it is made; :meth:`SampleRequest.for_value_type` checks it against a volume's data, and
:meth:`SampleRequest.shapes` / :meth:`SampleRequest.dtypes` give each output's shape and dtype.
Every volume-like object (``Volume``, ``DistributedVolume``, ``VolumeSeries``,
``DistributedSeries``) answers one with ``sample_arrays(request, points)`` (series: ``points, t``):
a dict of arrays, one per output, that :func:`vdbflow.ops.results.result_dataset` turns into a Dataset.
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass
from typing import Any

import numpy as np

from vdbflow.core.kernel import DERIVED, DERIVED_WIDTHS, MODES, STENCIL_RADIUS
from vdbflow.devices import DEVICES, resolve_device
from vdbflow.errors import DeviceError, SamplingError

OUTPUTS = ("value", "jacobian", "hessian")  # the sampled fields; a Hessian comes with the value and Jacobian
ALL_OUTPUTS = OUTPUTS + DERIVED  # the order of a request's outputs
SPACES = ("index", "world")
POINT_ORDERS = ("auto", "coherent", "scattered")
HESSIAN_MODES = tuple(m for m in MODES if m != "closest")


def check_choice(value: str, choices: Any, what: str) -> str:
    """``value`` if it is one of ``choices``, else a SamplingError naming them."""
    if value not in choices:
        raise SamplingError(f"expected {what} to be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


@dataclass(frozen=True)
class SampleRequest:
    """What to sample at points, checked when made.

    Attributes
    ----------
    mode : a sampling mode of ``vdbflow.core.kernel.MODES`` (``HESSIAN_MODES`` with a Hessian)
    outputs : the fields ``("value",)``, ``("jacobian",)``, ``("value", "jacobian")`` or ``("value", "jacobian",
        "hessian")``; and derived quantities (``DERIVED``: ``q_criterion``, ``vorticity``, ...) of a vec3 float
        field, alone or with any of those: the kernels compute them
        from the Jacobian in the same pass and write only what is asked.  Kept in ``ALL_OUTPUTS`` order.
    space : ``"index"`` or ``"world"``: the space of the points
    jacobian_space, hessian_space : the axes of the derivatives (defaults: ``space``, then
        ``jacobian_space``; resolved when the request is made)
    device : ``"cpu"``, ``"cuda"`` or ``"auto"`` (follows the points: :meth:`device_for`)
    point_order : a hint for the CPU loop (``"auto"``, ``"coherent"``, ``"scattered"``)
    """

    mode: str = "linear"
    outputs: tuple[str, ...] = ("value", "jacobian")
    space: str = "index"
    jacobian_space: str | None = None
    hessian_space: str | None = None
    device: str = "cpu"
    point_order: str = "auto"

    def __post_init__(self) -> None:
        asked = (self.outputs,) if isinstance(self.outputs, str) else tuple(self.outputs)
        unknown = [o for o in asked if o not in ALL_OUTPUTS]
        if unknown or len(set(asked)) != len(asked) or not asked:
            near = [difflib.get_close_matches(str(o), (*ALL_OUTPUTS, "inside"), n=1) for o in unknown]
            hints = [f"{o!r} (did you mean {m[0]!r}?)" if m else repr(o) for o, m in zip(unknown, near, strict=True)]
            raise SamplingError(
                f"expected outputs among {', '.join(map(repr, ALL_OUTPUTS))} (and, for a Dataset, 'inside'), "
                f"each once, got {asked}" + (f": {', '.join(hints)} unknown" if unknown else "")
            )
        outputs = tuple(o for o in ALL_OUTPUTS if o in asked)
        fields = tuple(o for o in outputs if o in OUTPUTS)
        allowed: tuple[tuple[str, ...], ...] = (OUTPUTS[:1], ("jacobian",), OUTPUTS[:2], OUTPUTS)
        if len(fields) < len(outputs):  # derived quantities alone too
            allowed += ((),)
        if fields not in allowed:
            raise SamplingError(
                f"expected outputs with the fields {OUTPUTS[:1]}, ('jacobian',), {OUTPUTS[:2]} or {OUTPUTS} (or, "
                f"with derived quantities, none), got {fields}"
            )
        if "hessian" in outputs:
            if self.mode not in HESSIAN_MODES:
                raise SamplingError(
                    "expected a mode with a second derivative, one of "
                    f"{', '.join(map(repr, HESSIAN_MODES))}; got {self.mode!r}"
                )
        else:
            check_choice(self.mode, MODES, "mode")
        check_choice(self.space, SPACES, "space")
        check_choice(self.point_order, POINT_ORDERS, "point_order")
        jspace = (
            self.space if self.jacobian_space is None else check_choice(self.jacobian_space, SPACES, "jacobian_space")
        )
        hspace = jspace if self.hessian_space is None else check_choice(self.hessian_space, SPACES, "hessian_space")
        if self.device not in DEVICES:
            raise DeviceError(f"expected device 'cpu', 'cuda' or 'auto', got {self.device!r}")
        object.__setattr__(self, "outputs", outputs)
        object.__setattr__(self, "jacobian_space", jspace)
        object.__setattr__(self, "hessian_space", hspace)

    @property
    def jacobian(self) -> bool:
        return "jacobian" in self.outputs

    @property
    def hessian(self) -> bool:
        return "hessian" in self.outputs

    @property
    def derived(self) -> tuple[str, ...]:
        """The derived quantities asked (``DERIVED`` order)."""
        return tuple(o for o in self.outputs if o in DERIVED_WIDTHS)

    @property
    def mode_code(self) -> int:
        """The kernels' code of ``mode``."""
        return MODES[self.mode]

    @property
    def stencil_radius(self) -> int:
        """Voxels the mode's stencil reaches on the positive side of the base cell."""
        return STENCIL_RADIUS[self.mode]

    def replace(self, **changes: Any) -> SampleRequest:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def device_for(self, points: Any) -> str:
        """``"cpu"`` or ``"cuda"``: the device, ``"auto"`` following the points' array type."""
        return resolve_device(self.device, points)

    def for_value_type(self, value_type: Any) -> SampleRequest:
        """This request, refused where a volume's data has no such output: integer data is read with
        ``closest`` only, and has no Hessian."""
        if self.derived and (not value_type.is_float or value_type.components != 3):
            raise SamplingError(
                f"expected a vec3 float field (vec3f or vec3d) for {', '.join(self.derived)}, got {value_type.name}"
            )
        if self.hessian and not value_type.is_float:
            raise SamplingError(
                f"expected float32 or float64 data for Hessians, got {value_type.name} (integers are not interpolated)"
            )
        if self.mode != "closest" and not value_type.is_float:
            raise SamplingError(
                f"expected mode='closest' for {value_type.name} data (integers are not interpolated), "
                f"got mode={self.mode!r}"
            )
        return self

    def shapes(self, lead: tuple[int, ...], components: int) -> dict[str, tuple[int, ...]]:
        """Each output's shape for points of leading shape ``lead``: values ``lead`` (scalars) or
        ``lead + (C,)``, Jacobians ``+ (3,)``, Hessians ``+ (3, 3)``; derived quantities ``lead``, the
        vorticity ``lead + (3,)``."""
        base = tuple(lead) if components == 1 else tuple(lead) + (components,)
        extra = {"value": (), "jacobian": (3,), "hessian": (3, 3)}
        return {
            name: base + extra[name] if name in extra else tuple(lead) + ((3,) if DERIVED_WIDTHS[name] == 3 else ())
            for name in self.outputs
        }

    def dtypes(self, value_type: Any) -> dict[str, np.dtype]:
        """Each output's dtype: the volume's for values, its Jacobian dtype for derivatives and derived
        quantities."""
        return {name: value_type.dtype if name == "value" else value_type.jacobian_dtype for name in self.outputs}
