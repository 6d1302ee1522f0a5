"""Layer 7, batch jobs: the YAML schema (:mod:`~vdbflow.jobs.config`), reading it
(:mod:`~vdbflow.jobs.config_load`) and checking its files (:mod:`~vdbflow.jobs.checks`), point generators
(:mod:`~vdbflow.jobs.points`), clusters (:mod:`~vdbflow.jobs.clusters`), outputs
(:mod:`~vdbflow.jobs.output`), planning (:mod:`~vdbflow.jobs.plan`), input files
(:mod:`~vdbflow.jobs.inputs`), progress (:mod:`~vdbflow.jobs.progress`), running
(:mod:`~vdbflow.jobs.runner`) and the ``vdbflow`` command (:mod:`~vdbflow.jobs.cli`)."""
