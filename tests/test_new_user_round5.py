"""Frictions of issue 50's second new-user pass (the dry run, the job config's synthetic volume and points):
each against what the run itself makes or what the docs promise."""

from __future__ import annotations

import pytest
from test_run import base_config, write_config

from vdbflow import synthetic
from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.config.model import ConfigError
from vdbflow.jobs.plan import plan_job


@pytest.mark.parametrize(
    ("resolution", "shell"),
    [(64, (0.0, 0.9)), (24, (0.0, 0.9)), (17, (0.35, 0.5)), (20, (0.5, 0.51)), (33, (0.2, 2.0)), (9, (0.0, 0.01))],
)
def test_the_plan_counts_the_synthetic_volumes_voxels_as_the_run_makes_them(tmp_path, resolution, shell):
    """Row 2: a 64^3 ABC with shell [0, 0.9] was planned at 800,490 active voxels (a sphere's volume, not
    clipped to the box); the volume the run makes has 262,144 = 64^3.  The plan counts them exactly now."""
    cfg = base_config(tmp_path)
    cfg["volume"] = {"synthetic": {"field": "abc", "resolution": resolution, "shell": list(shell)}}
    cfg["points"] = {"kind": "voxels"}
    plan = plan_job(load_config(write_config(tmp_path / "job.yaml", cfg)), dry_run=True)
    made = synthetic.flow_volume(synthetic.abc_flow(), resolution, inner=shell[0], outer=shell[1])
    assert (plan.grids[0].active_voxels, plan.grids[0].leaves) == (made.active_voxel_count, made.leaf_count)
    assert plan.point_count == made.active_voxel_count <= resolution**3  # kind: voxels samples each one


def test_a_key_of_another_points_kind_names_the_kinds_that_take_it(tmp_path):
    """Row 3: `--set points.kind=random` on a plane config said "points.origin: unknown key; did you mean
    'origin'?"; it names the kind that takes the key now, and what this kind takes."""
    cfg = base_config(tmp_path)
    cfg["points"] = {"kind": "plane", "origin": [0, 0, 0], "u": [1, 0, 0], "v": [0, 1, 0], "resolution": [4, 4]}
    path = write_config(tmp_path / "job.yaml", cfg)
    with pytest.raises(ConfigError) as err:
        load_config(path, ["points.kind=random", "points.count=10", "points.sede=3"])
    lines = {line.split(" (")[0].strip(): line for line in str(err.value).splitlines()[1:]}
    assert set(lines) == {"points.origin", "points.u", "points.v", "points.resolution", "points.sede"}
    assert (
        "'origin' is a key of points.kind: plane, not of kind: random (which takes 'bounds'" in lines["points.origin"]
    )
    assert "did you mean 'origin'" not in str(err.value)
    assert lines["points.sede"].endswith("unknown key; did you mean 'seed'?")  # random's own key first
    with pytest.raises(ConfigError, match=r"did you mean 'count' \(a key of points.kind: random \| line\)"):
        load_config(path, ["points.cont=10"])
    with pytest.raises(
        ConfigError,
        match=r"points.origin \(\S+job.yaml, line \d+\): .origin. is a key of points.kind: plane, not of kind: voxels",
    ):
        load_config(path, ["points.kind=voxels"])  # voxels is a kind too: the location has no 'voxels' in it
