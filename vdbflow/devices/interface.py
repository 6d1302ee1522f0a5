"""What a device does: the one interface both backends (``cpu``, ``cuda``) implement.

Every operation of the kernels is here once, with the same parameters on both devices; the CPU
backend takes NumPy arrays, the CUDA backend CuPy arrays (the kernels' records and their arrays are
put on the device by the backend).  ``KernelArrays`` (:mod:`vdbflow.core.kernel`) is a volume as the
kernels read it; ``mode`` is a code of ``vdbflow.core.kernel.MODES``.  tests/test_devices.py checks that
each backend defines every method with these parameters; a backend function made with :func:`implements`
takes them from here, declared once.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Protocol, TypeVar

from vdbflow.core import kernel
from vdbflow.core.kernel import KernelArrays
from vdbflow.errors import DeviceError


class Backend(Protocol):
    """The operations of a device (a module: ``vdbflow.devices.cpu`` or ``vdbflow.devices.cuda``)."""

    def sample(
        self,
        k: KernelArrays,
        points: Any,
        mode: int,
        points_world: bool,
        jacobian_world: bool,
        out_values: Any,
        out_jacobian: Any | None,
        point_order: str = "auto",
    ) -> None:
        """Fills values (N, C) and, when given, Jacobians (N, C, 3) at points (N, 3).  ``point_order`` picks the
        CPU's loop: ``coherent`` (plain), ``scattered`` (prefetching, streaming stores) or ``auto`` (measured on a
        sample of neighbouring points), with identical results; the GPU ignores it (its many threads hide
        latency)."""

    def sample_derived(
        self,
        k: KernelArrays,
        points: Any,
        mode: int,
        points_world: bool,
        jacobian_world: bool,
        out_values: Any | None,
        out_jacobian: Any | None,
        derived: dict[str, Any],
        point_order: str = "auto",
    ) -> None:
        """One pass over points (N, 3) of a vec3 float volume: values (N, 3) and Jacobians (N, 3, 3) where
        given, and each derived quantity of ``derived`` (name -> (N,) or (N, 3) buffer of the Jacobian
        dtype; ``vdbflow.core.kernel.DERIVED`` names them)."""

    def derive(self, jacobian: Any, velocity: Any | None, derived: dict[str, Any]) -> None:
        """The derived quantities of Jacobians (N, 3, 3) and velocities (N, 3) (needed for helicity) into
        the buffers of ``derived``, as :meth:`sample_derived` computes them."""

    def sample_hessian(
        self,
        k: KernelArrays,
        points: Any,
        mode: int,
        points_world: bool,
        jacobian_world: bool,
        hessian_world: bool,
        out_values: Any,
        out_jacobian: Any | None,
        out_hessian: Any,
    ) -> None:
        """Fills values (N, C), Jacobians (N, C, 3) when given and Hessians (N, C, 3, 3)."""

    def sample_vjp(
        self,
        k: KernelArrays,
        points: Any,
        mode: int,
        points_world: bool,
        jacobian_world: bool,
        adj_values: Any,
        adj_jacobian: Any | None,
        accumulator: Any,
        adj_points: Any,
    ) -> None:
        """Reverse mode: corner shares into ``accumulator`` (value rows + tile rows + 1, C) float64, point adjoints
        (N, 3); ``k`` holds contiguous values (``Volume.contiguous()``: the accumulator's rows follow them).  The CPU
        adds the shares in point order (deterministic); the GPU with float64 atomics, so the last bits of the sums
        may change from run to run."""

    def sample_reduce(
        self,
        k: KernelArrays,
        points: Any,
        mode: int,
        points_world: bool,
        jacobian_world: bool,
        spec: bytes,
        edges: Any,
        ints: Any,
        reals: Any,
        point_order: str = "auto",
    ) -> None:
        """Statistics (histograms, moments, binned means: a ``vdbflow.ops.reductions`` spec) of the quantities
        sampled at points (N, 3), added into host arrays ``ints`` (int64) and ``reals`` (float64)."""

    def reduce_features(self, spec: bytes, features: Any, edges: Any, ints: Any, reals: Any) -> None:
        """The same statistics of given features (N, channels), added into host ``ints`` and ``reals``."""

    def merge_partials(self, spec: bytes, edges: Any, ints: Any, reals: Any, ints_b: Any, reals_b: Any) -> None:
        """Partial ``(ints_b, reals_b)`` of a reduction merged into host ``(ints, reals)`` in place."""

    def grid_gradient(self, k: KernelArrays, leaf_origins: Any, scheme: int, jacobian_world: bool) -> Any:
        """(n_active, C, 3) Jacobians of a finite-difference ``scheme`` at the active voxels of leaves."""

    def advect(
        self,
        k: KernelArrays,
        mode: int,
        x: Any,
        a: Any,
        b: Any,
        h: float,
        save_slot: Any,
        position: Any,
        velocity: Any | None,
        jacobian: Any | None,
        F: Any | None,
        validate_end: bool = True,
    ) -> tuple[Any, Any, Any]:
        """Particle trajectories through a steady vec3 volume: ``(status, last_step, evaluations)``."""

    def advect_series(
        self,
        ks: list[KernelArrays],
        topology: Any,
        time_kind: int,
        stage_grid: Any,
        stage_coef: Any,
        first_step: int,
        mode: int,
        x: Any,
        a: Any,
        b: Any,
        h: float,
        save_slot: Any,
        position: Any,
        velocity: Any | None,
        jacobian: Any | None,
        F: Any | None,
        status: Any,
        last_step: Any,
        evaluations: Any,
        validate_end: bool = True,
    ) -> None:
        """Particle trajectories through a window of a series' steps, interpolated in time (status,
        last_step and evaluations updated in place)."""

    def route(
        self,
        points: Any,
        origin: Any,
        shift: int,
        boundaries: Any,
        xform: Any,
        points_world: bool,
        near: Any | None,
        period: Any | None = None,
    ) -> tuple[Any, Any, Any]:
        """Points grouped by partition: ``(order (N,), bounds (P + 2,), grouped points (N, 3))``; ``period``
        (6,): the volume's periods (a point goes where its wrapped base cell is), None for none."""

    def stencil_inside(self, topology: Any, points: Any, mode: int, points_world: bool) -> Any:
        """(N,) bool: points whose ``mode`` stencil reads only defined voxels of ``topology``."""

    def defined_voxels(self, topology: Any, ijk: Any) -> Any:
        """(M,) bool: voxels (M, 3) active in a leaf or inside a tile."""

    def scatter_rows(self, dst: Any, index: Any, src: Any) -> None:
        """``dst[index] = src`` row by row (rows of any trailing shape)."""

    def active_voxels_at(self, origins: Any, masks: Any, leaf_end: Any, ranks: Any) -> Any:
        """(M, 3) int coordinates of the active voxels of ranks ``ranks`` (M,) in tree order."""


# the operations, as the kernels' table lists them (operations.h, read by vdbflow.core.kernel); Backend declares
# the parameters of each (tests/test_devices.py holds the two to one list)
OPERATIONS: tuple[str, ...] = tuple(kernel.OPERATIONS)

R = TypeVar("R")

# the CPU parameters an operation at points starts with (operations.h): the call's record and points
POINT_PARAMETERS = ("k", "points", "points_double", "n")
# the spaces a call's record carries, in the order kernel.KernelRecord.call takes them
RECORD_SPACES = ("points_world", "jacobian_world", "hessian_world")


def point_spaces(operation: str) -> tuple[str, ...]:
    """The spaces of an operation at points, for its call's record: the ``*_world`` parameters of its
    :class:`Backend` method, the record's in its order.  An operation at points is a row that starts with the
    record and points and takes only arrays and scalars besides (no spec, no list of buffers); any other is refused
    (``DeviceError``): a backend writes its function itself."""
    row = kernel.OPERATIONS[operation].cpu_parameters
    names = tuple(name for _, name in row[: len(POINT_PARAMETERS)])
    others = [ctype for ctype, _ in row if ctype in ("vdbflow_op_spec", "void* const*")]
    if names != POINT_PARAMETERS or others:
        raise DeviceError(
            f"expected a backend function for {operation}: not an operation at points (its row starts with {names}"
            f"{' and takes a ' + others[0] if others else ''})"
        )
    parameters = inspect.signature(getattr(Backend, operation)).parameters
    spaces = tuple(name for name in parameters if name.endswith("_world"))
    if spaces != RECORD_SPACES[: len(spaces)]:
        raise DeviceError(f"expected {operation}'s spaces in the record's order {RECORD_SPACES}, got {spaces}")
    return spaces


def implements(body: Callable[[SimpleNamespace], R]) -> Callable[..., R]:
    """The backend function of the operation ``body.__name__``, with the parameters, defaults and docstring of
    :class:`Backend`'s method (declared once, here): ``body`` gets one call's arguments, defaults applied, as
    the attributes of a namespace; its own docstring, if any, follows the interface's."""
    if body.__name__ not in OPERATIONS:
        raise DeviceError(f"expected an operation of the kernels' table, got {body.__name__!r}")
    method = getattr(Backend, body.__name__)
    signature = inspect.signature(method)
    signature = signature.replace(parameters=list(signature.parameters.values())[1:])  # without self

    names = tuple(signature.parameters)
    defaults = {n: p.default for n, p in signature.parameters.items() if p.default is not inspect.Parameter.empty}

    @functools.wraps(body)
    def run(*args: Any, **kwargs: Any) -> R:
        values = dict(zip(names, args, strict=False))  # too many: refused below
        if kwargs or len(args) != len(names):  # Signature.bind only to word a bad call's TypeError: it is slow
            if len(args) > len(names) or not kwargs.keys() <= set(names) - values.keys():
                signature.bind(*args, **kwargs)
            values = {**defaults, **values, **kwargs}
            if len(values) != len(names):
                signature.bind(*args, **kwargs)
        return body(SimpleNamespace(**values))

    run.__signature__ = signature  # type: ignore[attr-defined]
    run.__doc__ = "\n\n".join(filter(None, (inspect.getdoc(method), inspect.getdoc(body))))
    return run
