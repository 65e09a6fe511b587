"""msprof-analyze's cluster files from the per-rank torch_npu summaries (``-m all``, text mode).

Pattern: msprof-analyze 26.2.0 ``cluster -m all`` re-groups each rank's communication.json,
communication_matrix.json and step_trace_time.csv by communication group; rankscope does the same
on the ``comm_ops`` / ``comm_links`` / ``step_times`` tables so that a user can swap one tool for the
other. The rules, from its source (msprof_analyze/cluster_analyse/):

- groups (communication_group/base_communication_group.py): a group hash's members are the ranks
  that have an operation "…@<hash>" in either file; ``comm_group_parallel_info`` adds the comm name
  and name from profiler_metadata.json's parallel_group_info and takes its global_ranks as rank set;
- communication (analysis/communication_analysis.py): per group, step, operation and rank the
  entry as written, plus ``Total Op Info@<hash>`` per rank: sums of the times, sizes and Size
  Distribution, ratios and per-transport bandwidth recomputed (rounded to 4 digits);
- matrix (analysis/comm_matrix_analysis.py): per folded operation, the links of all member ranks
  summed, group-local ranks mapped to global ones through the self-links "i-i" (a link whose local
  ranks have no self-link is dropped, as there), bandwidth recomputed; ``Total Op Info@<hash>`` sums
  the ``-total`` operations;
- step trace (analysis/step_trace_time_analysis.py, stage_group_analysis.py): one row per rank and
  step with the file's values; stages are the collective groups not spanning two ranks of one "pp"
  p2p group, merged when they share ranks; a stage row takes the maximum of each column; DP / PP /
  TP Index come from the Megatron sizes in distributed_args (cluster_utils/parallel_algorithm.py).

Example::

    res = run_ascend_cluster(run, {})
    res.tables["step_trace"]          # one row per rank and step, then the stage rows
"""
from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pyarrow as pa

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import Col, View
from rankscope.model.run import Run

RATIOS = ("Wait Time Ratio", "Synchronization Time Ratio")


def ratio(a: float, b: float) -> float:
    return 0 if abs(b) < 1e-15 else round(a / b, 4)


def _num(v: Any) -> float:
    """A number of a written entry; anything else (hostile or damaged files) counts as 0."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _rows(run: Run, name: str) -> list[tuple[int, dict[str, Any]]]:
    return [(r, row) for r in run.rank_ids for row in run.table(r, name).to_pylist()]


def groups(run: Run, ops: list[tuple[int, dict[str, Any]]], links: list[tuple[int, dict[str, Any]]]
           ) -> tuple[dict[str, dict[str, set[int]]], list[dict[str, Any]]]:
    """{kind: {hash: ranks}} and the comm_group_parallel_info records."""
    seen: dict[str, dict[str, set[int]]] = {"collective": defaultdict(set), "p2p": defaultdict(set)}
    for r, row in ops + links:
        seen[row["kind"]][row["group"]].add(r)
    info: dict[str, dict[str, Any]] = {}
    for r in run.rank_ids:
        for g in run.ranks[r].process_groups or []:
            if "comm_name" in g:
                from rankscope.intlist import parse_int_list

                info.setdefault(str(g["name"]), {"group_id": g["comm_name"], "pg_name": g.get("desc", ""),
                                                 "ranks": sorted(parse_int_list(str(g["ranks"])))})
    records = []
    for kind in ("collective", "p2p"):
        for h, ranks in seen[kind].items():
            p = info.get(h, {})
            records.append({"type": kind, "rank_set": p.get("ranks") or sorted(ranks), "group_name": h,
                            "group_id": p.get("group_id", ""), "pg_name": p.get("pg_name", "")})
    return seen, records


def _key(ranks: set[int]) -> str:
    return str(tuple(set(sorted(ranks))))  # msprof-analyze writes str(tuple(<set of ranks>))


def _total(entries: list[dict[str, Any]]) -> dict[str, Any]:
    time: dict[str, float] = defaultdict(float)
    band: dict[str, dict[str, Any]] = {}
    for e in entries:
        for k, v in _dict(e.get("Communication Time Info")).items():
            if k not in RATIOS and k != "Start Timestamp(us)":
                time[k] += _num(v)
        for t, d in _dict(e.get("Communication Bandwidth Info")).items():
            d = _dict(d)
            tot = band.setdefault(t, {"Transit Time(ms)": 0, "Transit Size(MB)": 0, "Size Distribution": {}})
            tot["Transit Time(ms)"] += _num(d.get("Transit Time(ms)", 0))
            tot["Transit Size(MB)"] += _num(d.get("Transit Size(MB)", 0))
            for size, pair in _dict(d.get("Size Distribution")).items():
                acc = tot["Size Distribution"].setdefault(size, [0, 0])
                if isinstance(pair, list) and len(pair) == 2:
                    acc[0] += _num(pair[0])
                    acc[1] += _num(pair[1])
    time["Wait Time Ratio"] = ratio(time.get("Wait Time(ms)", 0), time.get("Wait Time(ms)", 0) +
                                    time.get("Transit Time(ms)", 0))
    time["Synchronization Time Ratio"] = ratio(time.get("Synchronization Time(ms)", 0),
                                               time.get("Synchronization Time(ms)", 0) + time.get("Transit Time(ms)", 0))
    for d in band.values():
        d["Bandwidth(GB/s)"] = ratio(d["Transit Size(MB)"], d["Transit Time(ms)"])
    return {"Communication Time Info": dict(time), "Communication Bandwidth Info": band}


def communication(ops: list[tuple[int, dict[str, Any]]], seen: dict[str, dict[str, set[int]]]) -> list[dict]:
    """Rows (group, step, op, rank, info) of cluster_communication.json, totals included."""
    struct: dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]] = defaultdict(dict)
    for r, row in ops:
        struct[(_key(seen[row["kind"]][row["group"]]), row["step"])].setdefault(row["name"], {}).setdefault(
            r, json.loads(row["info"]))
    out = []
    for (g, step), by_op in struct.items():
        per: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for op, ranks in by_op.items():
            for r, info in ranks.items():
                out.append({"group": g, "step": step, "op": op, "rank": str(r), "info": json.dumps(info)})
                per[op.split("@")[-1]][r].append(info)
        for h, by_rank in per.items():
            out += [{"group": g, "step": step, "op": f"Total Op Info@{h}", "rank": str(r),
                     "info": json.dumps(_total(entries))} for r, entries in by_rank.items()]
    return out


def _combine(acc: dict[str, Any], link: dict[str, Any]) -> None:
    acc["Transport Type"] = link.get("Transport Type")
    acc["Op Name"] = link.get("Op Name", "")
    acc["Transit Time(ms)"] += _num(link.get("Transit Time(ms)", 0))
    acc["Transit Size(MB)"] += _num(link.get("Transit Size(MB)", 0))


def _new() -> dict[str, Any]:
    return {"Transport Type": "", "Transit Time(ms)": 0, "Transit Size(MB)": 0, "Op Name": ""}


def matrix(links: list[tuple[int, dict[str, Any]]], seen: dict[str, dict[str, set[int]]],
           known: dict[str, dict[str, int]] | None = None) -> list[dict]:
    """Rows (group, step, op, link, info) of cluster_communication_matrix.json, totals included.

    ``known``: group hash -> local rank -> global rank before the self-links are read (DB mode).
    """
    struct: dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]] = defaultdict(dict)
    for r, row in links:
        struct[(_key(seen[row["kind"]][row["group"]]), row["step"])].setdefault(row["name"], {}).setdefault(
            r, {})[row["link"]] = _dict(json.loads(row["info"]))
    out = []
    for (g, step), by_op in struct.items():
        # group hash -> local rank -> global rank, from self-links (after ``known``)
        local: dict[str, dict[str, int]] = {h: dict(m) for h, m in (known or {}).items()}
        for op, ranks in by_op.items():
            for r, ls in ranks.items():
                for k in ls:
                    src, _, dst = k.partition("-")
                    if src == dst:
                        local.setdefault(op.split("@")[-1], {}).setdefault(src, r)
        totals: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(_new))
        for op, ranks in by_op.items():
            acc: dict[str, dict[str, Any]] = defaultdict(_new)
            for ls in ranks.values():
                for k, d in ls.items():
                    _combine(acc[k], d)
            m = local.get(op.split("@")[-1], {})
            merged = {}
            for k, d in acc.items():
                src, _, dst = k.partition("-")
                if src in m and dst in m:
                    d["Bandwidth(GB/s)"] = ratio(d["Transit Size(MB)"], d["Transit Time(ms)"])
                    merged[f"{m[src]}-{m[dst]}"] = d
            out += [{"group": g, "step": step, "op": op, "link": k, "info": json.dumps(d)} for k, d in merged.items()]
            if not merged:
                out.append({"group": g, "step": step, "op": op, "link": "", "info": "{}"})
            if not any(s in op for s in ("middle", "top", "bottom")):
                for k, d in merged.items():
                    _combine(totals[op.split("@")[-1]][k], d)
        for h, ls in totals.items():
            for k, d in ls.items():
                d["Bandwidth(GB/s)"] = ratio(d["Transit Size(MB)"], d["Transit Time(ms)"])
                out.append({"group": g, "step": step, "op": f"Total Op Info@{h}", "link": k, "info": json.dumps(d)})
    return out


def db_rank_map(run: Run, records: list[dict[str, Any]]) -> dict[str, dict[str, int]] | None:
    """msprof-analyze's DB mode (recipes/communication_matrix_sum/communication_matrix_sum.py) maps a
    group's local ranks through parallel_group_info's sorted global_ranks first, and only then through
    the self-links; text mode uses the self-links alone, so p2p links (no self-link) are dropped there
    and kept here. Used when the run holds torch_npu's DB export (msprof-analyze then runs in DB mode,
    even beside the text files), to agree with that mode."""
    if not any("db" in str(run.ranks[r].meta.get("ascend_export", "")) for r in run.rank_ids):
        return None
    return {r["group_name"]: {str(i): g for i, g in enumerate(sorted(r["rank_set"]))}
            for r in records if r["group_id"]}


def run_ascend_cluster(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``ascend_cluster``: the msprof-analyze cluster files as tables."""
    from rankscope.analysis.compat.ascend_steps import step_trace

    ops, links, steps = _rows(run, "comm_ops"), _rows(run, "comm_links"), _rows(run, "step_times")
    if not (ops or links or steps):
        return Result("ascend_cluster", skipped="no torch_npu summary files (communication.json, "
                                                "communication_matrix.json, step_trace_time.csv)")
    seen, records = groups(run, ops, links)
    tables: dict[str, Any] = {"groups": pa.Table.from_pylist(
        [{**r, "rank_set": json.dumps(r["rank_set"])} for r in records])} if records else {}
    if ops:
        tables["communication"] = pa.Table.from_pylist(communication(ops, seen))
    if links:
        tables["matrix"] = pa.Table.from_pylist(matrix(links, seen, db_rank_map(run, records)))
    header, rows, note = step_trace(run, steps, records)
    if rows:
        tables["step_trace"] = pa.Table.from_pylist([dict(zip(header, map(_cell, r))) for r in rows])
    summary: dict[str, Any] = {"groups": len(records), "ranks": len(run.rank_ids), "step_rows": len(rows)}
    if note:
        summary["parallel_index"] = note
    return Result("ascend_cluster", tables=tables, summary=summary)


def _cell(v: Any) -> str:
    """CSV text of one cell as Python's csv module writes it (what msprof-analyze uses)."""
    return str(v)


ANALYSIS = Analysis(
    name="ascend_cluster",
    description="msprof-analyze cluster files (step trace, communication, matrix, groups) from torch_npu summaries",
    run=run_ascend_cluster,
    view=View("Ascend cluster summary (msprof-analyze's cluster files)", (
        Col("ranks", "ranks", "count"), Col("groups", "communication groups", "count"),
        Col("step_rows", "step trace rows", "count")),
        empty="Ascend runs only (torch_npu profiler output)", optional=True),
)
