"""Reading trace files where they are: a local path or any fsspec URL (s3://, gs://, file://, ...).

The analysis side's one door to storage. Readers call :func:`open_binary` and :func:`size` instead
of ``open`` / ``os.stat``, so a rank's trace on object storage is streamed in ranged reads (8 MiB
blocks) by the worker that parses it, never downloaded whole first. :func:`version` names the
object's version (size + ETag or mtime) for the cache key, so a second analysis of an unchanged
run reads nothing but listings.

Credentials and endpoints come from the usual places (``AWS_*`` variables, ``AWS_ENDPOINT_URL``,
``FSSPEC_S3_ENDPOINT_URL``, config files), as for ``rankscope.profile(run="s3://...")``.
Each process (pool worker, Dask worker) opens its own filesystem objects, once per protocol.
"""
from __future__ import annotations

import os
import posixpath
from typing import IO, Any

BLOCK = 8 << 20  # ranged-read size: few requests per trace, bounded memory per open file
_FS: dict[str, Any] = {}
# A forked pool worker must open its own: s3fs / aiohttp sessions are not fork-safe.
os.register_at_fork(after_in_child=_FS.clear)


def is_url(path: object) -> bool:
    """True for a URL with a protocol other than ``file://`` (those are read through fsspec)."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def local_path(path: str) -> str:
    """``file://`` URLs as plain paths; anything else unchanged."""
    return path[len("file://"):] if isinstance(path, str) and path.startswith("file://") else path


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) for ``url``; one filesystem per protocol and process."""
    from rankscope.store.fs import open_target

    proto = url.split("://", 1)[0]
    if proto not in _FS:
        _FS[proto] = open_target(url).fs
    fs = _FS[proto]
    return fs, fs._strip_protocol(url)


def open_binary(path: str) -> IO[bytes]:
    """A binary file object, local or remote (ranged reads, seekable)."""
    if not is_url(path):
        return open(local_path(path), "rb")
    fs, p = filesystem(path)
    return fs.open(p, "rb", block_size=BLOCK, cache_type="readahead")


def size(path: str) -> int:
    if not is_url(path):
        return os.stat(local_path(path)).st_size
    fs, p = filesystem(path)
    return int(fs.size(p))


def version(path: str, info: dict[str, Any] | None = None) -> str:
    """What changes when the file changes: size and mtime (local), size and ETag / mtime (object)."""
    if not is_url(path):
        st = os.stat(local_path(path))
        return f"{st.st_size}:{st.st_mtime_ns}"
    if info is None:
        fs, p = filesystem(path)
        info = fs.info(p)
    tag = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
    return f"{info.get('size')}:{str(tag).strip(chr(34))}"


def read_text(path: str) -> str:
    with open_binary(path) as fh:
        return fh.read().decode("utf-8")


def join(root: str, *parts: str) -> str:
    return posixpath.join(root, *parts) if is_url(root) else os.path.join(root, *parts)
