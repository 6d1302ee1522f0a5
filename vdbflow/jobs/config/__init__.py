"""A job's config: the YAML schema (:mod:`~vdbflow.jobs.config.model`, which loads no runtime module) and its
parts (:mod:`~vdbflow.jobs.config.base`, :mod:`~vdbflow.jobs.config.inputs`, :mod:`~vdbflow.jobs.config.output`,
:mod:`~vdbflow.jobs.config.reduce`), reading it (:mod:`~vdbflow.jobs.config.load`) and checking its files
(:mod:`~vdbflow.jobs.config.checks`)."""
