"""Layer 6, time: series of volumes with temporal interpolation (:mod:`~vdbflow.temporal.series`)
and Lagrangian particles and FTLE (:mod:`~vdbflow.temporal.particles`)."""
