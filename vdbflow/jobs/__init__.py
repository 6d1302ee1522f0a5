"""Layer 7, batch jobs: the YAML schema (:mod:`~vdbflow.jobs.config`), point generators
(:mod:`~vdbflow.jobs.points`), clusters (:mod:`~vdbflow.jobs.clusters`), outputs
(:mod:`~vdbflow.jobs.output`), planning and running (:mod:`~vdbflow.jobs.runner`) and the
``vdbflow`` command (:mod:`~vdbflow.jobs.cli`)."""
