"""Layer 2, files: NanoVDB (.nvdb) read and write (:mod:`~vdbflow.io.nanovdb`, its byte layout in
:mod:`~vdbflow.io.nanovdb_format`), sparse volumes as xarray Datasets and Zarr stores
(:mod:`~vdbflow.io.volumes`) and dense NetCDF/Zarr fields made sparse (:mod:`~vdbflow.io.dense`).
Builds on :mod:`vdbflow.core` only."""
