"""Process group and sequence number for collectives whose trace lacks them (gloo), from the recorder.

On gloo, Kineto writes each collective as a bare ``gloo:<op>`` span: no process group, no sequence
number, so collectives could only be matched across ranks by their order, and a sub-group's calls
were mixed with the default group's. When the job ran with the collective recorder
(``rankscope.profile(comms=True)``), every window's trace has a sibling
``window-NNNN.collectives.json.gz`` with the recorder's entries of that window: process group,
sequence number in that group, op and the time the entry was created (written by
``rankscope.collect.comms.window_json_gz``; Flight Recorder is on by default in torch 2.13, and
``import rankscope`` sizes its ring where an older torch leaves it off).

Each call is given an entry of the same op, each entry used once: where the trace says when the training
thread issued the call (its ``c10d::`` op), the first entry created from then on and before gloo started
it (the c10d op creates the entry; gloo may start a queued collective milliseconds later); otherwise the
entry created closest before the span's start (measured on torch 2.13 gloo: 10-200 µs before, same wall
clock), within ``SLACK_NS``. Point-to-point entries give the group only (their sequence
counts per pair, not per group).
"""
from __future__ import annotations

import bisect
import gzip
import json
import re
from typing import Any

import numpy as np
import pyarrow as pa

from rankscope.store import source

SUFFIX = ".collectives.json.gz"
# an entry this long before the span's start still counts: gloo starts a queued call late on a busy host
# (beyond 5 ms under a load of 19 on 2 cores: tests/e2e/test_comms_windows.py); sizes must agree as well
SLACK_NS = 50_000_000
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
    from rankscope.model.schema import normalize_op

    if table.num_rows == 0:
        return table, np.zeros(0, dtype=bool)
    groups: dict[str, Any] = doc["groups"] if isinstance(doc.get("groups"), dict) else {}
    by_op: dict[str, list[tuple[int, str, int, bool, int]]] = {}
    for e in doc["entries"]:
        if not (isinstance(e, list) and len(e) >= 5 and isinstance(e[4], int)):
            continue
        n = _first_size(e[5]) if len(e) > 5 else -1
        by_op.setdefault(family(normalize_op(str(e[3]))), []).append((e[4], str(e[0]), int(e[1]), bool(e[2]), n))
    for v in by_op.values():
        v.sort()
    times = {k: [c[0] for c in v] for k, v in by_op.items()}
    ops = [family(o) for o in table.column("op").to_pylist()]
    ts = table.column("ts").to_numpy()
    issued = table.column("issue_ts").to_numpy() if "issue_ts" in table.column_names else np.full(len(ts), -1)
    nel = table.column("nelems_in").to_numpy()
    pg = table.column("pg_name").to_pylist()
    ranks = table.column("pg_ranks").to_pylist()
    size = table.column("group_size").to_numpy().copy()
    seq = table.column("seq").to_numpy().copy()
    used: dict[str, set[int]] = {}
    matched = np.zeros(table.num_rows, dtype=bool)
    for i in np.argsort(np.where(issued >= 0, issued, ts), kind="stable").tolist():
        cands = by_op.get(ops[i])
        if not cands or seq[i] >= 0:
            continue
        taken = used.setdefault(ops[i], set())
        j = _entry(cands, times[ops[i]], taken, int(ts[i]), int(issued[i]), int(nel[i]))
        if j < 0:
            continue
        taken.add(j)
        t, name, s, p2p, _ = cands[j]
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


def _entry(cands: list[tuple[int, str, int, bool, int]], times: list[int], taken: set[int], start: int, issued: int,
           n: int) -> int:
    """The recorder entry of one call (index into ``cands``, sorted by creation time ``times``; -1: none), of
    the call's size ``n`` where both are known (groups interleave: another group's call may be created in
    between). Issued at a known time, the call's entry is the first such unused one created from then on (the
    c10d op creates it, in issue order) and before its span started; otherwise the last one created up to
    ``SLACK_NS`` before the span started."""
    def fits(j: int) -> bool:
        return j not in taken and (n < 0 or cands[j][4] < 0 or cands[j][4] == n)

    if issued >= 0:
        j = bisect.bisect_left(times, issued - EARLY_NS)
        while j < len(cands) and times[j] <= start + EARLY_NS:
            if fits(j):
                return j
            j += 1
        return -1
    j = bisect.bisect_right(times, start + EARLY_NS) - 1
    while j >= 0 and start - times[j] <= SLACK_NS:
        if fits(j):
            return j
        j -= 1
    return -1


def _first_size(sizes: Any) -> int:
    """Elements of the first shape in the recorder's "input_sizes" text ("[[16, 64], [4]]" -> 1024; -1 unknown)."""
    m = re.search(r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]", str(sizes))
    if not m:
        return -1 if "[]" not in str(sizes) else 1
    n = 1
    for p in m.group(1).split(","):
        n *= int(p)
    return n


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
