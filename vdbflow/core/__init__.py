"""Layer 1, the data: the tree's conventions (:mod:`~vdbflow.core.tree`), transforms, value types,
units, :class:`~vdbflow.core.volume.Topology` and :class:`~vdbflow.core.volume.Volume`, and the
kernels' own facts (:mod:`~vdbflow.core.kernel`).  Imports nothing of vdbflow but ``errors`` and the
compiled extension."""
