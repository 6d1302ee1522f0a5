"""The ``vdbflow`` command line: the command group with ``run``, ``clean`` and ``demo``
(:mod:`~vdbflow.jobs.cli.main`), ``convert`` (:mod:`~vdbflow.jobs.cli.convert`), ``info``
(:mod:`~vdbflow.jobs.cli.info`) and ``build-cuda`` (:mod:`~vdbflow.jobs.cli.gpu`), printing through
:mod:`~vdbflow.jobs.cli.console`."""
