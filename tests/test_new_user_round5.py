"""Frictions of issue 50's second new-user pass (the dry run, the job config's synthetic volume and points):
each against what the run itself makes or what the docs promise."""

from __future__ import annotations

import pytest
from test_run import base_config, write_config

from vdbflow import synthetic
from vdbflow.jobs.config.load import load_config
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
