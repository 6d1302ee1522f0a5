"""Layer 7, batch jobs, by role.

- Config: the YAML schema (:mod:`~vdbflow.jobs.config`, which loads no runtime module), reading it
  (:mod:`~vdbflow.jobs.config_load`) and checking its files (:mod:`~vdbflow.jobs.checks`).
- Engine: planning (:mod:`~vdbflow.jobs.plan`), input files (:mod:`~vdbflow.jobs.inputs`), points
  (:mod:`~vdbflow.jobs.points`), clusters (:mod:`~vdbflow.jobs.clusters`), the executors that build a job's
  samples (:mod:`~vdbflow.jobs.executors`, :mod:`~vdbflow.jobs.chunks`, :mod:`~vdbflow.jobs.particles`), the
  writers of each output format (:mod:`~vdbflow.jobs.writers`), publishing (:mod:`~vdbflow.jobs.output`),
  progress (:mod:`~vdbflow.jobs.progress`) and running (:mod:`~vdbflow.jobs.runner`).
- Command line: ``vdbflow`` (:mod:`~vdbflow.jobs.cli`) with ``convert`` (:mod:`~vdbflow.jobs.convert_cli`),
  ``info`` (:mod:`~vdbflow.jobs.info_cli`) and ``build-cuda`` (:mod:`~vdbflow.jobs.gpu_cli`), printing
  through :mod:`~vdbflow.jobs.console`.
"""
