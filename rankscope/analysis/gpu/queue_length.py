"""Launch queue length per CUDA stream: outstanding operations over time, their summary, and the
time the queue was full.

Pattern: +1 at each launch call's start, −1 at its device event's start (joined by correlation),
running sum per stream in time order (HTA's definition, hta/analyzers/trace_counters.py:19-95).

- ``hta_queue_length``: HTA's time series (µs since the earliest event of all ranks, HTA's order of
  equal timestamps); ``hta_queue_length_summary``: HTA's describe() over its points (unweighted);
  ``hta_queue_full``: HTA's time at ≥ ``max_queue_length`` (one stream per rank, the last one found:
  trace_counters.py:195-257);
- ``queue_length_summary`` (rankscope): per stream, the time-weighted mean (a value held for 1 s counts
  1000 times one held for 1 ms), the maximum, the time at it and the time at ≥ the limit
  (``$RANKSCOPE_MAX_QUEUE_LENGTH``, default 1024 as HTA: CUDA's launch queue).
``series`` gives rankscope's series on the rank's clock (the timeline's counter tracks).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.gpu.stats import describe
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

LAUNCHES = ("cudaMemsetAsync", "cudaMemcpyAsync", "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
            "runFunction - job_prep_and_submit_for_execution", "hipLaunchKernel", "hipExtModuleLaunchKernel",
            "hipMemcpyAsync", "hipMemsetAsync", "hipMemcpyWithStream")  # trace_symbol_table.py:316


def max_queue_length() -> int:
    try:
        return int(os.environ.get("RANKSCOPE_MAX_QUEUE_LENGTH", "1024"))
    except ValueError:
        return 1024


def steps(v: hv.View, hta_order: bool) -> pl.DataFrame:
    """+1 / −1 rows (stream, ts, queue) in the order the running sum takes them."""
    f = v.frame  # the columns chosen before the rows: a filter copies every column it is given (issue 26)
    rt = f.select("nid", "index_correlation", "correlation", "ts").filter(
        pl.col("nid").is_in(v.name_ids("launches", lambda n: n in LAUNCHES)) & (pl.col("index_correlation") > 0))
    k = f.select("correlation", "stream", "pid", "ts").filter(pl.col("stream") != -1)
    up = rt.select("correlation", "ts").join(k.select("correlation", "stream", "pid"), on="correlation", how="left",
                                             maintain_order="left")
    down = k.filter(pl.col("correlation").is_in(rt["correlation"].implode()))
    rows = pl.concat([up.select("stream", "pid", "ts", pl.lit(1).alias("queue")),
                      down.select("stream", "pid", "ts", pl.lit(-1).alias("queue"))])
    if hta_order:  # pandas' unstable sort_values(by="ts") of the concatenation (trace_counters.py:80)
        rows = rows[hv.pd_argsort(rows["ts"].to_numpy())]
    else:  # launches before device starts at equal times
        rows = rows.with_row_index("_o").sort("ts", "queue", "_o", descending=[False, True, False]).drop("_o")
    rows = rows.filter(pl.col("stream").is_not_null())
    return rows.with_columns(queue_length=pl.col("queue").cum_sum().over("stream")).sort("stream", maintain_order=True)


def series(d: RankData) -> pl.DataFrame:
    """rankscope's queue length series of one rank: stream, ts (ns, the rank's clock), queue_length."""
    v = hv.view(d)
    s = steps(v, hta_order=False)
    return s.select("stream", (pl.col("ts") + v.tmin + v.base).alias("ts"), "queue_length")


def _own(rank: int, s: pl.DataFrame, limit: int) -> list[dict[str, Any]]:
    out = []
    for (stream,), g in s.group_by("stream", maintain_order=True):
        ts, q = g["ts"].to_numpy(), g["queue_length"].to_numpy()
        held = np.r_[np.diff(ts), 0]
        span = int(ts[-1] - ts[0])
        qmax = int(q.max())
        out.append({"rank": rank, "stream": int(stream), "changes": len(q), "max": qmax,
                    "mean_time_weighted": float((q * held).sum() / span) if span else float(q.mean()),
                    "time_at_max": int(held[q == qmax].sum()), "time_full": int(held[q >= limit].sum()),
                    "limit": limit})
    return out


def _hta_full(rank: int, s: pl.DataFrame, duration: int, limit: int) -> dict[str, Any] | None:
    """trace_counters.py:195-257: per stream in order of appearance; a later stream replaces the row."""
    row = None
    for stream in s["stream"].unique(maintain_order=True).to_list():
        g = s.filter(pl.col("stream") == stream)
        ts, q = g["ts"].to_numpy(), g["queue_length"].to_numpy()
        dur = np.r_[np.diff(ts), 0]
        sel = q >= limit
        if sel.any():
            t = float(dur[sel].sum()) / 1000.0
            row = {"rank": rank, "stream": stream, "duration_at_max_queue_length": t,
                   "relative_duration_at_max_queue_length": t * 1000.0 / duration if duration else float("nan")}
    return row


@guarded
def rank_part(d: RankData) -> dict[str, Any] | None:
    v = hv.view(d)
    f = v.frame
    hta = steps(v, hta_order=True)
    if not hta.height:
        return None
    limit = max_queue_length()
    own = steps(v, hta_order=False)
    ts = f["ts"].to_numpy()
    duration = int(ts.max() - ts.min())
    hta = hta.select("stream", pl.col("ts") + v.tmin, "queue_length").with_columns(rank=pl.lit(d.rank))
    return {"tmin": v.tmin, "hta": hta,
            "own": _own(d.rank, own, limit), "full": _hta_full(d.rank, hta, duration, limit)}


def run_queue_length(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [p for _, p in parts if p is not None]
    if not got:
        why = "no kernel launches with their device events in any rank"
        return with_problems(problems, Result("queue_length", skipped=why))
    tmin = min(p["tmin"] for p in got)  # HTA aligns every rank to the earliest event (trace.py:696)
    ser = pl.concat([p["hta"] for p in got]).select(
        "rank", pl.col("stream").cast(pl.Int64), hv.to_us(pl.col("ts") - tmin).alias("ts"), "queue_length")
    summ = describe(ser, ["rank", "stream"], "queue_length")
    full = [p["full"] for p in got if p["full"] is not None]
    full_t = pl.DataFrame(full, schema={"rank": pl.Int64, "stream": pl.Int64, "duration_at_max_queue_length": pl.Float64,
                                        "relative_duration_at_max_queue_length": pl.Float64})
    own = pl.DataFrame([x for p in got for x in p["own"]])
    return with_problems(problems, Result("queue_length", tables={"queue_length_summary": own, "hta_queue_length": ser,
                                          "hta_queue_length_summary": summ, "hta_queue_full": full_t},
                  summary={"max_queue_length": int(own["max"].to_numpy().max()), "time_full_ns": int(own["time_full"].sum())}))


ANALYSIS = Analysis(
    name="queue_length",
    description="launch queue length per stream: series, summary, time at a full queue (HTA parity)",
    run=run_queue_length,
    needs=("kernels",),
    rank_part=rank_part, combine=combine, rank_reads=(hv.KEY,),
    view=View("Launch queue length per stream", (
        Col("max_queue_length", "longest queue", "count"), Col("time_full_ns", "time with a full queue", NS)), (
        TableView("queue_length_summary", "per rank and stream", (
            Col("rank", "rank", "count"), Col("stream", "stream", "count"), Col("max", "longest", "count"),
            Col("mean_time_weighted", "mean over time", "float"), Col("time_at_max", "time at the longest", NS),
            Col("time_full", "time at the limit", NS), Col("limit", "limit", "count"))),
        TableView("hta_queue_length_summary", "as HTA's queue length summary (over its points)", (
            Col("rank", "rank", "count"), Col("stream", "stream", "count"), Col("count", "points", "count"),
            Col("mean", "mean", "float"), Col("50%", "median", "float"), Col("max", "max", "float")))),
        "needs kernel launches with their kernels", optional=True),
)
