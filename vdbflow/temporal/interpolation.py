"""Interpolation in time of four steps around each time: the monotone piecewise cubic Hermite
interpolant (PCHIP) of :class:`vdbflow.VolumeSeries` (``time="pchip"``, its module docstring gives
the slopes), with the exact derivative of the interpolated value through the node slopes."""

from __future__ import annotations

import numpy as np

TIME_MODES = ("none", "linear", "pchip")  # how a series is read between its steps


def _pchip_interior(h_prev: np.ndarray, h_next: np.ndarray, m_prev: np.ndarray, m_next: np.ndarray):
    """Fritsch-Butland slope at an interior node from the secants on either side (scipy's form), and
    its derivatives with respect to the two secants."""
    w1, w2 = 2 * h_next + h_prev, h_next + 2 * h_prev
    flat = (np.sign(m_prev) != np.sign(m_next)) | (m_prev == 0) | (m_next == 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = (w1 + w2) / (w1 / m_prev + w2 / m_next)
        c_prev = d * d * w1 / ((w1 + w2) * m_prev * m_prev)
        c_next = d * d * w2 / ((w1 + w2) * m_next * m_next)
    return np.where(flat, 0.0, d), np.where(flat, 0.0, c_prev), np.where(flat, 0.0, c_next)


def _pchip_edge(h0: np.ndarray, h1: np.ndarray, m0: np.ndarray, m1: np.ndarray):
    """Shape-preserving three-point slope at an end node (scipy's ``_edge_case``), and its
    derivatives with respect to the secants m0 (next to the node) and m1."""
    d = ((2 * h0 + h1) * m0 - h0 * m1) / (h0 + h1)
    c0 = np.broadcast_to((2 * h0 + h1) / (h0 + h1), d.shape)
    c1 = np.broadcast_to(-h0 / (h0 + h1), d.shape)
    wrong = np.sign(d) != np.sign(m0)
    big = (np.sign(m0) != np.sign(m1)) & (np.abs(d) > 3 * np.abs(m0))
    return (
        np.where(wrong, 0.0, np.where(big, 3 * m0, d)),
        np.where(wrong, 0.0, np.where(big, 3.0, c0)),
        np.where(wrong | big, 0.0, c1),
    )


def pchip_combine(
    g: np.ndarray, tk: np.ndarray, t: np.ndarray, grad: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Monotone cubic Hermite at times ``t`` (N,) from values ``g`` (N, 4, C) at times ``tk`` (N, 4)
    (``t_{i-1}, t_i, t_{i+1}, t_{i+2}``; NaN where the series has no such step), on ``[t_i, t_{i+1}]``.

    With ``grad`` (N, 4, C, 3), the spatial gradients of ``g``, also returns the gradient of the
    interpolant (N, C, 3): the chain rule through the node slopes, which depend on the data."""
    with np.errstate(invalid="ignore", divide="ignore"):
        h = np.diff(tk, axis=1)[:, :, None]  # (N, 3, 1): h0, h1, h2
        m = np.diff(g, axis=1) / h  # (N, 3, C): secants
    has_l = np.isfinite(tk[:, 0])[:, None]
    has_r = np.isfinite(tk[:, 3])[:, None]
    h0, h1, h2 = h[:, 0], h[:, 1], h[:, 2]
    m0, m1, m2 = m[:, 0], m[:, 1], m[:, 2]
    zero, one = np.zeros_like(m1), np.ones_like(m1)
    with np.errstate(invalid="ignore", divide="ignore"):
        # each slope and its coefficients on the secants (m0, m1, m2)
        i1, e1 = _pchip_interior(h0, h1, m0, m1), _pchip_edge(h1, h2, m1, m2)
        d1 = [
            np.where(has_l, a, np.where(has_r, b, c))
            for a, b, c in zip(
                (i1[0], i1[1], i1[2], zero), (e1[0], zero, e1[1], e1[2]), (m1, zero, one, zero), strict=True
            )
        ]
        i2, e2 = _pchip_interior(h1, h2, m1, m2), _pchip_edge(h1, h0, m1, m0)
        d2 = [
            np.where(has_r, a, np.where(has_l, b, c))
            for a, b, c in zip(
                (i2[0], zero, i2[1], i2[2]), (e2[0], e2[2], e2[1], zero), (m1, zero, one, zero), strict=True
            )
        ]
    s = ((t - tk[:, 1]) / (tk[:, 2] - tk[:, 1]))[:, None]
    s2, s3 = s * s, s * s * s
    b00, b10, b01, b11 = 2 * s3 - 3 * s2 + 1, s3 - 2 * s2 + s, -2 * s3 + 3 * s2, s3 - s2
    value = b00 * g[:, 1] + b10 * h1 * d1[0] + b01 * g[:, 2] + b11 * h1 * d2[0]
    if grad is None:
        return value, None
    with np.errstate(invalid="ignore"):
        gm = np.diff(grad, axis=1) / h[:, :, :, None]  # (N, 3, C, 3): gradients of the secants
        gm = np.where(np.isfinite(gm), gm, 0.0)  # secants to missing steps carry coefficient 0
        dd1 = sum(d1[j + 1][:, :, None] * gm[:, j] for j in range(3))
        dd2 = sum(d2[j + 1][:, :, None] * gm[:, j] for j in range(3))
    e = (slice(None), slice(None), None)
    gradient = b00[e] * grad[:, 1] + b01[e] * grad[:, 2] + (b10 * h1)[e] * dd1 + (b11 * h1)[e] * dd2
    return value, gradient
