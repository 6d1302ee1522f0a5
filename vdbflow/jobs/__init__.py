"""Layer 7, batch jobs, in rooms.

- :mod:`~vdbflow.jobs.config`: the YAML schema (:mod:`~vdbflow.jobs.config.model`, which loads no runtime
  module), reading it (:mod:`~vdbflow.jobs.config.load`) and checking its files (:mod:`~vdbflow.jobs.config.checks`).
- Engine: planning (:mod:`~vdbflow.jobs.plan`), input files (:mod:`~vdbflow.jobs.inputs`), points
  (:mod:`~vdbflow.jobs.points`), clusters (:mod:`~vdbflow.jobs.clusters`), the executors that build a job's
  samples (:mod:`~vdbflow.jobs.executors`, :mod:`~vdbflow.jobs.chunks`, :mod:`~vdbflow.jobs.particles`),
  progress (:mod:`~vdbflow.jobs.progress`) and running (:mod:`~vdbflow.jobs.runner`).
- :mod:`~vdbflow.jobs.publish`: the writers of each output format, resuming, and publishing the result.
- :mod:`~vdbflow.jobs.cli`: the ``vdbflow`` command line.
"""
