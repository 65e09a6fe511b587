"""Memory copy / set bandwidth: per copy kind (Memcpy HtoD, DtoH, DtoD, ..., Memset).

Pattern: each memcpy / memset adds Kineto's "memory bandwidth (GB/s)" while it runs; the running sum
per copy kind is the bandwidth in use (HTA's ``get_memory_bw_time_series``,
hta/analyzers/trace_counters.py:259-325; kinds by name, utils.py:120; a 0 µs copy lasts 1 µs).

- ``hta_memory_bw``: HTA's series (µs since the earliest event of all ranks, HTA's order of equal
  times); ``hta_memory_bw_summary``: HTA's describe() over the series' positive points;
- ``memory_bw`` (rankscope): per rank and kind, operations, bytes, busy time (union), and the achieved
  bandwidth = bytes / busy time — what moved and how fast, not an average of instantaneous points.
``series`` gives the running bandwidth on the rank's clock (the timeline's counter tracks).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.gpu.stats import describe
from rankscope.analysis.rankdata import Later, RankData, part_of
from rankscope.model.run import Run


Columns = tuple[np.ndarray, np.ndarray, np.ndarray]


def copy_columns(d: RankData) -> Columns:
    """(idx, bytes, bandwidth) of the events named as memory kernels: all that ``copies`` reads of the events,
    taken before they are freed (the rest of the part reads the HTA view, after them: issue 26)."""
    nid, names = d.memo("name_codes", lambda: hv.codes(d.events.column("name")))
    rows = np.flatnonzero(np.isin(nid, [i for i, n in enumerate(names) if hv.kernel_type(n) == hv.MEMORY]))
    return rows + 1, d.col("bytes")[rows], d.col("bandwidth")[rows]


def copies(d: RankData, v: hv.View, cols: Columns | None = None) -> pl.DataFrame:
    """HTA's memory kernels of the frame with their kind (``name``), in frame order; 0 µs lasts 1 µs;
    a copy without Kineto's bandwidth has HTA's default, 0 (hta/configs/default_event_args.py). ``cols``:
    ``copy_columns`` of the rank (else read from its events)."""
    mem = v.name_ids("memory_kernels", lambda n: hv.kernel_type(n) == hv.MEMORY)
    k = hv.device(v.frame.select("idx", "nid", "ts", "pid", "dur", "stream")).filter(pl.col("nid").is_in(mem))
    idx = k["idx"].to_numpy()
    if cols is None:
        nbytes, bw = hv.column(d, "bytes", idx), hv.column(d, "bandwidth", idx)
    else:  # every such row of the frame is an event named as a memory kernel: in cols
        at = np.searchsorted(cols[0], idx)
        nbytes, bw = cols[1][at], cols[2][at]
    k = k.with_columns(bytes=pl.Series(nbytes), bandwidth=pl.Series(bw))
    k = k.join(v.name_map("memory_kind", hv.memory_kind), on="nid", how="left", maintain_order="left")
    return k.select(pl.col("memory_kind").alias("name"), "ts", "pid", "bytes",
                    pl.when(pl.col("dur") == 0).then(1000).otherwise(pl.col("dur")).alias("dur"),
                    pl.col("bandwidth").clip(0.0).alias("memory_bw_gbps"))


def steps(c: pl.DataFrame, hta_order: bool) -> pl.DataFrame:
    """Start (+bw) and end (−bw) rows, summed per kind in time order."""
    rows = pl.concat([c.select("name", "ts", "pid", "memory_bw_gbps"),
                      c.select("name", (pl.col("ts") + pl.col("dur")).alias("ts"), "pid",
                               (-pl.col("memory_bw_gbps")).alias("memory_bw_gbps"))])
    if hta_order:  # trace_counters.py:312: pandas' unstable sort of the concatenation
        rows = rows[hv.pd_argsort(rows["ts"].to_numpy())]
    else:  # ends before starts at equal times: back-to-back copies do not add up
        rows = rows.with_row_index("_o").sort("ts", "memory_bw_gbps", "_o").drop("_o")
    cum = np.zeros(rows.height)
    names = rows["name"].to_numpy()
    bw = rows["memory_bw_gbps"].to_numpy()
    out = []
    for n in sorted(set(names.tolist())):  # groupby("name"): sorted kinds, cumsum in row order
        sel = np.flatnonzero(names == n)
        cum[sel] = np.cumsum(bw[sel])
        out.append(sel)
    order = np.concatenate(out) if out else np.zeros(0, np.int64)
    return rows.with_columns(memory_bw_gbps=pl.Series(cum))[order]


def series(d: RankData) -> pl.DataFrame:
    """rankscope's running bandwidth per kind of one rank: name, ts (ns, the rank's clock), gbps."""
    v = hv.view(d)
    s = steps(copies(d, v), hta_order=False)
    return s.select("name", (pl.col("ts") + v.tmin + v.base).alias("ts"), pl.col("memory_bw_gbps").alias("gbps"))


def _own(d: RankData, c: pl.DataFrame) -> list[dict[str, Any]]:
    out = []
    for (name,), g in c.group_by("name", maintain_order=True):
        ts = g["ts"].to_numpy()
        s, e = hv.merged(ts, ts + g["dur"].to_numpy())
        busy = int((e - s).sum())
        nbytes = int(g["bytes"].clip(0).sum())
        out.append({"rank": d.rank, "name": name, "ops": g.height, "bytes": nbytes, "busy": busy,
                    "bandwidth_gbps": nbytes / busy if busy else 0.0,
                    "peak_gbps": float(g["memory_bw_gbps"].to_numpy().max())})
    return out


@guarded
def rank_part(d: RankData) -> Later:
    cols = copy_columns(d)
    return Later(guarded(lambda data: _part(data, cols)), (hv.KEY,))  # view side: after the events


def _part(d: RankData, cols: Columns | None = None) -> dict[str, Any] | None:
    v = hv.view(d)
    c = copies(d, v, cols)
    if not c.height:
        return None
    hta = steps(c, hta_order=True).select("name", pl.col("ts") + v.tmin, "memory_bw_gbps").with_columns(
        rank=pl.lit(d.rank))
    return {"tmin": v.tmin, "hta": hta, "own": _own(d, c)}


def run_memory_bw(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, part_of(rank_part, run, r)) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [p for _, p in parts if p is not None]
    if not got:
        return with_problems(problems, Result("memory_bw", skipped="no memcpy / memset on the device in any rank"))
    tmin = min(p["tmin"] for p in got)
    ser = pl.concat([p["hta"] for p in got]).select("rank", "name", hv.to_us(pl.col("ts") - tmin).alias("ts"),
                                                   "memory_bw_gbps")
    summ = describe(ser.filter(pl.col("memory_bw_gbps") > 0), ["rank", "name"], "memory_bw_gbps")
    own = pl.DataFrame([x for p in got for x in p["own"]])
    tables = {"memory_bw": own, "hta_memory_bw": ser, "hta_memory_bw_summary": summ}
    return with_problems(problems, Result("memory_bw", tables=tables,
                  summary={"bytes": int(own["bytes"].sum())}))


ANALYSIS = Analysis(
    name="memory_bw",
    description="memcpy / memset bandwidth per copy kind (HTA parity)",
    run=run_memory_bw,
    needs=("kernels",),
    rank_part=rank_part, combine=combine,
    view=View("Memory copy / set bandwidth", (Col("bytes", "bytes moved", "bytes"),), (
        TableView("memory_bw", "per rank and copy kind (bandwidth = bytes / busy time)", (
            Col("rank", "rank", "count"), Col("name", "kind"), Col("ops", "operations", "count"),
            Col("bytes", "bytes", "bytes"), Col("busy", "busy", NS), Col("bandwidth_gbps", "bandwidth", "gbps"),
            Col("peak_gbps", "fastest", "gbps"))),
        TableView("hta_memory_bw_summary", "as HTA's memory bandwidth summary", (
            Col("rank", "rank", "count"), Col("name", "kind"), Col("count", "points", "count"),
            Col("mean", "mean", "gbps"), Col("max", "max", "gbps")))),
        "needs memcpy / memset on the device", optional=True),
)
