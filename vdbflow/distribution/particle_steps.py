"""Particles stepped across a cluster: each partition integrates, on its own worker, the particles
whose cell it owns (kernels/vdbflow/advect.h), one step at a time (:mod:`vdbflow.temporal.particles`
drives the steps and redoes, stage by stage, a step that left a partition's leaves and halo)."""

from __future__ import annotations

from typing import Any

import numpy as np

from vdbflow.core import schema
from vdbflow.core.volume import Volume

LEFT_DATA = schema.STATUS_VALUES[1]  # a particle whose step left the data (here: the partition's)


def advect_piece(
    volume: Volume,
    x: np.ndarray,
    F: np.ndarray | None,
    A: np.ndarray,
    B: np.ndarray,
    h: float,
    last: bool,
    want_velocity: bool,
    want_jacobian: bool,
    mode: int,
) -> tuple:
    """One step of a partition's particles, on its worker (a task of :func:`step_partitioned`):
    status, whether x_k was valid, x_{k+1}, the velocity and Jacobian at x_k (as asked), F at
    x_{k+1} and the stage points sampled.  The last step (``last``) only checks and samples x_k."""
    from vdbflow.devices import cpu

    m = len(x)
    x = np.array(x, np.float64)
    position = np.full((m, 1, 3), np.nan)
    velocity = np.full((m, 1, 3), np.nan) if want_velocity else None
    jacobian = np.full((m, 1, 3, 3), np.nan) if want_jacobian else None
    F = None if F is None else np.array(F, np.float64)
    save_slot = np.array([0] if last else [0, -1], np.int64)
    status, last_step, evaluations = cpu.advect(
        volume.kernel_arrays(), mode, x, A, B, h, save_slot, position, velocity, jacobian, F, validate_end=last
    )
    u = None if velocity is None else velocity[:, 0]
    J = None if jacobian is None else jacobian[:, 0]
    return status, last_step >= 0, x, u, J, F, evaluations


def step_partitioned(
    dvol: Any,
    x: np.ndarray,
    F: np.ndarray | None,
    A: np.ndarray,
    B: np.ndarray,
    h: float,
    last: bool,
    want_velocity: bool,
    want_jacobian: bool,
    mode: int,
) -> tuple:
    """A step of particles x (M, 3) through a DistributedVolume ``dvol``: each partition integrates the
    particles whose cell it owns (:func:`advect_piece`, on the partition's worker).  Returns, in input
    order, status (M,) int8, x_k valid (M,) bool, x_{k+1} (M, 3), velocity (M, 3) and Jacobian
    (M, 3, 3) at x_k (or None), F (M, 3, 3) (or None) and the stage points sampled (M,).  A status of
    ``LEFT_DATA`` only says the step left the partition's data; ``mode`` is a kernel mode code."""
    m = len(x)
    order, bounds, grouped = dvol.plan.router.route(x, dvol.template.transform, "world")
    status = np.full(m, LEFT_DATA, np.int8)  # the background-only group (none without a near table)
    valid = np.zeros(m, bool)
    x_next = np.array(x, np.float64)
    u = np.full((m, 3), np.nan) if want_velocity else None
    J = np.full((m, 3, 3), np.nan) if want_jacobian else None
    F_next = None if F is None else np.array(F, np.float64)
    sampled = np.zeros(m, np.int64)
    pieces, futures = [], []
    for p in range(dvol.plan.partitions):
        rows = order[bounds[p + 1] : bounds[p + 2]]
        if len(rows):
            pieces.append(rows)
            futures.append(
                dvol.client.submit(
                    advect_piece,
                    dvol.partitions[p],
                    grouped[bounds[p + 1] : bounds[p + 2]],
                    None if F is None else F[rows],
                    A,
                    B,
                    h,
                    last,
                    want_velocity,
                    want_jacobian,
                    mode,
                    pure=False,
                )
            )
    for rows, result in zip(pieces, dvol.client.gather(futures), strict=True):
        status[rows], valid[rows], x_next[rows] = result[0], result[1], result[2]
        if u is not None:
            u[rows] = result[3]
        if J is not None:
            J[rows] = result[4]
        if F_next is not None:
            F_next[rows] = result[5]
        sampled[rows] = result[6]
    return status, valid, x_next, u, J, F_next, sampled
