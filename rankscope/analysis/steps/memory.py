"""Device memory over time per rank: allocated and reserved, the peak and the operator at the peak.

Pattern: the ``[memory]`` instant events carry the allocator's running totals after each
allocation or free. The timeline is downsampled to at most ``MAX_POINTS`` per rank and device
(keeping each bucket's maximum, so the peak survives); the operator at the peak is the deepest
CPU operator whose span contains the peak's timestamp. Needs memory events; reads one rank's
tables at a time.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import Col, TableView, View
from rankscope.analysis.classify import col
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

MAX_POINTS = 500


def _timeline(rank: int, dev: int, ts: np.ndarray, alloc: np.ndarray, res: np.ndarray) -> pa.Table:
    n = len(ts)
    bucket = (np.arange(n) * MAX_POINTS // max(n, 1)) if n > MAX_POINTS else np.arange(n)
    first = np.r_[True, bucket[1:] != bucket[:-1]]
    idx = np.flatnonzero(first)
    return pa.table({"rank": np.full(len(idx), rank, np.int64), "device": np.full(len(idx), dev, np.int32),
                     "ts": ts[idx], "allocated": np.maximum.reduceat(alloc, idx),
                     # the CPU allocator has no reserve: Kineto writes 0, which is unknown, not zero
                     "reserved": np.maximum.reduceat(res, idx) if dev >= 0 else pa.nulls(len(idx), pa.int64())})


def _op_at(d: RankData, t: int) -> str:
    """Name of the deepest CPU operator whose span contains ``t`` (only that one name is decoded)."""
    ts = d.col("ts")
    end = ts + d.col("dur")
    m = d.kind_in(("cpu_op",)) & (ts <= t) & (end >= t)
    if not m.any():
        return ""
    i = int(np.flatnonzero(m)[np.argmax(d.col("depth")[m])])
    return str(d.events.column("name")[i].as_py() or "")


def rank_memory(run: Run, rank: int, data: RankData | None = None) -> tuple[list[pa.Table], list[dict[str, Any]]]:
    """Downsampled timelines and peak rows (one per device) of one rank."""
    d = data if data is not None else RankData(run, rank, ["name", "kind", "ts", "dur", "depth"])
    mem = d.table("memory")
    if mem.num_rows == 0:
        return [], []
    ts, dev = col(mem, "ts"), col(mem, "device")
    alloc, res = col(mem, "total_allocated"), col(mem, "total_reserved")
    lines, peaks = [], []
    for dv in np.unique(dev):  # one pass per device, not per event
        m = dev == dv
        o = np.argsort(ts[m], kind="stable")
        t, a, r = ts[m][o], alloc[m][o], res[m][o]
        lines.append(_timeline(rank, int(dv), t, a, r))
        i = int(np.argmax(a))
        peaks.append({"rank": rank, "device": int(dv), "peak_allocated": int(a[i]), "peak_ts": int(t[i]),
                      "peak_reserved": int(r.max()) if dv >= 0 else None,  # CPU (-1): no reserve, unknown
                      "operator_at_peak": _op_at(d, int(t[i]))})
    return lines, peaks


def rank_part(d: RankData) -> tuple[list[pa.Table], list[dict[str, Any]]]:
    """Per-rank step of the shared pass (``registry.per_rank_pass``)."""
    return rank_memory(d.run, d.rank, d)


def run_memory(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``memory``: tables ``timeline`` and ``peaks``."""
    return combine(run, [(r, rank_memory(run, r)) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, tuple[list[pa.Table], list[dict[str, Any]]]]],
            results: dict[str, Any]) -> Result:
    """The ``memory`` result from the per-rank parts."""
    lines, peaks = [], []
    for _, (ls, ps) in parts:
        lines += ls
        peaks += ps
    if not peaks:
        return Result("memory", skipped="no [memory] events (profile with profile_memory=True)")
    top = max(peaks, key=lambda p: p["peak_allocated"])
    return Result("memory", tables={"timeline": pa.concat_tables(lines), "peaks": pa.Table.from_pylist(peaks)},
                  summary={"max_peak_allocated": top["peak_allocated"], "max_peak_rank": top["rank"]})


ANALYSIS = Analysis(
    name="memory",
    description="allocated / reserved memory over time, peak and operator at peak",
    run=run_memory,
    needs=("memory",),
    rank_part=rank_part, combine=combine,
    view=View("Memory", (Col("max_peak_allocated", "largest peak allocated", "bytes"),
                   Col("max_peak_rank", "on rank", "count")),
        (TableView("peaks", "per rank and device: the peak and the operator running at it", (
            Col("rank", "rank", "count"), Col("device", "device", "device"),
            Col("peak_allocated", "peak allocated", "bytes"), Col("peak_reserved", "peak reserved", "bytes"),
            Col("operator_at_peak", "operator at the peak"))),),
        empty="no memory events: profile with profile_memory=True", place="memory"),
)
