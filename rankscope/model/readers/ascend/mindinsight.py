"""The MindInsight-era MindSpore cluster layout (MindInsight r1.3 and earlier)::

    RUN/hccl.json                          rank table (any *.json at the top; MindInsight takes the first)
                                           {"server_list": [{"server_id": <host IP>,
                                             "device": [{"device_id", "rank_id", "device_ip"}]}]}
    RUN/host_ips_mapping.txt               one "<host IP> <host id>" per line
    RUN/cluster_profiler/<host id>/profiler/step_trace_raw_<device id>_detail_time.csv, ...

Rules from the readers that own it: MindInsight's ``ClusterAnalyser``
(mindinsight/profiler/analyser/cluster_analyser.py) and MindSpore's
docs/sample_code/transform_cluster_profiler_data.py: a rank is (host id, device id) through the
rank table's server_id joined with the mapping's IP; a host's files are named by device id.

Host IPs are used for that join only and then dropped: a rank's host is "host-<host id>" and no
IP reaches a table, a problem line or the cache (a server the mapping does not list is named by its
position in the rank table). Per rank, ``step_trace_raw_<device>_detail_time.csv`` (MindSpore's
step_trace_parser.py: step_num, start_point, end_point, ..., then per communication op
``stream_<s>_<i>_<op>`` with ``_start_point`` / ``_end_point``; device cycle counts of 10 ns; a last
row "-" holds averages) gives the ``steps``, the ``collectives`` and, as ``events``, the device spans
it measures (forward+backward as compute, each communication op on its stream). Clocks are device
cycle counters, not epoch time: ranks on different hosts are not aligned by them.

Not read yet: ascend_timeline_display_<device>.json, hccl_raw_<device>.csv, flops / memory summaries.
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from rankscope.model import schema
from rankscope.model.info import Kind, Problem

MAPPING = "host_ips_mapping.txt"
CLUSTER = "cluster_profiler"
STEP_TRACE = "step_trace_raw_{}_detail_time.csv"
_STEP_RE = re.compile(r"^step_trace_raw_(\d{1,6})_detail_time\.csv$")
_COMM_RE = re.compile(r"^stream_(\d+)_(\d+)_(.+)$")
TICK_NS = 10  # the step trace counts device cycles of 10 ns (step_trace_parser.py: "The unit ... is 10ns")


@dataclass(frozen=True)
class Member:
    """One rank of the cluster: where its files are, and nothing that names the host's address."""

    rank: int | None
    host: str
    device: int
    profiler_dir: Path


def is_cluster(root: Path) -> bool:
    return root.is_dir() and (root / CLUSTER).is_dir() and (root / MAPPING).is_file()


def host_ids(root: Path) -> dict[str, str]:
    """IP -> host id from host_ips_mapping.txt (lines with fewer than two fields are skipped, as there)."""
    out: dict[str, str] = {}
    for line in (root / MAPPING).read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) > 1 and re.fullmatch(r"[\w.-]{1,64}", parts[1]):
            out[parts[0]] = parts[1]
    return out


def rank_table(root: Path) -> tuple[list[dict[str, Any]], Problem | None]:
    """The rank table's server_list, and what went wrong (never quoting its content)."""
    tables = sorted(p for p in root.glob("*.json") if p.is_file() and not p.is_symlink())
    if not tables:
        return [], Problem(f"{root}: no rank table (hccl.json); ranks numbered from the folders, in order",
                           Kind.MISSING_FILE, str(root))
    try:
        servers = json.loads(tables[0].read_text(errors="replace")).get("server_list")
    except (OSError, ValueError, AttributeError, RecursionError):
        servers = None
    if not isinstance(servers, list):
        return [], Problem(f"{tables[0]}: not a rank table with a server_list; ranks numbered from the folders, "
                           "in order", Kind.BAD_FIELD, str(tables[0]))
    return [s for s in servers if isinstance(s, dict)], None


def _int(v: Any) -> int | None:
    s = str(v)
    return int(s) if s.isdigit() and len(s) < 8 else None


def members(root: Path) -> tuple[list[Member], list[str]]:
    """Every rank of the cluster, and problems (one ``Problem`` each)."""
    ids, problems = host_ids(root), list[str]()
    servers, why = rank_table(root)
    out: list[Member] = []
    for n, server in enumerate(servers):
        hid = ids.get(str(server.get("server_id")))
        devices = server.get("device")
        devs = [d for d in (devices if isinstance(devices, list) else []) if isinstance(d, dict)]
        if hid is None:
            problems.append(Problem(f"{root / MAPPING}: server {n} of the rank table has no line; its ranks are "
                                    "left out", Kind.RANK_UNKNOWN, str(root / MAPPING), count=max(1, len(devs))))
            continue
        for dev in devs:
            device, rank = _int(dev.get("device_id")), _int(dev.get("rank_id"))
            if device is not None:
                out.append(Member(rank, f"host-{hid}", device, root / CLUSTER / hid / "profiler"))
    if servers and not out and why is None:
        why = Problem(f"{root}: the rank table lists no device of a mapped host; ranks numbered from the folders, "
                      "in order", Kind.BAD_FIELD, str(root))
    if why is not None:
        problems.append(why)
        for hid in sorted(set(ids.values())):
            d = root / CLUSTER / hid / "profiler"
            devs_ = sorted(int(m.group(1)) for p in (d.iterdir() if d.is_dir() else []) if (m := _STEP_RE.match(p.name)))
            out += [Member(None, f"host-{hid}", dev, d) for dev in devs_]
    return out, problems


def files(m: Member) -> tuple[str, ...]:
    p = m.profiler_dir / STEP_TRACE.format(m.device)
    return (str(p),) if p.is_file() else ()


_POINTS = ("start_point", "end_point", "fp_point", "bp_point")  # the columns every step row needs as numbers


def _rows(path: Path) -> tuple[list[str], list[list[str]], int]:
    """Header, step rows, and how many rows were not step rows (left out; the "-" averages row is expected)."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0][:3] != ["step_num", "start_point", "end_point"] or len(rows[0]) < 9:
        raise ValueError("no step_num, start_point, end_point, ... header")
    # The writer grows the header when a later step has a new communication op and writes earlier rows
    # with the columns known then: shorter rows are padded (an op absent from a step has no value).
    n = len(rows[0])
    need = [rows[0].index(c) for c in _POINTS if c in rows[0]]
    good = [r + [""] * (n - len(r)) for r in rows[1:]
            if r and r[0].isdigit() and 9 <= len(r) <= n and all(r[i].isdigit() for i in need)]
    bad = sum(1 for r in rows[1:] if r and r[0] != "-") - len(good)
    return rows[0], good, bad


def step_tables(path: Path, device: int = 0, problems: list[str] | None = None) -> dict[str, pa.Table]:
    """``steps``, ``collectives`` and ``events`` of one step_trace_raw file (the average row left out).
    Rows that are not step rows (a cell that is not a count, too many cells) are left out, said in ``problems``.

    Events are the spans the step trace measures on the device: "fp_and_bp" (forward and backward,
    as compute) and each communication op on its stream; iteration interval and tail are idle.
    """
    from rankscope.model.schema import normalize_op

    head, rows, bad = _rows(path)
    if bad and problems is not None:
        problems.append(Problem(f"{path}: {bad} rows that are not step rows (a point that is not a count, or more "
                                "cells than the header) were left out", Kind.BAD_ROWS, str(path), count=bad))
    col = {c: i for i, c in enumerate(head)}
    steps = {"step": [int(r[0]) for r in rows],
             "ts": [int(r[col["start_point"]]) * TICK_NS for r in rows],
             "end": [int(r[col["end_point"]]) * TICK_NS for r in rows]}
    steps["host_end"] = steps["end"]
    comm: list[dict[str, Any]] = []
    spans: list[tuple[str, int, int, int, bool]] = [  # name, start, end, stream, communication
        ("fp_and_bp", int(r[col["fp_point"]]) * TICK_NS, int(r[col["bp_point"]]) * TICK_NS, 0, False) for r in rows]
    for c in col:
        m = _COMM_RE.match(c)
        if not m or c.endswith(("_start_point", "_end_point")) or f"{c}_start_point" not in col:
            continue
        op = m.group(3).split("-op")[0]
        for r in rows:
            a, b = r[col[f"{c}_start_point"]], r[col[f"{c}_end_point"]]
            if not (a.isdigit() and b.isdigit()) or a == "0":  # absent from this step (written as 0 or not at all)
                continue
            t0, t1 = int(a) * TICK_NS, int(b) * TICK_NS
            comm.append({"op": normalize_op(op), "name": m.group(3), "ts": t0, "dur": t1 - t0, "dev_ts": t0,
                         "dev_dur": t1 - t0, "pg_name": f"stream {m.group(1)}", "pg_ranks": "", "group_size": 0,
                         "seq": -1, "nelems_in": -1, "nelems_out": -1, "dtype": "", "bytes_in": -1, "bytes_out": -1,
                         "external_id": -1, **schema.COLLECTIVE_FILL})
            spans.append((m.group(3), t0, t1, int(m.group(1)), True))
    out = {name: schema.empty(name) for name in schema.TABLES}
    out["steps"] = pa.table({**steps, "complete": [True] * len(rows)}, schema=schema.STEPS)
    # The device spans the step trace measures: forward+backward (compute) and each communication op.
    out["events"] = pa.table({
        "name": [n for n, *_ in spans], "cat": ["kernel"] * len(spans), "kind": ["kernel"] * len(spans),
        "ts": [t0 for _, t0, *_ in spans], "dur": [t1 - t0 for _, t0, t1, *_ in spans], "pid": [device] * len(spans),
        "tid": [s for *_, s, _ in spans], "stream": [s for *_, s, _ in spans], "device": [device] * len(spans),
        "correlation": [-1] * len(spans), "external_id": [-1] * len(spans), "depth": [0] * len(spans),
        "is_comm": [c for *_, c in spans], "input_dims": [""] * len(spans),
        **{k: [v] * len(spans) for k, v in schema.EVENT_FILL.items()}}, schema=schema.EVENTS).sort_by("ts")
    if comm:
        out["collectives"] = pa.Table.from_pylist(comm, schema=schema.COLLECTIVES).sort_by("ts")
    return out
