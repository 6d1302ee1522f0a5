"""Layer 5, one volume across a Dask cluster: the partition plan and router
(:mod:`~vdbflow.distribution.plan`) and the streaming forward and reverse graphs of
:class:`~vdbflow.distribution.volume.DistributedVolume` (:mod:`~vdbflow.distribution.volume`)."""
