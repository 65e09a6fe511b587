"""msprof-analyze in DB mode (the owner of ``cluster_analysis.db``) against rankscope's cluster files.

``python -m tests.msprof_db_oracle RUN_DIR`` (a run in torch_npu's DB form) runs ``msprof-analyze
cluster -d RUN -m all`` (DB mode: it finds ``ascend_pytorch_profiler_<rank>.db``) and ``rankscope
analyze RUN --export json``, and prints per table "N of M values agree". Each row of msprof's table is
looked up in rankscope's file by the row's own keys; a row or value missing there disagrees.

The mapping follows msprof-analyze 26.2.0's DB writers (cluster_analyse/recipes/communication_group_map,
communication_time_sum, communication_matrix_sum; analysis/step_trace_time_analysis.py):

- ClusterStepTraceTime (step, type, index) -> cluster_step_trace_time.csv (Step, Type, Index), every column;
- CommunicationGroupMapping (type, group_name) -> communication_group.json's comm_group_parallel_info;
- ClusterCommunicationTime (step, rank_id, hccl_op_name@group_name) -> cluster_communication.json's
  "Communication Time Info" ("Total Op Info" rows: "Total Op Info@<group>"). The per-operation ratio
  columns are not compared: msprof's DB writer sets them to 0 (communication_time_sum.py
  ``_compute_time_info``), nor the totals' start_timestamp (0 there, absent in the JSON);
- ClusterCommunicationBandwidth -> "Communication Bandwidth Info"[band_type], a package row to its
  "Size Distribution" entry (package 0 with count 0: a transport without packets, an empty
  distribution); the totals' large_packet_ratio (0 there, absent in the JSON) is not compared;
- ClusterCommunicationMatrix (step, hccl_op_name@group_name, src-dst) -> cluster_communication_matrix.json.
  msprof's DB writer does not round the bandwidth; the JSON (as msprof's text mode) rounds it to
  4 digits, so bandwidths agree within 5e-5.
"""
from __future__ import annotations

import csv
import json
import math
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from tests.msprof_oracle import run_msprof, run_rankscope

TABLES = ("ClusterStepTraceTime", "CommunicationGroupMapping", "ClusterCommunicationTime",
          "ClusterCommunicationBandwidth", "ClusterCommunicationMatrix")
STEP_COLS = {"computing": "Computing", "communication_not_overlapped": "Communication(Not Overlapped)",
             "overlapped": "Overlapped", "communication": "Communication", "free": "Free", "stage": "Stage",
             "bubble": "Bubble", "communication_not_overlapped_and_exclude_receive":
             "Communication(Not Overlapped and Exclude Receive)", "preparing": "Preparing",
             "dp_index": "DP Index", "pp_index": "PP Index", "tp_index": "TP Index"}
TIME_COLS = {"elapsed_time": "Elapse Time(ms)", "transit_time": "Transit Time(ms)", "wait_time": "Wait Time(ms)",
             "synchronization_time": "Synchronization Time(ms)", "idle_time": "Idle Time(ms)"}
TOTAL = "Total Op Info"


def rows(db: Path, table: str) -> list[dict[str, Any]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in con.execute(f"SELECT * FROM {table}")]
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def same(a: Any, b: Any, tol: float = 1e-9) -> bool:
    try:
        return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)
    except (TypeError, ValueError):
        return a == b


class Tally:
    """Values compared and the first differences of one table."""

    def __init__(self) -> None:
        self.ok, self.n, self.bad = 0, 0, []  # type: int, int, list[str]

    def check(self, where: str, ref: Any, got: Any, tol: float = 1e-9) -> None:
        self.n += 1
        if same(ref, got, tol):
            self.ok += 1
        elif len(self.bad) < 10:
            self.bad.append(f"{where}: msprof {ref!r} rankscope {got!r}")


def _by_op(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(step, op@group) -> {rank or link: entry} over every rank-set key of a cluster JSON file."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for steps in doc.values():
        for step, ops in steps.items():
            for op, entries in ops.items():
                out.setdefault((step, op), {}).update(entries)
    return out


def step_trace(db: Path, got: Path, t: Tally) -> None:
    with open(got / "cluster_step_trace_time.csv", newline="") as f:
        csv_rows = {(r["Step"], r["Type"], r["Index"].replace(" ", "")): r for r in csv.DictReader(f)}
    for r in rows(db, "ClusterStepTraceTime"):
        mine = csv_rows.get((str(r["step"]), r["type"], str(r["index"]).replace(" ", "")), {})
        for col, name in STEP_COLS.items():
            if r["type"] == "stage" and col.endswith("_index"):
                continue  # msprof writes "NA" in text mode, 0 padding in DB mode: no value either way
            t.check(f"{r['step']}/{r['type']}/{r['index']}/{name}", r[col], mine.get(name, "<absent>"))


def groups(db: Path, got: Path, t: Tally) -> None:
    doc = json.loads((got / "communication_group.json").read_text())
    mine = {(g["type"], g["group_name"]): g for g in doc.get("comm_group_parallel_info", [])}
    for r in rows(db, "CommunicationGroupMapping"):
        g = mine.get((r["type"], r["group_name"]), {})
        ranks = sorted(int(x) for x in str(r["rank_set"]).strip("()").split(",") if x)
        t.check(f"{r['group_name']}/rank_set", str(ranks), str(sorted(g.get("rank_set", []))))
        t.check(f"{r['group_name']}/group_id", r["group_id"], g.get("group_id", "<absent>"))
        t.check(f"{r['group_name']}/pg_name", r["pg_name"], g.get("pg_name", "<absent>"))


def _entry(ops: dict[tuple[str, str], dict[str, Any]], r: dict[str, Any]) -> dict[str, Any]:
    op = f"{TOTAL}@{r['group_name']}" if r["hccl_op_name"] == TOTAL else f"{r['hccl_op_name']}@{r['group_name']}"
    return ops.get((r["step"], op), {}).get(str(r["rank_id"]), {})


def comm_time(db: Path, got: Path, t: Tally) -> None:
    ops = _by_op(json.loads((got / "cluster_communication.json").read_text()))
    for r in rows(db, "ClusterCommunicationTime"):
        info = _entry(ops, r).get("Communication Time Info", {})
        where = f"{r['step']}/{r['rank_id']}/{r['hccl_op_name']}@{r['group_name']}"
        cols = dict(TIME_COLS)
        if r["hccl_op_name"] == TOTAL:
            cols.update({"synchronization_time_ratio": "Synchronization Time Ratio",
                         "wait_time_ratio": "Wait Time Ratio"})
        else:
            cols["start_timestamp"] = "Start Timestamp(us)"
        for col, name in cols.items():
            t.check(f"{where}/{name}", r[col], info.get(name, "<absent>"))


def comm_bandwidth(db: Path, got: Path, t: Tally) -> None:
    ops = _by_op(json.loads((got / "cluster_communication.json").read_text()))
    for r in rows(db, "ClusterCommunicationBandwidth"):
        band = _entry(ops, r).get("Communication Bandwidth Info", {}).get(r["band_type"], {})
        where = f"{r['step']}/{r['rank_id']}/{r['hccl_op_name']}@{r['group_name']}/{r['band_type']}"
        cols = {"transit_size": "Transit Size(MB)", "transit_time": "Transit Time(ms)", "bandwidth": "Bandwidth(GB/s)"}
        if r["hccl_op_name"] != TOTAL:
            cols["large_packet_ratio"] = "Large Packet Ratio"
        for col, name in cols.items():
            t.check(f"{where}/{name}", r[col], band.get(name, "<absent>"))
        dist = band.get("Size Distribution", {})
        if not r["count"] and not r["package_size"]:  # no packets: an empty distribution (a total: no "0.0")
            empty = not dist if r["hccl_op_name"] != TOTAL else "0.0" not in dist
            t.check(f"{where}/Size Distribution", "{}", "{}" if empty else json.dumps(dist))
            continue
        pair = dist.get(str(float(r["package_size"])), ["<absent>", "<absent>"])
        t.check(f"{where}/{r['package_size']}/count", r["count"], pair[0])
        t.check(f"{where}/{r['package_size']}/duration", r["total_duration"], pair[1])


def comm_matrix(db: Path, got: Path, t: Tally) -> None:
    ops = _by_op(json.loads((got / "cluster_communication_matrix.json").read_text()))
    for r in rows(db, "ClusterCommunicationMatrix"):
        link = f"{int(float(r['src_rank']))}-{int(float(r['dst_rank']))}"
        d = ops.get((r["step"], f"{r['hccl_op_name']}@{r['group_name']}"), {}).get(link, {})
        where = f"{r['step']}/{r['hccl_op_name']}@{r['group_name']}/{link}"
        t.check(f"{where}/Transport Type", r["transport_type"], d.get("Transport Type", "<absent>"))
        t.check(f"{where}/Op Name", r["op_name"] or "", d.get("Op Name", "") if d else "<absent>")
        t.check(f"{where}/Transit Size(MB)", r["transit_size"], d.get("Transit Size(MB)", "<absent>"))
        t.check(f"{where}/Transit Time(ms)", r["transit_time"], d.get("Transit Time(ms)", "<absent>"))
        t.check(f"{where}/Bandwidth(GB/s)", r["bandwidth"], d.get("Bandwidth(GB/s)", "<absent>"), tol=5e-5)


CHECKS: dict[str, Callable[[Path, Path, Tally], None]] = {
    "ClusterStepTraceTime": step_trace, "CommunicationGroupMapping": groups, "ClusterCommunicationTime": comm_time,
    "ClusterCommunicationBandwidth": comm_bandwidth, "ClusterCommunicationMatrix": comm_matrix}


def compare(db: Path, got: Path) -> dict[str, tuple[int, int, list[str]]]:
    """Per table of msprof's cluster_analysis.db: (values that agree, values compared, first differences)."""
    out = {}
    for table, check in CHECKS.items():
        t = Tally()
        check(db, got, t)
        out[table] = (t.ok, t.n, t.bad)
    return out


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        ref = run_msprof(Path(argv[0]), Path(tmp) / "msprof") / "cluster_analysis.db"
        res = compare(ref, run_rankscope(Path(argv[0]), Path(tmp) / "rankscope"))
    for name, (ok, n, bad) in res.items():
        print(f"{name}: {ok} of {n} values agree")
        for b in bad[:5]:
            print("   ", b)
    print(f"all: {sum(v[0] for v in res.values())} of {sum(v[1] for v in res.values())} values agree")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
