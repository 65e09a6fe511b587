"""Exports: every analysis table as CSV / JSON / Parquet, plus Ascend-compatible cluster files.

Files: ``<analysis>.<table>.<fmt>`` for every table of every analysis that ran, ``summary.json``
(skipped analyses with their reasons, summaries, findings), and the msprof-analyze
``cluster_analysis_output`` shapes:

- ``cluster_step_trace_time.csv``: Step, Type, Index, Computing, Communication(Not Overlapped),
  Overlapped, Communication, Free, Stage, Bubble, Communication(Not Overlapped and Exclude
  Receive), Preparing (µs), one row per rank and step;
- ``cluster_communication_matrix.json``: {group "(r0, r1, ..)": {"step": {"<op>-total@<pg>":
  {"src-dst": {"Transport Type", "Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)",
  "op_name"}}}}};
- ``cluster_communication.json``: {group: {"step<N>": {"<op>@<pg>#<instance>" | "Total Op Info":
  {"<rank>": {"Communication Time Info": {...}, "Communication Bandwidth Info": {...}}}}}}.

Transport types are unknown in PyTorch traces and written as "UNKNOWN". A renderer: no
statistics are computed here beyond unit conversion and grouping.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from rankscope.analysis.base import frame

FORMATS = ("csv", "json", "parquet")
ASCEND_STEP_COLUMNS = ["Step", "Type", "Index", "Computing", "Communication(Not Overlapped)", "Overlapped",
                       "Communication", "Free", "Stage", "Bubble",
                       "Communication(Not Overlapped and Exclude Receive)", "Preparing"]


def _arrow(t: Any) -> pa.Table:
    if isinstance(t, pl.DataFrame):
        return t.to_arrow()
    return t


def _plain(t: pa.Table) -> pa.Table:
    """Dictionary columns decoded (CSV writers and JSON readers want plain strings)."""
    cols = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in t.columns]
    return pa.table(cols, names=t.column_names)


def write_table(t: Any, path: Path, fmt: str) -> Path:
    """One table to ``path`` in ``fmt`` (csv, json: list of records, parquet)."""
    t = _plain(_arrow(t))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(t, path)
    elif fmt == "csv":
        pl.from_arrow(t).write_csv(path)  # type: ignore[union-attr]
    else:
        path.write_text(json.dumps(t.to_pylist(), default=str))
    return path


def export(run: Any, results: dict[str, Any], fmt: str, out_dir: str | Path) -> list[Path]:
    """Write every table of every result, ``summary.json`` and the Ascend files; return the paths."""
    if fmt not in FORMATS:
        from rankscope.errors import RankscopeError

        raise RankscopeError(f"--export {fmt}: unknown format; use one of {', '.join(FORMATS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, res in results.items():
        for tname, t in (res.tables or {}).items():
            written.append(write_table(t, out / f"{name}.{tname}.{fmt}", fmt))
    summary = {n: {"skipped": r.skipped, "summary": r.summary, "findings": [f.to_json() for f in r.findings]}
               for n, r in results.items()}
    (out / "summary.json").write_text(json.dumps(summary, default=str, indent=1))
    written.append(out / "summary.json")
    written += ascend_files(results, out)
    return written


def ascend_files(results: dict[str, Any], out: Path) -> list[Path]:
    """The msprof-analyze compatible files that the available results allow.

    An Ascend run (torch_npu summaries present) gets msprof-analyze's own files (render/msprof.py);
    other runs get the same shapes from rankscope's breakdown and collectives.
    """
    asc = results.get("ascend_cluster")
    if asc is not None and not asc.skipped and asc.tables:
        from rankscope.render import msprof

        return msprof.write(asc.tables, out)
    paths = []
    bd = results.get("breakdown")
    if bd is not None and not bd.skipped and "step_trace_time" in bd.tables:
        t = pl.from_arrow(_arrow(bd.tables["step_trace_time"])).select(ASCEND_STEP_COLUMNS)  # type: ignore[union-attr]
        t.write_csv(out / "cluster_step_trace_time.csv")
        paths.append(out / "cluster_step_trace_time.csv")
    cm = results.get("comm_matrix")
    if cm is not None and not cm.skipped and "matrix" in cm.tables:
        (out / "cluster_communication_matrix.json").write_text(json.dumps(matrix_json(cm.tables["matrix"]), indent=1))
        paths.append(out / "cluster_communication_matrix.json")
    co = results.get("collectives")
    if co is not None and not co.skipped:
        steps = bd.tables["breakdown"] if bd is not None and not bd.skipped else None
        (out / "cluster_communication.json").write_text(
            json.dumps(communication_json(co.tables["per_rank"], steps), indent=1))
        paths.append(out / "cluster_communication.json")
    return paths


def _group_key(ranks: str) -> str:
    return "(" + ", ".join(x for x in ranks.split(",") if x) + ")"


def matrix_json(matrix: Any) -> dict[str, Any]:
    """cluster_communication_matrix.json from the ``comm_matrix`` table."""
    m = frame(_arrow(matrix))
    out: dict[str, Any] = {}
    for row in m.iter_rows(named=True):  # one row per (pg, op, src, dst): small
        op_key = f"{row['op']}-total@{row['pg_name']}"
        group = out.setdefault(_group_key(str(row.get("pg_ranks") or row["pg_name"])), {}).setdefault("step", {})
        t_ms = (row["time_ns"] or 0) / 1e6
        group.setdefault(op_key, {})[f"{row['src']}-{row['dst']}"] = {
            "Transport Type": "UNKNOWN", "Transit Size(MB)": row["bytes"] / 1e6, "Transit Time(ms)": t_ms,
            "Bandwidth(GB/s)": row["bandwidth_gbps"] or 0.0, "op_name": op_key}
    return out


def _time_info(r: dict[str, Any]) -> dict[str, Any]:
    elapse = r["span"] / 1e6
    wait = r["wait"] / 1e6
    transit = max(elapse - wait, 0.0)
    ratio = wait / (wait + transit) if wait + transit > 0 else 0.0
    return {"Communication Time Info": {
        "Start Timestamp(us)": r["start"] / 1e3, "Elapse Time(ms)": elapse, "Transit Time(ms)": transit,
        "Wait Time(ms)": wait, "Synchronization Time(ms)": wait, "Idle Time(ms)": 0.0,
        "Wait Time Ratio": ratio, "Synchronization Time Ratio": ratio},
        "Communication Bandwidth Info": {"UNKNOWN": {
            "Transit Size(MB)": max(r["bytes"], 0) / 1e6, "Transit Time(ms)": transit,
            "Bandwidth(GB/s)": (max(r["bytes"], 0) / 1e6) / transit if transit > 0 else 0.0,
            "Large Packet Ratio": 0.0, "Size Distribution": {}}}}


def _with_steps(pr: pl.DataFrame, steps: Any) -> pl.DataFrame:
    if steps is None:
        return pr.with_columns(step=pl.lit(-1, pl.Int64))
    s = pl.from_arrow(_arrow(steps)).select("rank", pl.col("ts").alias("start"), "step").sort("start")  # type: ignore[union-attr]
    return pr.sort("start").join_asof(s, on="start", by="rank", strategy="backward", check_sortedness=False).with_columns(
        pl.col("step").fill_null(-1))


def communication_json(per_rank: Any, steps: Any) -> dict[str, Any]:
    """cluster_communication.json from the ``collectives`` per-rank table."""
    pr = _with_steps(pl.from_arrow(_arrow(per_rank)), steps)  # type: ignore[arg-type]
    out: dict[str, Any] = {}
    for r in pr.iter_rows(named=True):
        step = out.setdefault(_group_key(r["pg_ranks"]), {}).setdefault(f"step{r['step']}", {})
        step.setdefault(f"{r['op']}@{r['pg_name']}#{r['instance']}", {})[str(r["rank"])] = _time_info(r)
    tot = pr.group_by(["pg_ranks", "step", "rank"]).agg(
        pl.col("span").sum(), pl.col("wait").sum(), pl.col("bytes").clip(0).sum(), pl.col("start").min())
    for r in tot.iter_rows(named=True):
        step = out[_group_key(r["pg_ranks"])][f"step{r['step']}"]
        step.setdefault("Total Op Info", {})[str(r["rank"])] = _time_info(r)
    return out
