"""Layer 2, files: NanoVDB (.nvdb) read and write (:mod:`~vdbflow.io.nanovdb`, its byte layout in
:mod:`~vdbflow.io.nanovdb.format`), sparse volumes as xarray Datasets and Zarr stores
(:mod:`~vdbflow.io.volumes`, read by the bounded format 2 reader :mod:`~vdbflow.io.zarr_v2`) and dense
NetCDF/Zarr fields made sparse (:mod:`~vdbflow.io.dense`); JSON of untrusted files through
:mod:`~vdbflow.io.bounded_json`. Builds on :mod:`vdbflow.core` only."""
