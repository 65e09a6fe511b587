"""Where per-rank work runs: this process, a local process pool or a Dask cluster (``executors``). The
model (ingest) and the analyses (the per-rank pass) both use it; it imports nothing else of rankscope but
``errors``."""
