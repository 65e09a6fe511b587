"""Raw files -> columnar per-rank tables (Arrow) and a ``Run`` over all ranks."""
