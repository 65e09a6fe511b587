"""Chrome / Perfetto trace of a profile with RPC: the caller's events, its RPC spans, and one process
lane per remote worker whose events sit inside the caller's span of the call that ran them.

Timestamps are µs since the earliest event (``metadata.rankscope.base_ns``: its ns since the epoch),
on the caller's clock; each remote lane's name says the clock offset estimated for it.
"""
from __future__ import annotations

import json
from typing import Any


def _pack(intervals: list[tuple[int, int]]) -> list[int]:
    """Lane per interval (sorted by start) so that intervals on one lane never overlap."""
    ends: list[int] = []
    out = []
    for start, end in intervals:
        lane = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        ends[lane] = end
        out.append(lane)
    return out


def trace(local: list[dict[str, Any]], calls: list[dict[str, Any]], local_name: str, local_id: int) -> dict[str, Any]:
    """The trace document: ``local`` events ({name, ts, dur, tid} in ns) and the call records."""
    stamps = [e["ts"] for e in local] + [c["t_send"] for c in calls] + \
        [e["ts"] for c in calls for e in c.get("events") or ()]
    base = min(stamps) if stamps else 0
    us = lambda ns: round((ns - base) / 1e3, 3)  # noqa: E731
    pid = local_id + 1
    ev: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                 "args": {"name": f"{local_name} (local, id {local_id})"}},
                                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                 "args": {"sort_index": 0}}]
    ev += [{"ph": "X", "name": e["name"], "cat": "cpu_op", "ts": us(e["ts"]), "dur": round(e["dur"] / 1e3, 3),
            "pid": pid, "tid": e.get("tid", 0)} for e in local if e["name"] != "[memory]"]
    done = sorted((c for c in calls if c.get("events") is not None), key=lambda c: c["t_send"])
    for c, lane in zip(done, _pack([(c["t_send"], c["t_done"]) for c in done])):
        ev.append({"ph": "X", "name": c["name"], "cat": "rpc", "ts": us(c["t_send"]),
                   "dur": round((c["t_done"] - c["t_send"]) / 1e3, 3), "pid": pid, "tid": f"rpc calls {lane}",
                   "args": {k: c.get(k) for k in ("dst", "status", "gap", "offset_ns", "error_ns", "remote_ns",
                                                   "network_ns", "depth")}})
    workers = sorted({(c["dst_id"], c["dst"]) for c in done if c.get("events")})
    for wid, name in workers:
        mine = [c for c in done if c.get("dst_id") == wid and c.get("events")]
        offs = [c["offset_ns"] for c in mine if "offset_ns" in c]
        off = f", clock {sorted(offs)[len(offs) // 2] / 1e6:+.3f} ms" if offs else ""
        ev.append({"ph": "M", "name": "process_name", "pid": wid + 1, "tid": 0,
                   "args": {"name": f"{name} (remote, id {wid}{off})"}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": wid + 1, "tid": 0, "args": {"sort_index": wid + 1}})
        for c, lane in zip(mine, _pack([(c["t_send"], c["t_done"]) for c in mine])):
            ev += [{"ph": "X", "name": e["name"], "cat": "remote_op", "ts": us(e["ts"]),
                    "dur": round(e["dur"] / 1e3, 3), "pid": wid + 1, "tid": f"from {c.get('src', '?')} {lane}",
                    "args": {"call": c["name"], "worker": e.get("worker"), "node_id": e.get("worker_id"),
                             "offset_error_ns": c.get("error_ns")}}
                   for e in c["events"] if e["name"] != "[memory]"]
    return {"displayTimeUnit": "ns", "traceEvents": ev,
            "metadata": {"rankscope": {"base_ns": base, "rpc_calls": len(calls)}}}


def write(path: str, doc: dict[str, Any]) -> None:
    import gzip

    data = json.dumps(doc).encode()
    with open(path, "wb") as f:
        f.write(gzip.compress(data, 3) if path.endswith(".gz") else data)
