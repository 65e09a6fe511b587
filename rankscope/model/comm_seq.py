"""Process group and sequence number for collectives whose trace lacks them (gloo), from the recorder.

On gloo, Kineto writes each collective as a bare ``gloo:<op>`` span: no process group, no sequence
number, so collectives could only be matched across ranks by their order, and a sub-group's calls
were mixed with the default group's. When the job ran with the collective recorder
(``rankscope.profile(comms=True)``), every window's trace has a sibling
``window-NNNN.collectives.json.gz`` with the recorder's entries of that window: process group,
sequence number in that group, op and the time the entry was created (written by
``rankscope.collect.comms.window_json_gz``; Flight Recorder is on by default in torch 2.13, and
``import rankscope`` sizes its ring where an older torch leaves it off).

Each call is given the entry of the same op created closest before it was issued (its ``c10d::`` op
on the training thread; else its span's start) (measured on torch
2.13 gloo: the entry is created 10-200 µs before the span starts, same wall clock), within
``SLACK_NS``, each entry used once. Point-to-point entries give the group only (their sequence
counts per pair, not per group).
"""
from __future__ import annotations

import bisect
import gzip
import json
from typing import Any

import numpy as np
import pyarrow as pa

from rankscope.store import source

SUFFIX = ".collectives.json.gz"
SLACK_NS = 5_000_000  # an entry this long before the span's start still counts
EARLY_NS = 100_000  # or this long after it (two clocks read a few µs apart)
MAX_BYTES = 64 << 20


def sibling(trace_path: str) -> str | None:
    """``.../window-0003.collectives.json.gz`` for ``.../window-0003.pt.trace.json.gz``, if it exists."""
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json"):
        if trace_path.endswith(suffix):
            cand = trace_path[: -len(suffix)] + SUFFIX
            try:
                if source.is_url(cand):
                    fs, p = source.filesystem(cand)
                    return cand if fs.exists(p) else None
                import os

                return cand if os.path.isfile(source.local_path(cand)) else None
            except Exception:  # noqa: BLE001 - a sibling that cannot be checked is absent
                return None
    return None


def read(path: str) -> dict[str, Any] | None:
    """The window's recorder entries, or None when the file is not one (never raises)."""
    try:
        with source.open_binary(path) as fh:
            raw = gzip.GzipFile(fileobj=fh).read(MAX_BYTES + 1)
        doc = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except (OSError, EOFError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("entries"), list) else None


def assign(table: pa.Table, doc: dict[str, Any]) -> tuple[pa.Table, np.ndarray]:
    """``table`` (one rank's collectives) with pg_name / pg_ranks / group_size / seq filled from the
    recorder entries in ``doc``; returns it with the mask of the calls matched. A call is placed at the
    time its training thread issued it where the trace says (``issue_ts``): gloo may start a queued
    collective on its own thread milliseconds later."""
    from rankscope.model.comm_issue import family
    from rankscope.model.comms import normalize_op

    if table.num_rows == 0:
        return table, np.zeros(0, dtype=bool)
    groups: dict[str, Any] = doc["groups"] if isinstance(doc.get("groups"), dict) else {}
    by_op: dict[str, list[tuple[int, str, int, bool]]] = {}
    for e in doc["entries"]:
        if not (isinstance(e, list) and len(e) >= 5 and isinstance(e[4], int)):
            continue
        by_op.setdefault(family(normalize_op(str(e[3]))), []).append((e[4], str(e[0]), int(e[1]), bool(e[2])))
    for v in by_op.values():
        v.sort()
    ops = [family(o) for o in table.column("op").to_pylist()]
    ts = table.column("ts").to_numpy()
    if "issue_ts" in table.column_names:
        issued = table.column("issue_ts").to_numpy()
        ts = np.where(issued >= 0, issued, ts)
    pg = table.column("pg_name").to_pylist()
    ranks = table.column("pg_ranks").to_pylist()
    size = table.column("group_size").to_numpy().copy()
    seq = table.column("seq").to_numpy().copy()
    used: dict[str, set[int]] = {}
    matched = np.zeros(table.num_rows, dtype=bool)
    for i in np.argsort(ts, kind="stable").tolist():
        cands = by_op.get(ops[i])
        if not cands or seq[i] >= 0:
            continue
        j = bisect.bisect_right(cands, (int(ts[i]) + EARLY_NS, "\uffff", 1 << 62, True)) - 1
        taken = used.setdefault(ops[i], set())
        while j >= 0 and j in taken:
            j -= 1
        if j < 0 or ts[i] - cands[j][0] > SLACK_NS:
            continue
        taken.add(j)
        t, name, s, p2p = cands[j]
        matched[i] = True
        pg[i] = name
        members = _members(groups.get(name))
        if members:
            ranks[i], size[i] = members, len(members.split(","))
        if not p2p:
            seq[i] = s
    cols = {"pg_name": pa.array(pg).dictionary_encode(), "pg_ranks": pa.array(ranks).dictionary_encode(),
            "group_size": pa.array(size, pa.int32()), "seq": pa.array(seq, pa.int64())}
    for c, arr in cols.items():
        table = table.set_column(table.schema.get_field_index(c), table.schema.field(c), arr)
    return table, matched


def _members(g: Any) -> str:
    """"0,1,2" from the recorder's group record ({"ranks": "[0, 1, 2]"})."""
    if not isinstance(g, dict):
        return ""
    r = g.get("ranks")
    if isinstance(r, str):
        r = r.strip("[]").replace(" ", "")
        return r if all(p.isdigit() for p in r.split(",")) and r else ""
    if isinstance(r, list) and all(isinstance(x, int) for x in r):
        return ",".join(map(str, r))
    return ""
