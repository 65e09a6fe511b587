"""GPU idle time per stream, split into host wait, kernel wait and other.

Pattern: per rank and stream, kernels in start order; each kernel's gap to what ran before it is
"host wait" when its launch (the runtime call, by correlation) started after that end (the device
waited for the host), else "kernel wait" when shorter than ``KERNEL_WAIT_NS``, else "other".

- ``idle_time`` (rankscope): the gap is to the latest end of every earlier kernel on the stream and
  counts only when positive (overlapping kernels on one stream leave no idle time); the first
  kernel has no gap;
- ``hta_idle_time`` / ``hta_idle_intervals``: HTA's ``get_idle_time_breakdown``
  (hta/analyzers/breakdown_analysis.py:730-800: gap 754-756, host wait 769, kernel wait 777; 803-919):
  the gap is to the previous kernel's end in start
  order, negative gaps included (they land in kernel wait), the first kernel counts as an "other"
  gap of no length; kernels, memcpy and memset by category; ratios per stream; µs, rounded to 2.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.classify import DEVICE_KINDS
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.gpu.stats import describe
from rankscope.analysis.gpu.kernels import _launch_ts
from rankscope.analysis.rankdata import Later, RankData, part_of
from rankscope.model.run import Run

KERNEL_WAIT_NS = 30_000  # HTA's consecutive_kernel_delay default (trace_analysis.py:587: 30 µs)
HTA_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")
CATEGORIES = ("host_wait", "kernel_wait", "other")


def _hta_stream(k: pl.DataFrame) -> tuple[list[dict[str, Any]], pl.DataFrame]:
    """One stream, HTA's way (breakdown_analysis.py:763-800)."""
    o = hv.pd_argsort(k["ts"].to_numpy())
    ts, end = k["ts"].to_numpy()[o], k["end"].to_numpy()[o]
    launch = k["ts_runtime"].to_numpy()[o]
    prev = np.r_[np.nan, end[:-1].astype(np.float64)]
    gap = np.r_[np.nan, (ts[1:] - end[:-1]).astype(np.float64)]
    host = launch > prev  # NaN compares False
    kwait = ~host & (gap < KERNEL_WAIT_NS)
    cat = np.where(host, 0, np.where(kwait, 1, 2))
    df = pl.DataFrame({"idle_category": [CATEGORIES[c] for c in cat], "gap": gap / 1000.0}, nan_to_null=True)
    sums = df.group_by("idle_category").agg(pl.col("gap").sum().alias("idle_time")).sort("idle_category")
    total = sums["idle_time"].sum()
    rows = [{"idle_category": c, "idle_time": float(np.round(v, 2)),
             "idle_time_ratio": float(np.round(v / total, 2)) if total else float("nan")}
            for c, v in sums.iter_rows()]
    return rows, describe(df, ["idle_category"], "gap")


def _hta_part(d: RankData) -> tuple[list[dict[str, Any]], list[pl.DataFrame]]:
    v = hv.view(d)
    f = v.frame
    k = f.select("stream", "cid", "index_correlation", "ts", "end").filter(  # a filter copies all it is given
        (pl.col("stream") != -1) & pl.col("cid").is_in([v.cat_id(c) for c in HTA_CATS]))
    # the launch's start: the event whose index is the kernel's index_correlation (none: NaN)
    starts = f.select(pl.col("idx").alias("index_correlation"), pl.col("ts").alias("ts_runtime")).unique(
        "index_correlation", keep="first")
    k = k.join(starts, on="index_correlation", how="left", maintain_order="left").with_columns(
        pl.col("ts_runtime").cast(pl.Float64).fill_null(float("nan")))
    rows, stats = [], []
    for s in k["stream"].unique(maintain_order=True).to_list():
        r, st = _hta_stream(k.filter(pl.col("stream") == s))
        rows += [{"rank": d.rank, "stream": s, **x} for x in r]
        stats.append(st.with_columns(rank=pl.lit(d.rank), stream=pl.lit(s)))
    return rows, stats


def _own_part(d: RankData) -> list[dict[str, Any]]:
    dev = d.kind_in(DEVICE_KINDS)
    ts, dur, stream, corr = d.col("ts"), d.col("dur"), d.col("stream"), d.col("correlation")
    launch_all, _ = _launch_ts(d.kind_in(("runtime",)), corr, ts, dur, dev)
    out = []
    for s in np.unique(stream[dev]).tolist():  # one pass per stream (few), vectorized within
        sel = stream[dev] == s
        t0, e0, la0 = ts[dev][sel], (ts + dur)[dev][sel], launch_all[sel]
        o = np.lexsort((e0, t0))
        t, e, la = t0[o], e0[o], la0[o][1:]
        prev = np.maximum.accumulate(e)[:-1]
        gap = np.clip(t[1:] - prev, 0, None)
        host = (la >= 0) & (la > prev) & (gap > 0)
        kwait = ~host & (gap > 0) & (gap < KERNEL_WAIT_NS)
        other = ~host & ~kwait & (gap > 0)
        span = int(e.max() - t[0])
        out.append({"rank": d.rank, "stream": int(s), "kernels": len(t), "span": span,
                    "idle": int(gap.sum()), "host_wait": int(gap[host].sum()), "kernel_wait": int(gap[kwait].sum()),
                    "other": int(gap[other].sum())})
    return out


@guarded
def rank_part(d: RankData) -> Later | None:
    if not d.kind_in(DEVICE_KINDS).any():
        return None
    own = _own_part(d)
    return Later(guarded(lambda data: _with_hta(data, own)), (hv.KEY,))  # view side: after the events


def _with_hta(d: RankData, own: list[dict[str, Any]]) -> dict[str, Any]:
    rows, stats = _hta_part(d)
    return {"own": own, "hta": rows, "stats": stats}


def run_gpu_idle(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, part_of(rank_part, run, r)) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [p for _, p in parts if p is not None]
    if not got:
        return with_problems(problems, Result("gpu_idle", skipped="no GPU kernels in any rank (CPU-only trace)"))
    own = pl.DataFrame([x for p in got for x in p["own"]])
    own = own.with_columns(idle_pct=100.0 * pl.col("idle") / pl.col("span").clip(1))
    hta = pl.DataFrame([x for p in got for x in p["hta"]],
                       schema={"rank": pl.Int64, "stream": pl.Int64, "idle_category": pl.Utf8,
                               "idle_time": pl.Float64, "idle_time_ratio": pl.Float64})
    stats = pl.concat([s for p in got for s in p["stats"]]) if any(p["stats"] for p in got) else pl.DataFrame()
    if stats.height:
        stats = stats.select("rank", "stream", "idle_category", *[c for c in stats.columns if c not in (
            "rank", "stream", "idle_category")]).with_columns(pl.col(pl.Float64).round(2))
    tables = {"idle_time": own, "hta_idle_time": hta, "hta_idle_intervals": stats}
    return with_problems(problems, Result("gpu_idle", tables=tables,
                  summary={"idle_ns": int(own["idle"].sum()), "host_wait_ns": int(own["host_wait"].sum())}))


ANALYSIS = Analysis(
    name="gpu_idle",
    description="GPU idle time per stream: host wait, kernel wait, other (HTA parity)",
    run=run_gpu_idle,
    needs=("kernels",),
    rank_part=rank_part, combine=combine,
    view=View("GPU idle time per stream (host wait, kernel wait, other)", (
        Col("idle_ns", "idle", NS), Col("host_wait_ns", "waiting for the host", NS)), (
        TableView("idle_time", "per rank and stream (gaps after the latest earlier end)", (
            Col("rank", "rank", "count"), Col("stream", "stream", "count"), Col("kernels", "kernels", "count"),
            Col("span", "span", NS), Col("idle", "idle", NS), Col("idle_pct", "idle (%)", "float"),
            Col("host_wait", "host wait", NS), Col("kernel_wait", "kernel wait", NS), Col("other", "other", NS))),
        TableView("hta_idle_time", "as HTA's idle time breakdown", (
            Col("rank", "rank", "count"), Col("stream", "stream", "count"), Col("idle_category", "category", "words"),
            Col("idle_time", "idle", "us"), Col("idle_time_ratio", "share of the stream's idle", "float")))),
        "needs GPU kernels in the traces", optional=True),
)
