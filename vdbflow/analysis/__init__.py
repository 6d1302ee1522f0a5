"""Layer 4, analysis of sampled Jacobians: flow quantities and the ``ds.vdbflow`` accessor
(:mod:`~vdbflow.analysis.flow`), plots (:mod:`~vdbflow.analysis.plot`) and fields on a volume's own
voxels (:mod:`~vdbflow.analysis.grid_fields`)."""
