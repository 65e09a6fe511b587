"""RPC call records of a run (``ranks/<r>/rpc.<n>.json.gz``, written by ``rankscope.profile``) as tables.

``calls``: one row per call (rank, kind, name, fn, src, dst, dst_id, t_send, t_done, offset_ns,
error_ns, remote_ns, network_ns, status, gap, depth, events). ``events``: one row per remote event
(rank, call, worker, worker_id, name, ts, dur, self), on the caller's clock (the rank's own clock).
"""
from __future__ import annotations

import gzip
import json
from typing import Any

from rankscope.store import layout as L
from rankscope.store import source

CALL_COLS = ("rank", "kind", "name", "fn", "src", "dst", "dst_id", "t_send", "t_done", "offset_ns", "error_ns",
             "remote_ns", "network_ns", "status", "gap", "depth")


def find(root: str) -> list[str]:
    """The RPC files under a run directory (local path or URL), in rank and file order."""
    root = str(root)
    if source.is_url(root):
        fs, base = source.filesystem(root)
        proto = root.split("://", 1)[0]
        names = [n for n in fs.find(f"{base.rstrip('/')}/{L.RANKS_DIR}") if L.is_rpc_name(n.rsplit("/", 1)[-1])]
        return sorted(f"{proto}://{n}" for n in names)
    from pathlib import Path

    ranks = Path(source.local_path(root)) / L.RANKS_DIR
    if not ranks.is_dir():
        return []
    return sorted(str(p) for p in ranks.glob("*/rpc.*.json.gz") if L.is_rpc_name(p.name))


def read(path: str) -> dict[str, Any]:
    """One RPC file's document (raises OSError / ValueError on a damaged file)."""
    with source.open_binary(path) as f:
        doc = json.loads(gzip.decompress(f.read()))
    if not isinstance(doc, dict) or not str(doc.get("format", "")).startswith("rankscope.rpc/"):
        raise ValueError(f"{path}: not a rankscope RPC file")
    return doc


def load(root: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(call records with their rank, problems) of every RPC file of the run; a damaged file is a problem."""
    calls: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in find(root):
        rank = L.rank_of(path[path.rfind(L.RANKS_DIR + "/"):]) if L.RANKS_DIR + "/" in path else None
        try:
            doc = read(path)
        except (OSError, ValueError, EOFError) as exc:
            problems.append(f"{path}: unreadable RPC file ({type(exc).__name__})")
            continue
        r = doc.get("rank") if isinstance(doc.get("rank"), int) else rank
        for gap in doc.get("gaps") or ():
            problems.append(f"rank {r}: {gap}")
        calls += [{**c, "rank": r} for c in doc.get("calls") or () if isinstance(c, dict)]
    return calls, problems


def tables(calls: list[dict[str, Any]]) -> tuple[Any, Any]:
    """(calls, events) as polars DataFrames."""
    import polars as pl

    rows = [{k: c.get(k) for k in CALL_COLS} for c in calls]
    schema = {"rank": pl.Int64, "kind": pl.Utf8, "name": pl.Utf8, "fn": pl.Utf8, "src": pl.Utf8, "dst": pl.Utf8,
              "dst_id": pl.Int64, "t_send": pl.Int64, "t_done": pl.Int64, "offset_ns": pl.Int64,
              "error_ns": pl.Int64, "remote_ns": pl.Int64, "network_ns": pl.Int64, "status": pl.Utf8,
              "gap": pl.Utf8, "depth": pl.Int64}
    cdf = pl.DataFrame(rows, schema=schema)
    evs = [{"rank": c.get("rank"), "call": c.get("name"), "worker": e.get("worker"), "worker_id": e.get("worker_id"),
            "name": e.get("name"), "ts": e.get("ts"), "dur": e.get("dur"), "self": e.get("self", e.get("dur"))}
           for c in calls for e in c.get("events") or ()]
    edf = pl.DataFrame(evs, schema={"rank": pl.Int64, "call": pl.Utf8, "worker": pl.Utf8, "worker_id": pl.Int64,
                                    "name": pl.Utf8, "ts": pl.Int64, "dur": pl.Int64, "self": pl.Int64})
    return cdf, edf
