"""Layer 4, synthetic flows with analytic velocities and Jacobians, for tests and demos: steady
fields stored as sparse volumes (:mod:`~vdbflow.synthetic.steady`, re-exported here) and unsteady
ones written as series of .nvdb files (:mod:`~vdbflow.synthetic.unsteady`)."""

from vdbflow.synthetic.steady import (
    FlowField,
    abc_flow,
    burgers_vortex,
    flow_volume,
    linear_field,
    make_field,
    shell_counts,
    shell_interior,
    shell_voxels,
    taylor_green,
)

__all__ = [
    "FlowField",
    "abc_flow",
    "burgers_vortex",
    "flow_volume",
    "linear_field",
    "make_field",
    "shell_counts",
    "shell_interior",
    "shell_voxels",
    "taylor_green",
]
