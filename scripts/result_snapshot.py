"""Results of a fixed set of sampling calls, saved to compare two versions of vdbflow bit for bit.

Every mode, every value type, both layouts (per-leaf and index), a rotated transform, world and
index spaces, Hessians, adjoints, grid gradients, coverage, particles, a series, a distributed
volume (a two-worker LocalCluster) and a distributed series: a restructure of the code must leave
every array here unchanged, byte for byte.

    python scripts/result_snapshot.py save before.npz      # on the old version
    python scripts/result_snapshot.py compare before.npz   # on the new one: exit 1 on any difference
    python scripts/result_snapshot.py compare before.npz --local   # without the cluster cases
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

import vdbflow
import vdbflow.ops.sampling  # noqa: F401 - vdbflow.ops.* below

FLOAT_TYPES = ("float32", "float64", "vec3f", "vec3d", "vec4f", "vec4d")
INT_TYPES = ("int32", "int64", "uint32")


def _volume(type_name: str, index_layout: bool, rotated: bool, scale: int = 1) -> vdbflow.Volume:
    vt = vdbflow.VALUE_TYPES[type_name]
    rng = np.random.default_rng(7)
    ijk = rng.integers(-20, 21, size=(4000, 3))
    ijk = np.unique(ijk, axis=0)
    shape = (len(ijk),) if vt.components == 1 else (len(ijk), vt.components)
    if vt.is_float:
        values = (scale * rng.normal(size=shape)).astype(vt.dtype)
    else:
        values = rng.integers(0, 1000, size=shape).astype(vt.dtype)
    transform = None
    if rotated:
        a = 0.3
        m = np.array([[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.1], [0.0, 0.0, 1.5]]) * 0.5
        transform = np.eye(4)
        transform[:3, :3] = m
        transform[:3, 3] = (1.0, -2.0, 0.5)
    vol = vdbflow.Volume.from_voxels(ijk, values, background=1, transform=transform)
    if index_layout:
        vol = vol.topology.with_data(vol.active_values(), background=vol.background)
    return vol


def _points(n: int = 3000, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pts = rng.uniform(-24, 24, size=(n, 3))
    pts[:50] = np.round(pts[:50])  # integer planes
    return pts


def _cases(local: bool) -> Iterator[tuple[str, Any]]:
    pts = _points()
    modes = list(vdbflow.ops.sampling.MODES)
    for type_name in FLOAT_TYPES + INT_TYPES:
        for index_layout in (False, True):
            for rotated in (False, True):
                vol = _volume(type_name, index_layout, rotated)
                tag = f"{type_name}-{'index' if index_layout else 'leaf'}-{'rot' if rotated else 'eye'}"
                for mode in modes if vol.value_type.is_float else ["closest"]:
                    for space, jspace in (("index", "index"), ("world", "world"), ("world", "index")):
                        v, j = vdbflow.sample_grad_arrays(vol, pts, mode, space=space, jacobian_space=jspace)
                        yield f"grad/{tag}/{mode}/{space}-{jspace}/values", v
                        yield f"grad/{tag}/{mode}/{space}-{jspace}/jacobian", j
                if not vol.value_type.is_float:
                    continue
                ds = vol.sample_grad(pts[:200], mode="lag4", space="world")
                for name, var in ds.variables.items():
                    if var.dtype.kind in "fiu":
                        yield f"dataset/{tag}/{name}", var.values
                for mode in ("linear", "lag4", "m2q8"):
                    v, j, h = vdbflow.sample_hessian_arrays(vol, pts, mode, space="world", jacobian_space="world")
                    yield f"hessian/{tag}/{mode}/values", v
                    yield f"hessian/{tag}/{mode}/jacobian", j
                    yield f"hessian/{tag}/{mode}/hessian", h
                if not index_layout:
                    inside = vol.stencil_inside(pts, mode="lag4", space="index")
                    yield f"coverage/{tag}", inside
                if vol.components in (1, 3):
                    grad = vdbflow.gradient_field(vol, "fd4")
                    yield f"gradient_field/{tag}", grad.active_values()
                cvol = vol.contiguous()
                rng = np.random.default_rng(11)
                C = vol.components
                vshape = (len(pts),) if C == 1 else (len(pts), C)
                adj_v = rng.normal(size=vshape).astype(vol.value_type.jacobian_dtype)
                adj_j = rng.normal(size=vshape + (3,)).astype(vol.value_type.jacobian_dtype)
                for mode in ("linear", "closest"):
                    vjp = vdbflow.sample_grad_vjp(cvol, pts, adj_v, adj_j, mode, space="world")
                    for k in ("voxel_data", "tile_values", "background", "points"):
                        yield f"vjp/{tag}/{mode}/{k}", getattr(vjp, k)

    vel = _volume("vec3f", False, True)
    seeds = vel.transform.apply(_points(300, 5) * 0.5)
    for method in ("euler", "rk2", "rk4"):
        ds = vdbflow.advect(vel, seeds, 0.0, 2.0, 0.1, method, with_velocity=True, with_jacobian=True, with_ftle=True)
        for name, var in ds.variables.items():
            if var.dtype.kind in "fiu":
                yield f"advect/{method}/{name}", var.values
    ds = vdbflow.ftle(vel, seeds, 0.0, 1.0, 0.1)
    for name, var in ds.variables.items():
        if var.dtype.kind in "fiu":
            yield f"ftle/{name}", var.values

    steps = [_volume("vec3f", False, False, scale=k + 1) for k in range(3)]  # three steps, one topology
    series = vdbflow.VolumeSeries(steps, [0.0, 1.0, 2.5])
    t = np.linspace(0.0, 2.5, len(pts))
    for time in ("none", "linear", "pchip"):
        v, j = series.sample_grad_arrays(pts, t, "linear", time, space="index")
        yield f"series/{time}/values", v
        yield f"series/{time}/jacobian", j

    if local:
        return
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            for type_name in ("float32", "vec3d", "int32"):
                vol = _volume(type_name, False, True)
                mode = "lag4" if vol.value_type.is_float else "closest"
                halo = vdbflow.ops.sampling.STENCIL_RADIUS[mode]
                with vdbflow.distribute(vol, client, partitions=3, halo=halo) as dv:
                    ds = dv.sample_grad(pts, mode=mode).compute()
                    for name, var in ds.variables.items():
                        if var.dtype.kind in "fiu":
                            yield f"distributed/{type_name}/{name}", var.values
            dseries = series.distribute(client, partitions=2, halo=1)
            ds = dseries.sample_grad(pts, t, mode="linear", space="index").compute()
            for name, var in ds.variables.items():
                if var.dtype.kind in "fiu":
                    yield f"distributed_series/{name}", var.values
            dseries.close()
            yield from _job_cases(client)


JOB_OUTPUTS = ["value", "jacobian", "divergence", "vorticity", "vorticity_magnitude", "q_criterion", "inside"]


def _job_cases(client: Any) -> Iterator[tuple[str, Any]]:
    """The demo job (synthetic Taylor-Green shell): random points and a plane, each with the volume
    partitioned (``partitions: 2``) and as the job chooses (one pass per chunk where it fits)."""
    import tempfile
    from pathlib import Path

    import xarray as xr

    with tempfile.TemporaryDirectory() as tmp:
        base = {
            "volume": {"synthetic": {"field": "taylor_green", "resolution": 48, "write": f"{tmp}/tg.nvdb"}},
            "sampling": {"mode": "linear", "outputs": JOB_OUTPUTS},
            "cluster": {"kind": "local"},
        }
        points = {
            "random": {"kind": "random", "count": 120_000, "inside": "voxels", "space": "world", "chunk": 50_000},
            "plane": {
                "kind": "plane",
                "origin": [0.5, 0.5, 3.0],
                "u": [5.0, 0.0, 0.0],
                "v": [0.0, 5.0, 0.0],
                "resolution": [200, 150],
                "space": "world",
                "chunk": 40_000,
            },
        }
        for kind, spec in points.items():
            for label, partitions in (("partitioned", 2), ("auto", None)):
                out = Path(tmp) / f"{kind}-{label}.zarr"
                config = {**base, "points": spec, "output": {"path": str(out)}}
                if partitions:
                    config["partitions"] = partitions
                vdbflow.run(config, client=client)
                with xr.open_zarr(out) as ds:
                    for name, var in ds.variables.items():
                        if var.dtype.kind in "fiub":
                            yield f"job/{kind}/{label}/{name}", var.values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("save", "compare"))
    parser.add_argument("path")
    parser.add_argument("--local", action="store_true", help="skip the distributed cases")
    args = parser.parse_args(argv)
    results = {k: np.asarray(v) for k, v in _cases(args.local) if v is not None}
    if args.action == "save":
        np.savez(args.path, **results)
        print(f"saved {len(results)} arrays to {args.path}")
        return 0
    before = np.load(args.path)
    differ = []
    for k, v in results.items():
        if k not in before.files:
            differ.append(f"{k}: new (not in {args.path})")
        elif before[k].dtype != v.dtype or before[k].shape != v.shape or before[k].tobytes() != v.tobytes():
            differ.append(f"{k}: differs")
    cluster_cases = ("distributed", "job/")  # run only with the cluster (without --local)
    missing = [k for k in before.files if k not in results and not (args.local and k.startswith(cluster_cases))]
    differ += [f"{k}: missing" for k in missing]
    print(f"compared {len(results)} arrays: {len(differ)} differ")
    for line in differ[:50]:
        print("  " + line)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
