"""msprof-analyze's ``cluster_analysis_output`` files from the ``ascend_cluster`` tables.

Layouts as msprof-analyze 26.2.0 writes them: cluster_step_trace_time.csv (csv module, header
first), cluster_communication.json {"(0, 1)": {"step10": {"hcom_…@<hash>" | "Total Op Info@<hash>":
{"<rank>": {...}}}}}, cluster_communication_matrix.json {"(0, 1)": {"step10": {"allreduce-top1@<hash>":
{"<src>-<dst>": {...}}}}} and communication_group.json. Only nesting here: the values are the
analysis's (rankscope/analysis/compat/ascend_cluster.py).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

FILES = ("cluster_step_trace_time.csv", "cluster_communication.json", "cluster_communication_matrix.json",
         "communication_group.json")


def _rows(t: Any) -> list[dict[str, Any]]:
    return t.to_pylist() if hasattr(t, "to_pylist") else list(t.to_dicts())


def nest(rows: list[dict[str, Any]], last: str) -> dict[str, Any]:
    """{group: {step: {op: {last: info}}}} from the long rows (an empty ``last`` keeps an empty op)."""
    out: dict[str, Any] = {}
    for r in rows:
        op = out.setdefault(r["group"], {}).setdefault(r["step"], {}).setdefault(r["op"], {})
        if r[last] != "":
            op[r[last]] = json.loads(r["info"])
    return out


def write(tables: dict[str, Any], out: Path) -> list[Path]:
    """The files the tables allow, into ``out``; return their paths."""
    paths = []
    if "step_trace" in tables:
        rows = _rows(tables["step_trace"])
        with open(out / FILES[0], "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(list(rows[0]))
            w.writerows([list(r.values()) for r in rows])
        paths.append(out / FILES[0])
    for name, fname, last in (("communication", FILES[1], "rank"), ("matrix", FILES[2], "link")):
        if name in tables:
            (out / fname).write_text(json.dumps(nest(_rows(tables[name]), last), indent=1))
            paths.append(out / fname)
    if "groups" in tables:
        recs = [{**r, "rank_set": json.loads(r["rank_set"])} for r in _rows(tables["groups"])]
        doc = {kind: [r["rank_set"] for r in recs if r["type"] == kind] for kind in ("collective", "p2p")}
        doc["comm_group_parallel_info"] = recs
        (out / FILES[3]).write_text(json.dumps(doc, indent=1))
        paths.append(out / FILES[3])
    return paths
