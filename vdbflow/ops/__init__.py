"""Layer 3, operations on one volume: values and Jacobians (:mod:`~vdbflow.ops.sampling`), Hessians
(:mod:`~vdbflow.ops.hessian`), adjoints (:mod:`~vdbflow.ops.vjp`, :mod:`~vdbflow.ops.autograd`) and
stencil coverage (:mod:`~vdbflow.ops.coverage`).  Builds on :mod:`vdbflow.core` and
:mod:`vdbflow.devices`."""
