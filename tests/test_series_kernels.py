"""Particles through a VolumeSeries in the kernels (window by window, kernels/vdbflow/advect.h) against the
stage-by-stage NumPy integration, the path that defines a series run's semantics: trajectories,
velocities, Jacobians, statuses, end times and sample calls equal bit for bit, FTLE to 1e-12."""

from __future__ import annotations

import numpy as np
import pytest

import vdbflow
from vdbflow.synthetic import unsteady
from vdbflow.temporal import series_kernels, sources

xr_testing = pytest.importorskip("xarray.testing")


def gyre_steps(times, voxel=1 / 16, dtype=np.float64, pad=3):
    f = unsteady.double_gyre()
    return [unsteady.field_volume(f, float(t), voxel, pad=pad, dtype=dtype) for t in times]


@pytest.fixture(scope="module")
def gyre():
    times = np.arange(0.0, 5.0 + 1e-9, 0.25)
    return gyre_steps(times), times


def gyre_seeds(rng, n=60):
    inside = np.column_stack([rng.uniform(0.05, 1.95, n), rng.uniform(0.05, 0.95, n), np.zeros(n)])
    edge = np.column_stack([rng.uniform(0.0, 2.0, 8), np.full(8, 1.15), np.zeros(8)])  # leave the data soon
    return np.concatenate([inside, edge, [[np.nan, 0.5, 0.0], [1e300, 0.5, 0.0]]])


def both_engines(monkeypatch, make_series, *args, ftle_seeds=None, **kw):
    """(kernels, stage by stage) results of advect (and ftle) on a fresh series each time."""
    runs = []
    calls = []
    advect_window = sources.SeriesSource.advect_window

    def counted(self, *a):
        calls.append(1)
        return advect_window(self, *a)

    for windowed in (True, False):
        with monkeypatch.context() as m:
            if windowed:
                m.setattr(sources.SeriesSource, "advect_window", counted)
            else:
                m.setattr(sources.SeriesSource, "windowed", False)
            ds = vdbflow.advect(make_series(), *args, **kw)
            f = None
            if ftle_seeds is not None:
                t0, t1, dt, method, mode = args[1:6]
                f = vdbflow.ftle(
                    make_series(), ftle_seeds, t0, t1 - t0, dt, integrator=method, mode=mode, time=kw["time"]
                )
            runs.append((ds, f))
        if windowed:
            assert calls, "the series run did not reach the kernels"
    return runs


def assert_same(runs, statuses=(0,)):
    (kernels, kf), (stagewise, sf) = runs
    assert set(statuses) <= set(stagewise.status.values.tolist())
    xr_testing.assert_identical(kernels, stagewise)
    if kf is not None:
        np.testing.assert_array_equal(kf.final_position.values, sf.final_position.values)
        np.testing.assert_allclose(kf.ftle.values, sf.ftle.values, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("time", ["linear", "pchip"])
@pytest.mark.parametrize("method", ["rk4", "rk2", "euler"])
def test_series_kernels_equal_the_stage_by_stage_integration(gyre, time, method, rng, monkeypatch):
    steps, times = gyre
    seeds = gyre_seeds(rng)
    kw = dict(save_every=3, with_velocity=True, with_jacobian=True, time=time)
    runs = both_engines(
        monkeypatch,
        lambda: vdbflow.open_series(steps, times),
        seeds,
        0.1,
        3.9,
        0.1,
        method,
        "linear",
        ftle_seeds=seeds[:12],
        **kw,
    )
    assert_same(runs, (0, 1, 2))


@pytest.mark.parametrize("time", ["linear", "pchip"])
def test_series_kernels_backward_in_time_and_with_ftle(gyre, time, rng, monkeypatch):
    steps, times = gyre
    seeds = gyre_seeds(rng, 30)
    kw = dict(save_every=4, with_velocity=True, with_ftle=True, time=time)
    runs = both_engines(
        monkeypatch, lambda: vdbflow.open_series(steps, times), seeds, 4.9, 0.2, 0.15, "rk4", "linear", **kw
    )
    (kernels, _), (stagewise, _) = runs
    variational = [name for name in ("F", "ftle") if name in stagewise]
    assert variational  # the flow-map gradient is not held to NumPy's rounding (as through a steady volume)
    xr_testing.assert_identical(kernels.drop_vars(variational), stagewise.drop_vars(variational))
    assert {0, 1, 2} <= set(stagewise.status.values.tolist())
    for name in variational:
        np.testing.assert_allclose(kernels[name].values, stagewise[name].values, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("time", ["linear", "pchip"])
@pytest.mark.parametrize("mode", ["lag4", "closest"])
def test_series_kernels_with_wider_stencils_and_float32(time, mode, rng, monkeypatch):
    times = np.arange(0.0, 3.0 + 1e-9, 0.5)
    steps = gyre_steps(times, dtype=np.float32)
    seeds = gyre_seeds(rng, 30)
    kw = dict(save_every=2, with_velocity=True, with_jacobian=mode != "closest", time=time)
    runs = both_engines(monkeypatch, lambda: vdbflow.open_series(steps, times), seeds, 0.0, 2.7, 0.1, "rk4", mode, **kw)
    assert_same(runs, (0, 1, 2))


@pytest.mark.parametrize("time", ["linear", "pchip"])
def test_series_kernels_through_steps_of_several_topologies(time, rng, monkeypatch):
    """Steps whose active voxels differ (each stage checks every step it reads); particles leave the
    data of one step in the middle of a window, and NaN values sit in a step pchip reads."""
    times = np.arange(0.0, 4.0 + 1e-9, 0.5)
    f = unsteady.double_gyre()
    h, pad = 1 / 16, 3
    counts = (2 * 16 + 1 + 2 * pad, 16 + 1 + 2 * pad, 1 + 2 * pad)
    origin = (-pad * h, -pad * h, -pad * h)
    axes = [origin[a] + h * np.arange(counts[a]) for a in range(3)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    varied = []
    for k, t in enumerate(times):
        values = f.velocity(grid, float(t)).reshape(*counts, 3)
        active = np.ones(counts, bool)
        if k % 3 == 1:  # a hole that moves from step to step
            active[10 + k : 16 + k, 6:12, :] = False
        if k == 2:
            values[30, 12, 3] = np.nan  # read by the stages of several intervals (pchip: four steps)
        vol = vdbflow.Volume.from_dense(
            values, voxel_size=h, origin=origin, active=active, name="velocity", component_names=("u", "v", "w")
        )
        varied.append(vol)
    seeds = gyre_seeds(rng, 60)
    kw = dict(save_every=1, with_velocity=True, with_jacobian=True, time=time)
    runs = both_engines(
        monkeypatch,
        lambda: vdbflow.open_series(varied, times),
        seeds,
        0.0,
        3.8,
        0.07,
        "rk4",
        "linear",
        ftle_seeds=seeds[:10],
        **kw,
    )
    assert_same(runs, (0, 1, 2))


def test_steps_longer_than_a_window_go_stage_by_stage(gyre, rng, monkeypatch):
    """A step whose stages read more series steps than a window holds is integrated stage by stage,
    between windows in the kernels; the results are the same."""
    steps, times = gyre
    monkeypatch.setattr(series_kernels, "WINDOW_GRIDS", 5)
    seeds = gyre_seeds(rng, 20)
    kw = dict(save_every=1, with_velocity=True, with_jacobian=True, time="pchip")
    runs = both_engines(
        monkeypatch, lambda: vdbflow.open_series(steps, times), seeds, 0.0, 4.6, 0.4, "rk4", "linear", **kw
    )
    assert_same(runs, (0, 1))
    plan = series_kernels.SeriesPlan(vdbflow.open_series(steps, times), "pchip", 0.0, 4.6, 0.4, 12, (0, 0.5, 0.5, 1))
    kinds = {type(w).__name__ for w in plan.windows()}
    assert kinds == {"int", "Window"}


def test_the_windows_cover_every_step_once(gyre):
    steps, times = gyre
    series = vdbflow.open_series(steps, times)
    for time in ("linear", "pchip"):
        plan = series_kernels.SeriesPlan(series, time, 0.0, 5.0, 0.05, 100, (0.0, 0.5, 0.5, 1.0))
        windows = list(plan.windows())
        covered = [k for w in windows for k in range(w.first, w.first + w.steps)]
        assert covered == list(range(100))
        assert windows[-1].validate_end and not any(w.validate_end for w in windows[:-1])
        assert all(w.grids <= series_kernels.window_span(time) for w in windows)
        assert len(windows) <= 2 * (len(times) - 1)  # an interval's steps, and those straddling two


def test_none_time_and_one_step_series_stay_stage_by_stage(gyre):
    steps, times = gyre
    assert not sources.as_source(vdbflow.open_series(steps, times), "linear", "none").windowed
    assert not sources.as_source(vdbflow.open_series(steps[:1], times[:1]), "linear", "linear").windowed
    assert sources.as_source(vdbflow.open_series(steps, times), "linear", "pchip").windowed
