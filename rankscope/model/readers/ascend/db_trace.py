"""The timeline of a torch_npu profiler db as trace_view.json-like events (input of ``tables.build``).

SQLite builds the whole Chrome-trace array with ``json_object`` / ``json_group_array`` (no per-event
Python); timestamps are written as decimal µs strings from the integer ns ("1735689600000480.123"),
which the trace_view.json path reads like torch_npu's own. Layers are fixed pids (``ascend_db.LAYERS``):
1 Python (``PYTORCH_API``: op 50001 -> cpu_op, python_trace 50003 -> python_function, mstx 50004 ->
user_annotation, the task queue 50002 -> enqueue / dequeue by name, as the text form's cats), 2 CANN
(``CANN_API``), 3 Ascend Hardware (``TASK`` joined with ``COMPUTE_TASK_INFO``), 4 HCCL operations (``COMMUNICATION_OP``, named
"<op>@<group>" as in trace_view.json, one thread per group). Columns as torch_npu 2.6.0 writes them
(``prof_common_func/_constant.py``) and msprof-analyze 26.2.0 reads CANN's
(``compare_tools/compare_backend/profiling_parser/npu_profiling_db_parser.py``).

Example::

    raw = read_trace(Path(".../ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"))
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rankscope.model.info import Kind, Problem
from rankscope.model.readers import kineto
from rankscope.model.readers.ascend import flows
from rankscope.model.readers.kineto import RawTrace


def _ts(start: str) -> str:
    return f"printf('%d.%03d', {start} / 1000, {start} % 1000)"


def _x(name: str, pid: int, tid: str, start: str, end: str, extra: str = "") -> str:
    return (f"json_object('ph', 'X', 'name', {name}, 'pid', {pid}, 'tid', {tid}, 'ts', {_ts(start)}, "
            f"'dur', ({end} - {start}) / 1000.0{extra})")


QUERIES = {
    "PYTORCH_API": (
        "SELECT " + _x("COALESCE(s.value, '')", 1, "p.globalTid % 4294967296", "CAST(p.startNs AS INTEGER)",
                       "CAST(p.endNs AS INTEGER)",
                       ", 'cat', CASE p.type WHEN 50003 THEN 'python_function' WHEN 50004 THEN 'user_annotation' "
                       "WHEN 50002 THEN CASE WHEN s.value LIKE 'Dequeue%' THEN 'dequeue' ELSE 'enqueue' END "
                       "ELSE 'cpu_op' END")
        + " AS e FROM PYTORCH_API p LEFT JOIN STRING_IDS s ON s.id = p.name"),
    "CANN_API": (
        "SELECT " + _x("COALESCE(s.value, '')", 2, "c.globalTid % 4294967296", "c.startNs", "c.endNs")
        + " AS e FROM CANN_API c LEFT JOIN STRING_IDS s ON s.id = c.name"),
    "COMPUTE_TASK_INFO": (
        "SELECT " + _x("COALESCE(n.value, '')", 3, "t.streamId", "t.startNs", "t.endNs",
                       ", 'args', json_object('Task Type', tt.value, 'Stream Id', t.streamId, 'Task Id', t.taskId)")
        + " AS e FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId"
          " LEFT JOIN STRING_IDS n ON n.id = c.name LEFT JOIN STRING_IDS tt ON tt.id = c.taskType"),
    "COMMUNICATION_OP": (
        "SELECT " + _x("COALESCE(n.value, '') || '@' || COALESCE(g.value, '')", 4, "1000 + c.groupName", "c.startNs",
                       "c.endNs")
        + " AS e FROM COMMUNICATION_OP c LEFT JOIN STRING_IDS n ON n.id = c.opName"
          " LEFT JOIN STRING_IDS g ON g.id = c.groupName"),
}
NEEDS = {"PYTORCH_API": ("STRING_IDS",), "CANN_API": ("STRING_IDS",), "COMPUTE_TASK_INFO": ("TASK", "STRING_IDS"),
         "COMMUNICATION_OP": ("STRING_IDS",)}


def events_json(db: Path) -> bytes:
    """One JSON array of every event the profiler db holds (empty array when it has none)."""
    from rankscope.model.readers.ascend.db import connect, tables_of

    con = connect(db)
    try:
        have = tables_of(con)
        parts = [q for t, q in QUERIES.items() if t in have and set(NEEDS[t]) <= have]
        if not parts:
            return b"[]"
        sql = "SELECT json_group_array(json(e)) FROM (" + " UNION ALL ".join(parts) + ")"
        row = con.execute(sql).fetchone()
    finally:
        con.close()
    return (row[0] if row and row[0] else "[]").encode()


def read_trace(db: Path) -> RawTrace:
    """The db's events as a RawTrace whose events carry Kineto categories from their layer."""
    from rankscope.model.readers.ascend.torch_npu import _AscendTrace
    from rankscope.model.readers.ascend.db import LAYERS

    data = events_json(db)
    problems: list[str] = []
    if data == b"[]":
        problems.append(Problem("no PYTORCH_API, CANN_API, TASK or COMMUNICATION_OP rows: no timeline", Kind.NO_EVENTS,
                                str(db)))
        data = b'[{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}}]'
    raw = kineto.decode_bytes(str(db), data, problems)
    out = _AscendTrace(raw.path, raw.trace, raw.problems, raw.partial, raw.nbytes)
    out.pid_cat = dict(LAYERS)
    out.links = launch_links(db)
    out.queue = queue_links(db)
    out.npu_pid = {4: 3}  # HCCL operations run on the rank's NPU, the Ascend Hardware layer's (``QUERIES``' pids)
    return out


def launch_links(db: Path) -> flows.Links:
    """Which host op launched each task, as the text form's flows say (``flows``): a task's ``TASK.connectionId`` is
    that of the CANN API call that launched it (``CANN_API``), and a torch op's ``PYTORCH_API.connectionId`` names rows
    of ``CONNECTION_IDS`` holding those ids (torch_npu ``_fwk_api_db_parser.py``); the torch op is preferred. Keys are
    the events' (layer pid, tid, start) as ``QUERIES`` writes them."""
    import sqlite3

    from rankscope.model.readers.ascend.db import connect, tables_of

    con = connect(db)
    try:
        have = tables_of(con)
        if not {"TASK", "COMPUTE_TASK_INFO"} <= have:
            return flows.Links()
        tasks = con.execute("SELECT t.connectionId, t.startNs, t.streamId FROM COMPUTE_TASK_INFO c JOIN TASK t "
                            "ON t.globalTaskId = c.globalTaskId WHERE t.connectionId IS NOT NULL").fetchall()
        hosts: list[tuple[int, Any, Any, Any]] = []
        if {"PYTORCH_API", "CONNECTION_IDS"} <= have:
            hosts += [(0, *r) for r in con.execute(
                "SELECT ci.connectionId, CAST(p.startNs AS INTEGER), p.globalTid % 4294967296 FROM PYTORCH_API p "
                "JOIN CONNECTION_IDS ci ON ci.id = p.connectionId WHERE p.type IS NULL OR p.type <> 50002")]
        if "CANN_API" in have:
            hosts += [(1, *r) for r in con.execute(
                "SELECT connectionId, startNs, globalTid % 4294967296 FROM CANN_API")]
    except sqlite3.Error:  # the timeline itself was read: a table without these columns only loses the links
        return flows.Links()
    finally:
        con.close()
    layer = {0: 1, 1: 2}  # the pids of ``QUERIES``: Python, CANN; Ascend Hardware is 3
    by_conn: dict[Any, list[tuple[int, tuple[Any, Any, int]]]] = {}
    for pref, conn, start, tid in hosts:
        t = _key(start)
        if conn is not None and t is not None:
            by_conn.setdefault(conn, []).append((pref, (layer[pref], tid, t)))
    return flows.link([(pref, (3, stream, t), host) for conn, start, stream in tasks
                       if (t := _key(start)) is not None for pref, host in by_conn.get(conn, [])])


def _key(start: Any) -> int | None:
    """The start ns as ``flows.ns`` reads the "ts" string ``_ts`` writes for it (the events' keys)."""
    return flows.ns(f"{start // 1000}.{start % 1000:03d}") if type(start) is int and start >= 0 else None


def queue_links(db: Path) -> flows.Links:
    """torch_npu's task queue in the db, as the text form's flows give it (``flows.queue_links``): the Enqueue and the
    Dequeue rows of ``PYTORCH_API`` (type 50002) that list the same first connection id (torch_npu's
    ``_fwk_api_db_parser`` reads a row's first) are a pair. Keys as ``QUERIES`` writes the events."""
    import sqlite3

    from rankscope.model.readers.ascend.db import connect, tables_of

    con = connect(db)
    try:
        if not {"PYTORCH_API", "CONNECTION_IDS", "STRING_IDS"} <= tables_of(con):
            return flows.Links()
        rows = con.execute(
            "SELECT c.connectionId, CAST(p.startNs AS INTEGER), p.globalTid % 4294967296, s.value LIKE 'Dequeue%' "
            "FROM PYTORCH_API p JOIN (SELECT id, connectionId, MIN(rowid) FROM CONNECTION_IDS GROUP BY id) c "
            "ON c.id = p.connectionId LEFT JOIN STRING_IDS s ON s.id = p.name WHERE p.type = 50002").fetchall()
    except sqlite3.Error:
        return flows.Links()
    finally:
        con.close()
    ends: dict[Any, dict[bool, list[tuple[Any, Any, int]]]] = {}
    for conn, start, tid, deq in rows:
        if conn is not None and (t := _key(start)) is not None:
            ends.setdefault(conn, {}).setdefault(bool(deq), []).append((1, tid, t))
    return flows.as_queue(flows.link([(0, e[True][0], e[False][0]) for e in ends.values()
                                      if len(e.get(True, ())) == 1 and len(e.get(False, ())) == 1]))
