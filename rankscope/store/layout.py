"""Run-directory paths (docs/contract.md), as plain relative POSIX paths.

Every path here is relative to the run root, so the same names serve a local spool, a
local directory, an s3:// prefix or an SFTP target. No I/O happens in this module.

Example::

    >>> trace_rel(3, "window-0002")
    'ranks/3/window-0002.pt.trace.json.gz'
"""
from __future__ import annotations

import posixpath
import re

RUN_FORMAT = "rankscope.run/1"
META_FORMAT = "rankscope.meta/1"
MANIFEST_FORMAT = "rankscope.manifest/1"
TRIGGER_FORMAT = "rankscope.trigger/1"
SPOOL_FORMAT = "rankscope.spool/1"

RUN_JSON = "run.json"
RANKS_DIR = "ranks"
CONTROL_DIR = "control"
TRACE_SUFFIX = ".pt.trace.json.gz"
# Temporary names start with a dot and carry this marker: readers skip them, and
# `upload --resume` removes the ones a killed rank left behind.
TMP_MARK = ".rstmp-"


def rank_dir(rank: int) -> str:
    """``ranks/<rank>``."""
    return f"{RANKS_DIR}/{int(rank)}"


def meta_rel(rank: int) -> str:
    """``ranks/<rank>/meta.json``."""
    return f"{rank_dir(rank)}/meta.json"


def manifest_rel(rank: int) -> str:
    """``ranks/<rank>/MANIFEST.json``: written last, its presence publishes the rank."""
    return f"{rank_dir(rank)}/MANIFEST.json"


def trace_rel(rank: int, name: str) -> str:
    """``ranks/<rank>/<name>.pt.trace.json.gz``."""
    return f"{rank_dir(rank)}/{name}{TRACE_SUFFIX}"


COLLECTIVES_SUFFIX = ".collectives.json.gz"  # a window's recorder entries, beside its trace


def rpc_rel(rank: int, index: int) -> str:
    """``ranks/<rank>/rpc.<NNNN>.json.gz``: the RPC calls of one profile (``rankscope.collect.rpc``)."""
    return f"{rank_dir(rank)}/rpc.{int(index):04d}.json.gz"


def is_rpc_name(name: str) -> bool:
    """True for the file name of :func:`rpc_rel`."""
    return bool(re.fullmatch(r"rpc\.\d+\.json\.gz", name))


def window_name(index: int) -> str:
    """File stem of the ``index``-th captured window of a rank."""
    return f"window-{int(index):04d}"


def trigger_rel(request_id: str) -> str:
    """``control/trigger-<id>.json``: an on-demand capture request."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", request_id):
        raise ValueError(f"bad trigger id {request_id!r}")
    return f"{CONTROL_DIR}/trigger-{request_id}.json"


def tmp_rel(rel: str, token: str) -> str:
    """Temporary sibling name for ``rel`` used during an atomic publish."""
    head, tail = posixpath.split(rel)
    return posixpath.join(head, f"{TMP_MARK}{token}-{tail}")


def is_tmp(rel: str) -> bool:
    """True for names made by :func:`tmp_rel`."""
    return posixpath.basename(rel).startswith(TMP_MARK)


def rank_of(rel: str) -> int | None:
    """The rank a ``ranks/<rank>/...`` path belongs to, else None."""
    parts = rel.split("/")
    if len(parts) >= 3 and parts[0] == RANKS_DIR and parts[1].isdigit():
        return int(parts[1])
    return None


def join(root: str, rel: str) -> str:
    """Join a run root (path or URL without protocol) and a relative path."""
    return posixpath.join(root.rstrip("/"), rel) if root else rel
