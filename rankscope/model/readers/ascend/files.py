"""The per-rank summary files of the torch_npu profiler as tables (input of the msprof-style exports).

torch_npu writes, next to trace_view.json, ``communication.json`` (per step, per kind, one entry
per HCCL operation plus "Total Op Info"), ``communication_matrix.json`` (per step, per kind, per
folded operation ``<type>-top1|middle|bottom1..3|total@<group>``, one entry per group-local link
"src-dst") and ``step_trace_time.csv``. msprof-analyze's cluster mode only re-groups these, so
rankscope keeps them nearly as written: one row per operation (or link, or step) with the entry
itself as a JSON string (``info``), so that every field, Size Distribution included, survives.
"Total Op Info" entries are derived and left out, as msprof-analyze does.

Example::

    comm_ops(Path(".../ASCEND_PROFILER_OUTPUT/communication.json"))   # pyarrow.Table
"""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from rankscope.model.info import Kind, Problem
from rankscope.model.schema import COMM_LINKS, COMM_OPS, STEP_TIMES

KINDS = ("collective", "p2p")


def _json(path: Path) -> Any:
    return json.loads(Path(path).read_bytes().decode("utf-8-sig", errors="replace"))


def _steps(doc: Any) -> list[tuple[str, dict[str, Any]]]:
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, found {type(doc).__name__}")
    return [(str(k), v) for k, v in doc.items() if isinstance(v, dict)]


def comm_ops(path: Path) -> pa.Table:
    """communication.json -> one row per (step, kind, operation)."""
    return comm_ops_of(_json(path))


def comm_ops_of(doc: Any) -> pa.Table:
    """communication.json's content -> one row per (step, kind, operation)."""
    rows = [(step, kind, name, name.split("@")[-1], json.dumps(info))
            for step, d in _steps(doc) for kind in KINDS if isinstance(d.get(kind), dict)
            for name, info in d[kind].items() if not name.startswith("Total") and isinstance(info, dict)]
    return pa.table(list(map(list, zip(*rows))) if rows else [[]] * 5, schema=COMM_OPS)


def comm_links(path: Path) -> pa.Table:
    """communication_matrix.json -> one row per (step, kind, folded operation, link)."""
    return comm_links_of(_json(path))


def comm_links_of(doc: Any) -> pa.Table:
    """communication_matrix.json's content -> one row per (step, kind, folded operation, link)."""
    rows = [(step, kind, name, name.split("@")[-1], link, json.dumps(info))
            for step, d in _steps(doc) for kind in KINDS if isinstance(d.get(kind), dict)
            for name, links in d[kind].items() if not name.startswith("Total") and isinstance(links, dict)
            for link, info in links.items() if isinstance(info, dict)]
    return pa.table(list(map(list, zip(*rows))) if rows else [[]] * 6, schema=COMM_LINKS)


def step_times(path: Path) -> pa.Table:
    """step_trace_time.csv -> one row per step; ``row``: the other columns in file order (strings)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = [(r.get("Step") or "", json.dumps({k: v for k, v in r.items() if k not in ("Step", "Device_id")}))
                for r in csv.DictReader(f)]
    return pa.table(list(map(list, zip(*rows))) if rows else [[]] * 2, schema=STEP_TIMES)


READERS = {"comm_ops": ("communication.json", comm_ops), "comm_links": ("communication_matrix.json", comm_links),
           "step_times": ("step_trace_time.csv", step_times)}


def read_all(out: Path) -> tuple[dict[str, pa.Table], list[str]]:
    """Every summary table of one ASCEND_PROFILER_OUTPUT folder (empty where a file is absent)."""
    tabs: dict[str, pa.Table] = {}
    problems: list[str] = []
    for name, (fname, reader) in READERS.items():
        tabs[name] = {"comm_ops": COMM_OPS, "comm_links": COMM_LINKS, "step_times": STEP_TIMES}[name].empty_table()
        if (out / fname).is_file():
            try:
                tabs[name] = reader(out / fname)
            except (OSError, ValueError, TypeError, AttributeError, RecursionError, csv.Error) as exc:
                problems.append(Problem(f"{out / fname}: unreadable ({str(exc)[:200]}); left out of the cluster exports",
                                        Kind.BAD_TABLE, str(out / fname)))
    return tabs, problems
