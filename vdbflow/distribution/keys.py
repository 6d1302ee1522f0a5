"""The task-key prefixes of the distributed graphs, one name each: the graphs build their keys from these
(``f"{ROUTE}-{token}-{wave}"``), the scheduler plugin (:mod:`vdbflow.distribution.placement`) places
tasks by them, and a job's progress report (:mod:`vdbflow.jobs.progress`) groups worker time by them."""

from __future__ import annotations

PARTITION = "vdbflow-partition"  # a partition: own leaves and halo, on one worker
# the forward graph (distribution.forward)
ROUTE = "vdbflow-route"  # a wave's points routed to the partitions
SAMPLE = "vdbflow-sample"  # one partition's piece of a wave, sampled
REORDER = "vdbflow-reorder"  # a wave's results put back in input order
OUTPUTS = {"value": "vdbflow-values", "jacobian": "vdbflow-jacobian", "hessian": "vdbflow-hessian"}
DERIVED = "vdbflow-derived"  # a derived quantity's array (its name follows: vdbflow-derived-q_criterion-...)
# reverse mode (distribution.reverse)
ROUTE_VJP = "vdbflow-route-vjp"
VJP = "vdbflow-vjp"
FOLD = "vdbflow-fold"
VJP_POINTS = "vdbflow-vjp-points"
