"""Raw files -> columnar per-rank tables (Arrow) and a ``Run`` over all ranks."""
import os

# Arrow's default allocator (mimalloc) keeps freed buffers for reuse, and Arrow's C++ code (Parquet
# reader/writer internals) allocates from it whatever pool Python selects: ~20 MB more peak RSS per
# rank-sized table here, with no speed difference measured (bench/RESULTS.md, ingest). Ask for the
# system allocator unless the user chose one; it takes effect only if pyarrow has not allocated yet.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
