"""One Ascend (torch_npu) output directory as the per-rank tables: the text export (``torch_npu``) or the DB
export (``db`` for analysis.db, ``db_trace`` for the profiler db's timeline), whichever the folder holds.
The one entry point over both forms, so neither form's reader imports the other."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa

from rankscope.model import schema, tables
from rankscope.model.info import Kind, Problem, prefixed
from rankscope.model.readers.ascend import db, db_trace, files, torch_npu
from rankscope.model.readers.ascend.torch_npu import OUTPUT


def export_form(d: Path) -> str:
    """Which of torch_npu's exports the folder holds: "text", "db" or "text+db" (export_type both).

    A folder with trace_view.json is read as text (the richer timeline); msprof-analyze takes any
    folder with a profiler db in DB mode (prof_data_allocate.py), which the cluster exports follow."""
    out = d / OUTPUT
    has_db = db.profiler_db(out) is not None or db.analysis_db(out) is not None
    text = (out / "trace_view.json").is_file()
    return "text+db" if has_db and text else "db" if has_db else "text"


def read(d: Path) -> tuple[dict[str, pa.Table], list[str], bool]:
    """All per-rank tables of one Ascend output directory, problems, and whether it is partial."""
    return read_db(d) if export_form(d) == "db" else torch_npu.read_text(d)


def read_db(d: Path) -> tuple[dict[str, pa.Table], list[str], bool]:
    """All per-rank tables of one DB-form Ascend output directory, problems, and whether it is partial."""
    out = d / OUTPUT
    prof = db.profiler_db(out)
    problems: list[str] = []
    partial = False
    if prof is None:  # only analysis.db kept (msprof-analyze accepts this too): cluster files, no timeline
        tabs = {name: schema.empty(name) for name in schema.TABLES}
        problems.append(Problem(f"{out}: no ascend_pytorch_profiler_<rank>.db, only analysis.db: no timeline",
                                Kind.MISSING_FILE, str(out)))
    else:
        try:
            raw = db_trace.read_trace(prof)
        except sqlite3.Error as exc:
            from rankscope.errors import TraceError

            why = (f"this Python's SQLite {sqlite3.sqlite_version} has no JSON functions (3.38 or later needed)"
                   if "no such function" in str(exc) else f"not a readable SQLite database ({exc})")
            raise TraceError(str(prof), why, Kind.NOT_A_DATABASE) from exc
        tabs, more = tables.build(raw)
        problems += [prefixed(str(prof), p) for p in raw.problems + more]
        partial = raw.partial
    adb = db.analysis_db(out)
    for name, empty in (("comm_ops", schema.COMM_OPS), ("comm_links", schema.COMM_LINKS),
                        ("step_times", schema.STEP_TIMES)):
        tabs[name] = empty.empty_table()
    if adb is None:
        problems.append(Problem(f"{out}: no analysis.db (profiler level none, or the analysis step was not run); "
                                "no collectives, communication or step trace exports", Kind.MISSING_FILE, str(out)))
        return tabs, problems, partial
    try:
        con = db.connect(adb)
        try:
            have = db.tables_of(con)
            if "CommAnalyzerTime" not in have:  # torch_npu writes it whenever it writes analysis.db
                problems.append(Problem(f"{adb}: no CommAnalyzerTime table; no collectives or communication exports",
                                        Kind.BAD_TABLE, str(adb)))
            comm = db.communication_doc(con, have)
            groups = {g["name"]: g["ranks"] for g in torch_npu.process_groups(d)}
            tabs["collectives"], more = torch_npu.collectives_of(comm, str(adb), groups)
            problems += more
            tabs["comm_ops"] = files.comm_ops_of(comm)
            tabs["comm_links"] = files.comm_links_of(db.matrix_doc(con, have))
            tabs["step_times"] = db.step_times(con, have)
        finally:
            con.close()
    except (sqlite3.Error, ValueError, TypeError) as exc:
        problems.append(Problem(f"{adb}: unreadable ({str(exc)[:200]}); left out of the collectives and cluster "
                                "exports", Kind.NOT_A_DATABASE, str(adb)))
    return tabs, problems, partial
