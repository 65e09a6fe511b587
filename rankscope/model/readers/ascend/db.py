"""Reader for torch_npu's DB export: ``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_<rank>.db`` and
``analysis.db`` (``experimental_config(export_type=["db"])``), the input msprof-analyze's recipes need.

The same per-rank tables as the text reader (``ascend.py``) come out, so analyses and the
msprof-analyze exports run unchanged. Schema, from the writers and readers that own it:

- analysis.db (torch_npu ``prof_view/prof_db_parse/_communication_db_parser.py`` and
  ``_trace_step_time_db_parser.py``; read the same way by msprof-analyze 26.2.0
  ``recipes/communication_time_sum``, ``communication_matrix_sum``, ``analysis/step_trace_time_analysis.py``):
  ``CommAnalyzerTime`` / ``CommAnalyzerBandwidth`` (one row per operation and per transport and
  package size) are turned back into communication.json's entries, ``CommAnalyzerMatrix`` (already
  folded into ``<type>-top1`` ... ``-total``) into communication_matrix.json's, ``StepTraceTime``
  into step_trace_time.csv's rows; ratios, not stored, are recomputed as CANN does (4 digits);
- the profiler db (torch_npu ``_basic_db_parser.py``, ``_fwk_api_db_parser.py``, CANN's tables as
  msprof-analyze queries them): ``PYTORCH_API`` -> Python layer, ``CANN_API`` -> CANN layer,
  ``TASK`` joined with ``COMPUTE_TASK_INFO`` -> Ascend Hardware, ``COMMUNICATION_OP`` -> HCCL
  operations "<op>@<group>"; names through ``STRING_IDS``. SQLite builds the events as one JSON
  array (``json_object``: no per-event Python), which then takes the trace_view.json path.
  Rank, groups and distributed_args come from profiler_info / profiler_metadata.json, as in the text
  form (torch_npu writes both files whatever the export type).

Launch links (``TASK`` / ``CANN_API`` connection ids, ``CONNECTION_IDS``) are read by ``db_trace.launch_links``.
Not read yet: ``COMMUNICATION_TASK_INFO`` (task-level HCCL rows, left out by the text reader too), ``MEMORY_RECORD``.
"""
from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from rankscope.model import schema
from rankscope.model.schema import STEP_TIMES

# msprof-analyze's ProfDataAllocate.DB_PATTERNS (cluster_data_preprocess/prof_data_allocate.py), PyTorch's.
# MindSpore's DB export (ascend_mindspore_profiler_<rank>.db, communication_analyzer.db) has unfolded
# matrix rows without step/type (msprof-analyze converts them, _trans_msprof_matrix_data): not read yet.
PROFILER_DB = re.compile(r"^ascend_pytorch_profiler(?:_(\d+))?\.db$")
ANALYSIS_DBS = ("analysis.db",)
LAYERS: dict[Any, str | None] = {1: "cpu_op", 2: "runtime", 3: "kernel", 4: "kernel"}  # pids (ascend_db_trace)
STEP_COLUMNS = {"computing": "Computing", "communication_not_overlapped": "Communication(Not Overlapped)",
                "overlapped": "Overlapped", "communication": "Communication", "free": "Free", "stage": "Stage",
                "bubble": "Bubble", "communication_not_overlapped_and_exclude_receive":
                "Communication(Not Overlapped and Exclude Receive)", "preparing": "Preparing"}


def profiler_db(out: Path) -> Path | None:
    """The rank's profiler db in an ASCEND_PROFILER_OUTPUT folder, if any."""
    try:
        return next((p for p in sorted(out.iterdir()) if PROFILER_DB.match(p.name) and p.is_file()), None)
    except OSError:
        return None


def rank_of(out: Path) -> tuple[int | None, str]:
    """The rank of a DB export from RANK_DEVICE_MAP (content), else from the db's file name."""
    db = profiler_db(out)
    if db is None:
        return None, "unknown"
    try:
        con = connect(db)
        try:
            row = con.execute("SELECT rankId FROM RANK_DEVICE_MAP").fetchone()
        finally:
            con.close()
        if row and type(row[0]) is int and 0 <= row[0] < (1 << 20):
            return row[0], "RANK_DEVICE_MAP"
    except sqlite3.Error:
        pass
    m = PROFILER_DB.match(db.name)
    return (int(m.group(1)), "profiler db file name") if m and m.group(1) else (None, "unknown")


def analysis_db(out: Path) -> Path | None:
    return next((out / n for n in ANALYSIS_DBS if (out / n).is_file()), None)


def connect(path: Path) -> sqlite3.Connection:
    """Read-only: a profile is never modified by reading it."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def tables_of(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def ratio(a: float, b: float) -> float:
    return 0 if abs(b) < 1e-15 else round(a / b, 4)


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else 0.0


def communication_doc(con: sqlite3.Connection, have: set[str]) -> dict[str, Any]:
    """communication.json's content from CommAnalyzerTime and CommAnalyzerBandwidth."""
    doc: dict[str, Any] = defaultdict(lambda: {"collective": {}, "p2p": {}})
    if "CommAnalyzerTime" not in have:
        return {}
    sql = ("SELECT hccl_op_name, group_name, start_timestamp, elapse_time, transit_time, wait_time, "
           "synchronization_time, idle_time, step, type FROM CommAnalyzerTime")
    for op, group, start, elapse, transit, wait, sync, idle, step, kind in con.execute(sql):
        if kind not in ("collective", "p2p"):
            continue  # '' marks CANN's "Total Op Info" rows: derived, left out as in the text form
        transit, wait, sync = _num(transit), _num(wait), _num(sync)
        doc[str(step)][kind][f"{op}@{group}"] = {"Communication Time Info": {
            "Start Timestamp(us)": _num(start), "Elapse Time(ms)": _num(elapse), "Transit Time(ms)": transit,
            "Wait Time(ms)": wait, "Synchronization Time(ms)": sync, "Idle Time(ms)": _num(idle),
            "Wait Time Ratio": ratio(wait, wait + transit), "Synchronization Time Ratio": ratio(sync, sync + transit)},
            "Communication Bandwidth Info": {}}
    if "CommAnalyzerBandwidth" in have:
        sql = ("SELECT hccl_op_name, group_name, transport_type, transit_size, transit_time, bandwidth, "
               "large_packet_ratio, package_size, count, total_duration, step, type FROM CommAnalyzerBandwidth")
        for op, group, tr, size, ms, bw, large, pkg, n, dur, step, kind in con.execute(sql):
            entry = doc.get(str(step), {}).get(kind, {}).get(f"{op}@{group}")
            if entry is None:
                continue
            band = entry["Communication Bandwidth Info"].setdefault(str(tr), {
                "Transit Size(MB)": _num(size), "Transit Time(ms)": _num(ms), "Bandwidth(GB/s)": _num(bw),
                "Large Packet Ratio": _num(large), "Size Distribution": {}})
            if _num(n) or _num(pkg):  # a transport without packets is one row of zeros
                band["Size Distribution"][str(_num(pkg))] = [int(_num(n)), _num(dur)]
    return dict(doc)


def matrix_doc(con: sqlite3.Connection, have: set[str]) -> dict[str, Any]:
    """communication_matrix.json's content from CommAnalyzerMatrix (already folded per link)."""
    if "CommAnalyzerMatrix" not in have:
        return {}
    doc: dict[str, Any] = defaultdict(lambda: {"p2p": {}, "collective": {}})
    sql = ("SELECT hccl_op_name, group_name, src_rank, dst_rank, transport_type, transit_size, transit_time, "
           "bandwidth, step, type, op_name FROM CommAnalyzerMatrix")
    for op, group, src, dst, tr, size, ms, bw, step, kind, name in con.execute(sql):
        if kind not in ("collective", "p2p"):
            continue
        link = {"Transport Type": tr, "Transit Size(MB)": _num(size), "Transit Time(ms)": _num(ms),
                "Bandwidth(GB/s)": _num(bw)}
        if name:
            link["Op Name"] = name
        doc[str(step)][kind].setdefault(f"{op}@{group}", {})[f"{src}-{dst}"] = link
    return dict(doc)


def step_times(con: sqlite3.Connection, have: set[str]) -> pa.Table:
    """step_trace_time.csv's rows from StepTraceTime (numbers as csv writes floats)."""
    import json

    if "StepTraceTime" not in have:
        return STEP_TIMES.empty_table()
    cols = ", ".join(STEP_COLUMNS)
    rows = [(str(r[0] if r[0] is not None else ""), json.dumps({STEP_COLUMNS[c]: str(_num(v))
                                                              for c, v in zip(STEP_COLUMNS, r[1:])}))
            for r in con.execute(f"SELECT step, {cols} FROM StepTraceTime")]
    return pa.table(list(map(list, zip(*rows))) if rows else [[]] * 2, schema=STEP_TIMES)
