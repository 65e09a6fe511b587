"""Writes one simulated rank as torch_npu's DB export (``experimental_config(export_type=["db"])``).

Layout, from torch_npu 2.6.0 (``pip download --no-deps torch-npu==2.6.0``,
``torch_npu/profiler/analysis/prof_view/prof_db_parse/``)::

    <dir>_ascend_pt/profiler_info_<rank>.json, profiler_metadata.json     as in the text form
    ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_<rank>.db              _db_parser.py (TorchDb)
    ASCEND_PROFILER_OUTPUT/analysis.db                                    _db_parser.py (AnalysisDb)

Table columns are ``TableColumnsManager.TableColumns`` of ``prof_common_func/_constant.py``:

- analysis.db: ``CommAnalyzerTime`` / ``CommAnalyzerBandwidth`` / ``CommAnalyzerMatrix`` (written by
  ``_communication_db_parser.py``: CANN's rows plus ``step`` ("step<id>") and ``type``
  ("collective" | "p2p"); hccl_op_name without "@<group>"; the matrix folded into ``<type>-top1`` ...
  ``-total`` as communication_matrix.json, ``op_name`` its "Op Name") and ``StepTraceTime``
  (``_trace_step_time_db_parser.py``: deviceId, step id, the nine times in µs);
- the profiler db: ``META_DATA`` (``_basic_db_parser.py``: ENV_VARIABLES, then every key of
  profiler_metadata.json with ``json.dumps`` of its value), ``RANK_DEVICE_MAP``, ``HOST_INFO``,
  ``STEP_TIME`` (``_step_info_db_parser.py``), ``STRING_IDS``, ``ENUM_API_TYPE`` and ``PYTORCH_API``
  (``_fwk_api_db_parser.py``: type 50001 "op"), ``CANN_API``. CANN's own tables (``TASK``,
  ``COMPUTE_TASK_INFO``, ``COMMUNICATION_OP``) are moved in from its msprof db; their columns here are
  those msprof-analyze 26.2.0 queries (compare_tools/.../npu_profiling_db_parser.py,
  prof_exports/hccl_sum_export.py). A bandwidth row is one (transport, package size) of the entry's
  Size Distribution; a transport without packets is one row with package size, count and duration 0
  (CANN's writer is not public; this choice is stated, not copied).
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

ANALYSIS_TABLES = {
    "CommAnalyzerTime": "hccl_op_name TEXT, group_name TEXT, start_timestamp NUMERIC, elapse_time NUMERIC, "
                        "transit_time NUMERIC, wait_time NUMERIC, synchronization_time NUMERIC, idle_time NUMERIC, "
                        "step TEXT, type TEXT",
    "CommAnalyzerBandwidth": "hccl_op_name TEXT, group_name TEXT, transport_type TEXT, transit_size NUMERIC, "
                             "transit_time NUMERIC, bandwidth NUMERIC, large_packet_ratio NUMERIC, "
                             "package_size NUMERIC, count NUMERIC, total_duration NUMERIC, step TEXT, type TEXT",
    "CommAnalyzerMatrix": "hccl_op_name TEXT, group_name TEXT, src_rank TEXT, dst_rank TEXT, transport_type TEXT, "
                          "transit_size NUMERIC, transit_time NUMERIC, bandwidth NUMERIC, step TEXT, type TEXT, "
                          "op_name TEXT",
    "StepTraceTime": "deviceId INTEGER, step TEXT, computing NUMERIC, communication_not_overlapped NUMERIC, "
                     "overlapped NUMERIC, communication NUMERIC, free NUMERIC, stage NUMERIC, bubble NUMERIC, "
                     "communication_not_overlapped_and_exclude_receive NUMERIC, preparing NUMERIC",
}
PROFILER_TABLES = {
    "META_DATA": "name TEXT, value TEXT",
    "RANK_DEVICE_MAP": "rankId INTEGER, deviceId INTEGER",
    "HOST_INFO": "hostUid TEXT, hostName TEXT",
    "STEP_TIME": "id INTEGER, startNs INTEGER, endNs INTEGER",
    "STRING_IDS": "id INTEGER, value TEXT",
    "ENUM_API_TYPE": "id INTEGER, name INTEGER",
    "PYTORCH_API": "startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER, name INTEGER, "
                   "sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, inputShapes INTEGER, "
                   "callchainId INTEGER, type INTEGER",
    "CANN_API": "startNs INTEGER, endNs INTEGER, type INTEGER, globalTid INTEGER, connectionId INTEGER, "
                "name INTEGER",
    "TASK": "startNs INTEGER, endNs INTEGER, deviceId INTEGER, connectionId INTEGER, globalTaskId INTEGER, "
            "globalPid INTEGER, taskType INTEGER, contextId INTEGER, streamId INTEGER, taskId INTEGER, "
            "modelId INTEGER",
    "COMPUTE_TASK_INFO": "name INTEGER, globalTaskId INTEGER, blockDim INTEGER, taskType INTEGER, opType INTEGER, "
                         "inputShapes INTEGER",
    "COMMUNICATION_OP": "opName INTEGER, startNs INTEGER, endNs INTEGER, connectionId INTEGER, groupName INTEGER, "
                        "opId INTEGER, relay INTEGER, retry INTEGER, dataType INTEGER, algType INTEGER, "
                        "count NUMERIC, opType INTEGER",
    "CONNECTION_IDS": "id INTEGER, connectionId INTEGER",
}
LINKED = 1 << 30  # connection ids of launch links (torch_npu numbers its own; any ids clear of the others do)
QUEUED = 1 << 31  # connection ids of the task queue's Enqueue / Dequeue pairs, clear of the launch links
API_TYPES = ((50001, "op"), (50002, "queue"), (50003, "python_trace"), (50004, "mstx"))
CANN_NODE_LEVEL = 10000  # CANN_API.type of a node launch (_step_info_db_parser.py NODE_LEVEL)


def _create(path: Path, tables: dict[str, str], rows: dict[str, list[tuple[Any, ...]]]) -> None:
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as con:
        for name, cols in tables.items():
            con.execute(f"CREATE TABLE {name} ({cols})")
            if rows.get(name):
                marks = ",".join("?" * len(rows[name][0]))
                con.executemany(f"INSERT INTO {name} VALUES ({marks})", rows[name])
    con.close()


def _comm_rows(comm: dict[str, Any]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """CommAnalyzerTime and CommAnalyzerBandwidth rows of communication.json's content."""
    times, bands = [], []
    for step, kinds in comm.items():
        for kind in ("collective", "p2p"):
            for name, info in kinds.get(kind, {}).items():
                if name.startswith("Total"):
                    continue
                op, group = name.split("@")
                t = info["Communication Time Info"]
                times.append((op, group, t["Start Timestamp(us)"], t["Elapse Time(ms)"], t["Transit Time(ms)"],
                              t["Wait Time(ms)"], t["Synchronization Time(ms)"], t["Idle Time(ms)"], step, kind))
                for tr, b in info["Communication Bandwidth Info"].items():
                    head = (op, group, tr, b["Transit Size(MB)"], b["Transit Time(ms)"], b["Bandwidth(GB/s)"],
                            b["Large Packet Ratio"])
                    dist = b["Size Distribution"] or {"0": [0, 0]}
                    bands += [head + (float(size), n, ms, step, kind) for size, (n, ms) in dist.items()]
    return times, bands


def _matrix_rows(matrix: dict[str, Any]) -> list[tuple[Any, ...]]:
    out = []
    for step, kinds in matrix.items():
        for kind in ("p2p", "collective"):
            for name, links in kinds.get(kind, {}).items():
                op, group = name.split("@")
                for link, d in links.items():
                    src, dst = link.split("-")
                    out.append((op, group, src, dst, d["Transport Type"], d["Transit Size(MB)"],
                                d["Transit Time(ms)"], d["Bandwidth(GB/s)"], step, kind, d.get("Op Name", "")))
    return out


def write_analysis_db(path: Path, comm: dict[str, Any], matrix: dict[str, Any],
                      step_rows: list[list[Any]]) -> None:
    """analysis.db from the text form's communication.json / communication_matrix.json / step rows."""
    times, bands = _comm_rows(comm)
    _create(path, ANALYSIS_TABLES, {"CommAnalyzerTime": times, "CommAnalyzerBandwidth": bands,
                                    "CommAnalyzerMatrix": _matrix_rows(matrix),
                                    "StepTraceTime": [tuple(r) for r in step_rows]})


class _Strings:
    """STRING_IDS: every name stored once, referenced by id."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        return self.ids.setdefault(s, len(self.ids))


def _ns(ts: Any) -> int:
    """A trace_view "ts" (decimal µs, maybe a string) as integer ns, without float rounding."""
    whole, _, frac = f"{ts}".partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def write_profiler_db(path: Path, rank: int, node: int, device: int, evs: list[dict[str, Any]],
                      layers: dict[str, int], metadata: dict[str, Any]) -> None:
    """ascend_pytorch_profiler_<rank>.db from the rank's trace_view events (``layers``: layer -> pid)."""
    s = _Strings()
    rows: dict[str, list[tuple[Any, ...]]] = {k: [] for k in PROFILER_TABLES}
    tid = (1 << 32) * 4100  # globalTid: pid << 32 | tid, as CANN numbers threads
    # the text form's torch_to_npu flows as connection ids: the task's TASK.connectionId, listed in CONNECTION_IDS
    # under the torch op's PYTORCH_API.connectionId (ids from LINKED up, clear of the per-event ids below)
    flow = {(f["ph"], f["pid"], f["tid"], _ns(f["ts"])): LINKED + int(f["id"])
            for f in evs if f.get("ph") in ("s", "f") and f.get("cat") == "async_npu"}
    for i, e in enumerate(x for x in evs if x.get("ph") == "X"):
        start = _ns(e["ts"])
        end = start + int(round(float(e["dur"]) * 1000))
        if e["pid"] == layers["Python"] and e.get("cat") in ("enqueue", "dequeue"):
            # the task queue (type 50002): Enqueue and Dequeue list one connection id, their pair's own
            # (``_fwk_api_db_parser.get_torch_op_connection_ids_with_task_queue`` reads the first of a row's ids)
            rows["CONNECTION_IDS"].append((LINKED + i, QUEUED + int(e["args"]["correlation_id"])))
            rows["PYTORCH_API"].append((str(start), str(end), tid + e["tid"], LINKED + i, s(e["name"]), None, None,
                                        None, None, None, 50002))
        elif e["pid"] == layers["Python"]:
            if e["name"].startswith("ProfilerStep#"):
                rows["STEP_TIME"].append((int(e["name"].split("#")[1]), start, end))
            conn = flow.get(("s", e["pid"], e["tid"], start))
            if conn is not None:
                rows["CONNECTION_IDS"].append((LINKED + i, conn))
            rows["PYTORCH_API"].append((str(start), str(end), tid + e["tid"], i if conn is None else LINKED + i,
                                        s(e["name"]), None, None, None, None, None, 50001))
        elif e["pid"] == layers["CANN"]:
            # one OS thread, one globalTid, whichever layer records the call (the text form's tids say the same)
            rows["CANN_API"].append((start, end, CANN_NODE_LEVEL, tid + e["tid"], i, s(e["name"])))
        elif e["pid"] == layers["Ascend Hardware"]:
            conn = flow.get(("f", e["pid"], e["tid"], start), i)
            rows["TASK"].append((start, end, device, conn, i, 4100, s("KERNEL_AICORE"), 0, 2, i, 4294967295))
            rows["COMPUTE_TASK_INFO"].append((s(e["name"]), i, 24, s("AI_CORE"), s(e["name"]), None))
        elif e["pid"] == layers["HCCL"] and e["name"].startswith("hcom_"):
            op, _, group = e["name"].partition("@")
            rows["COMMUNICATION_OP"].append((s(op), start, end, i, s(group), i, 0, 0, s("FP16"), s("RING"), 0,
                                             s(op.split("_")[1])))
    meta = metadata.copy()
    rows["META_DATA"] = [("ENV_VARIABLES", json.dumps(meta.pop("ENV_VARIABLES", {})))]
    rows["META_DATA"] += [(str(k), json.dumps(v)) for k, v in meta.items()]
    rows["RANK_DEVICE_MAP"] = [(rank, device)]
    rows["HOST_INFO"] = [(f"host-uid-{node}", f"node{node}")]  # aliases: no real host names
    rows["ENUM_API_TYPE"] = list(API_TYPES)
    rows["STRING_IDS"] = [(i, v) for v, i in s.ids.items()]
    _create(path, PROFILER_TABLES, rows)
