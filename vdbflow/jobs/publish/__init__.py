"""Where a job's result goes: the writers of each output format (:mod:`~vdbflow.jobs.publish.writers`), the
units they write and their manifest (:mod:`~vdbflow.jobs.publish.units`), resuming a partial result
(:mod:`~vdbflow.jobs.publish.resume`), publishing it atomically at its path (:mod:`~vdbflow.jobs.publish.output`,
at a URL :mod:`~vdbflow.jobs.publish.remote`), the checks of an output before a job runs
(:mod:`~vdbflow.jobs.publish.checks`) and what a finished result is (:mod:`~vdbflow.jobs.publish.results`)."""
