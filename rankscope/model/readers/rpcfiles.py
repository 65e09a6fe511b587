"""RPC call records of a run (``ranks/<r>/rpc.<n>.json.gz``, written by ``rankscope.profile``) as tables.

``calls``: one row per call (rank, kind, name, fn, src, dst, dst_id, t_send, t_done, offset_ns,
error_ns, remote_ns, network_ns, status, gap, depth, events). ``events``: one row per remote event
(rank, call, worker, worker_id, name, ts, dur, self), on the caller's clock (the rank's own clock).
"""
from __future__ import annotations

import gzip
import json
from typing import Any

from rankscope.errors import TraceError
from rankscope.model.info import Kind, Problem, os_problem
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
    """One RPC file's document; ``TraceError`` (with its kind) on a file that is not one."""
    import zlib

    try:
        with source.open_binary(path) as f:
            raw = f.read()
    except OSError as exc:
        kind, why = os_problem(path, exc)
        raise TraceError(path, why, kind) from exc
    if not raw:
        raise TraceError(path, "empty file", Kind.EMPTY)
    try:
        data = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise TraceError(path, f"not a whole gzip file ({type(exc).__name__})", Kind.GZIP_DAMAGED) from exc
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise TraceError(path, f"not JSON ({type(exc).__name__})", Kind.NOT_JSON) from exc
    if not isinstance(doc, dict) or not str(doc.get("format", "")).startswith("rankscope.rpc/"):
        raise TraceError(path, "not a rankscope RPC file (no 'format': 'rankscope.rpc/...')", Kind.NOT_A_TRACE)
    return doc


# A call record's fields and the types rankscope.collect.rpc writes them as (bool is no int here).
_TYPES: dict[str, tuple[type, ...]] = {
    **{k: (str,) for k in ("kind", "name", "fn", "src", "dst", "status", "gap")},
    **{k: (int,) for k in ("dst_id", "t_send", "t_done", "offset_ns", "error_ns", "remote_ns", "network_ns", "depth")},
}
_EVENT_TYPES: dict[str, tuple[type, ...]] = {"worker": (str,), "name": (str,), "worker_id": (int,), "ts": (int,),
                                            "dur": (int,), "self": (int,)}


def _clean(d: dict[str, Any], types: dict[str, tuple[type, ...]]) -> tuple[dict[str, Any], int]:
    """``d`` with each known field of the wrong type (or an int beyond int64) set to None, and how many."""
    out, bad = dict(d), 0
    for k, t in types.items():
        v = d.get(k)
        if v is not None and (not isinstance(v, t) or isinstance(v, bool)
                              or (isinstance(v, int) and not -(1 << 63) <= v < (1 << 63))):
            out[k], bad = None, bad + 1
    return out, bad


def _calls(doc: dict[str, Any], rank: int | None) -> tuple[list[dict[str, Any]], int, int]:
    """The document's call records (events cleaned too), and how many records and fields were not usable."""
    got = doc.get("calls")
    items = got if isinstance(got, list) else []
    dropped = (0 if got is None or isinstance(got, list) else 1) + sum(1 for c in items if not isinstance(c, dict))
    calls, bad = [], 0
    for c in (c for c in items if isinstance(c, dict)):
        c, n = _clean(c, _TYPES)
        got_evs = c.get("events")
        evs: list[Any] = got_evs if isinstance(got_evs, list) else []
        bad += n + (got_evs is not None and not isinstance(got_evs, list))
        kept = []
        for e in evs:
            if not isinstance(e, dict):
                bad += 1
                continue
            e, m = _clean(e, _EVENT_TYPES)
            kept.append(e)
            bad += m
        calls.append({**c, "events": kept, "rank": rank})
    return calls, dropped, bad


def load(root: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(call records with their rank, problems) of every RPC file of the run: a damaged file, call records or
    fields of the wrong type (left out, counted) and what the collector could not capture, one ``Problem`` each."""
    calls: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in find(root):
        rank = L.rank_of(path[path.rfind(L.RANKS_DIR + "/"):]) if L.RANKS_DIR + "/" in path else None
        try:
            doc = read(path)
        except TraceError as err:
            problems.append(Problem(f"{path}: unreadable RPC file: {err.problem}", err.kind, path, rank))
            continue
        r = doc["rank"] if type(doc.get("rank")) is int and 0 <= doc["rank"] < (1 << 20) else rank
        got, dropped, bad = _calls(doc, r)
        calls += got
        if dropped:
            problems.append(Problem(f"{path}: {dropped} call records that are not objects were left out",
                                    Kind.MALFORMED_EVENTS, path, r, dropped))
        if bad:
            problems.append(Problem(f"{path}: {bad} fields of call records of the wrong type were read as unknown",
                                    Kind.BAD_FIELD, path, r, bad))
        gaps = doc.get("gaps")
        if gaps is not None and not isinstance(gaps, list):
            problems.append(Problem(f"{path}: 'gaps' is not a list; ignored", Kind.BAD_FIELD, path, r))
        for gap in gaps if isinstance(gaps, list) else ():
            problems.append(Problem(f"rank {r}: {str(gap)[:300]}", Kind.NOT_CAPTURED, path, r))
    return calls, problems


def tables(calls: list[dict[str, Any]]) -> tuple[Any, Any]:
    """(calls, events) as polars DataFrames."""
    import polars as pl

    rows = [{k: c.get(k) for k in CALL_COLS} for c in calls]  # fields checked by ``load``
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
