"""Process-wide memory settings for a process that reads and analyzes runs (issue 26, bench/RESULTS.md).

The libraries' allocators keep freed memory for reuse, and on one large rank that retention, not the
live tables, is most of the peak RSS. ``lean_allocators`` asks each of them to hand freed pages back;
it acts only on libraries not loaded yet (the CLI calls it first), in this process and its workers.
``pyarrow_without_pandas`` stops pyarrow from importing pandas just to recognise pandas objects, and its
S3 filesystem plugin, which rankscope never uses.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

# Arrow's default pool (mimalloc) keeps whole segments; the system allocator returns what is freed.
# Polars' jemalloc keeps dirty pages for 10 s by default: purge them at once instead.
ALLOCATOR_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}
# glibc: blocks of 32 KiB and more are mapped and unmapped on their own (a freed column goes back to the
# OS; the default threshold grows with the first large free and then keeps such blocks in the heap). 32 KiB,
# not 128: ingest's decoded chunks otherwise leave the heap fragmented under the per-rank pass (-4 MB peak
# RSS on df_index_resolver, bench/RESULTS.md).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_BYTES = 32 << 10
_LEAN = False  # set by lean_allocators: only a process that asked for it (the CLI) is tuned


def lean_allocators() -> None:
    """Set ``ALLOCATOR_ENV`` (where the user has not) and glibc's mmap and trim thresholds.

    Takes effect for pyarrow and polars only if they load after this call; safe to call again."""
    global _LEAN
    _LEAN = True
    for k, v in ALLOCATOR_ENV.items():
        os.environ.setdefault(k, v)
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_BYTES)
        libc.mallopt(_M_TRIM_THRESHOLD, _MMAP_BYTES)
    except (OSError, AttributeError):  # not glibc (musl has no mallopt): nothing to tune
        pass


class _Absent:
    """A meta path finder that says the named modules are not installed (while it is on ``sys.meta_path``)."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name in self.names:
            raise ModuleNotFoundError(f"{name} left out by rankscope", name=name)


def pyarrow_without_pandas() -> None:
    """pyarrow imports pandas (~20-40 MB RSS) the first time it converts any Python value (``pa.array(list)``,
    ``pc.equal(col, 1)``), only to ask whether the value is a pandas object; rankscope never passes one.
    Its shim remembers that soft check's answer but imports pandas for real on a real pandas call
    (``to_pandas``, ``from_pandas``), so this changes nothing else. Likewise ``pyarrow.fs`` (imported by
    ``pyarrow.parquet``) loads its S3 filesystem, libarrow_s3 (~4 MB RSS), where it is built in; rankscope
    reads and writes Parquet on local paths only (remote runs go through fsspec), so pyarrow.fs is loaded
    without it (``pyarrow.fs.S3FileSystem`` then raises ImportError in this process). Nothing to do once
    pandas or pyarrow.fs is loaded, or in a process that did not call ``lean_allocators`` (a notebook keeps
    pyarrow as it is)."""
    if not _LEAN:
        return
    if "pyarrow.fs" not in sys.modules:
        with _hidden("pyarrow._s3fs"):
            import pyarrow.fs  # noqa: F401 - pyarrow/fs.py: S3FileSystem is optional there (ImportError)
    if "pandas" in sys.modules:
        return
    import pyarrow as pa

    with _hidden("pandas"):
        pa.scalar(0)  # pyarrow/pandas-shim.pxi: _check_import(raise_=False), once per process


@contextlib.contextmanager
def _hidden(*names: str) -> Iterator[None]:
    finder = _Absent(*names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
