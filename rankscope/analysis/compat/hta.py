"""HTA-compatible temporal breakdown and communication–computation overlap.

Pattern: the rank's events as Holistic Trace Analysis 0.5.0 loads them (``gpu/htaview.py``: kernels
launched before the last ProfilerStep starts, HTA's µs rounding), then HTA's definitions on every
event with a stream (hta/analyzers/breakdown_analysis.py:642-727, communication_analysis.py:24-90):

- temporal breakdown: kernel time = last end − first start; idle = kernel time − union of all;
  compute = union of COMPUTATION kernels (by name, hta/utils/utils.py:109); non-compute = the rest;
- comm–comp overlap = |union(COMMUNICATION) ∩ union(COMPUTATION)| / |union(COMMUNICATION)|
  (HTA's table: NaN without communication kernels, as HTA divides by zero; rankscope's: 0).

Tables ``hta_temporal_breakdown`` and ``hta_comm_comp_overlap`` carry HTA's columns (µs, percent
rounded to 2 places); ``hta_temporal`` and ``comm_comp_overlap`` the same numbers in ns. Checked value
by value against HTA on every GPU trace in ../shared/data/hta (tests/golden/test_hta_oracle.py).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import View
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.stats import sweep
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run


def _busy(ts: np.ndarray, end: np.ndarray) -> int:
    s, e = hv.merged(ts, end)
    return int((e - s).sum())


def _temporal(rank: int, k: pl.DataFrame) -> dict[str, Any]:
    ts, end = k["ts"].to_numpy(), k["end"].to_numpy()
    s, e = hv.merged(ts, end)
    total = int(e[-1] - s[0])
    idle = total - int((e - s).sum())
    comp = k.filter(pl.col("kernel_type") == hv.COMPUTATION)
    compute = _busy(comp["ts"].to_numpy(), comp["end"].to_numpy())
    return {"rank": rank, "total": total, "compute": compute, "non_compute": total - compute - idle, "idle": idle}


def _overlap(rank: int, k: pl.DataFrame) -> dict[str, Any]:
    comm = k.filter(pl.col("kernel_type") == hv.COMMUNICATION)
    comp = k.filter(pl.col("kernel_type") == hv.COMPUTATION)
    t = sweep([("m", comm["ts"].to_numpy(), comm["end"].to_numpy()), ("c", comp["ts"].to_numpy(), comp["end"].to_numpy())])
    both, comm_t = t.get("m overlapping c", 0), t.get("m", 0) + t.get("m overlapping c", 0)
    pct = 100.0 * both / comm_t if comm_t else 0.0
    return {"rank": rank, "comm_time": comm_t, "overlapped": both, "overlap_pct": pct}


def _kernels(d: RankData) -> pl.DataFrame | None:
    v = hv.view(d)
    k = hv.device(v.frame.select("nid", "ts", "end", "stream"))  # the columns read: a filter copies all it is given
    return None if k.height == 0 else v.kernel_types(k)


def temporal(run: Run, rank: int) -> dict[str, int] | None:
    """idle / compute / non_compute / total (ns) of one rank as HTA computes them, None without device work."""
    k = _kernels(RankData(run, rank))
    return None if k is None else _temporal(rank, k)


def overlap(run: Run, rank: int) -> dict[str, Any] | None:
    """HTA's communication–computation overlap of one rank (percent of comm time under compute)."""
    k = _kernels(RankData(run, rank))
    return None if k is None else _overlap(rank, k)


def rank_part(d: RankData) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Per-rank step of the shared pass: (temporal row, overlap row), None without device work."""
    k = _kernels(d)
    return None if k is None else (_temporal(d.rank, k), _overlap(d.rank, k))


def run_hta_temporal(run: Run, results: dict) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def _hta_tables(temp: list[dict[str, Any]], ov: list[dict[str, Any]]) -> dict[str, pa.Table]:
    rows = []
    for t in temp:
        tot = t["total"] or 1
        rows.append({"rank": t["rank"], "idle_time(us)": t["idle"] / 1e3, "compute_time(us)": t["compute"] / 1e3,
                     "non_compute_time(us)": t["non_compute"] / 1e3, "kernel_time(us)": t["total"] / 1e3,
                     "idle_time_pctg": float(np.round(100 * t["idle"] / tot, 2)),
                     "compute_time_pctg": float(np.round(100 * t["compute"] / tot, 2)),
                     "non_compute_time_pctg": float(np.round(100 * t["non_compute"] / tot, 2))})
    # HTA divides by the communication time even when there is none: NaN (communication_analysis.py:73-75)
    over = [{"rank": o["rank"], "comp_comm_overlap_pctg": float(np.round(o["overlap_pct"], 2)) if o["comm_time"]
             else float("nan")} for o in ov]
    return {"hta_temporal_breakdown": pa.Table.from_pylist(rows), "hta_comm_comp_overlap": pa.Table.from_pylist(over)}


def combine(run: Run, parts: list[tuple[int, Any]], results: dict) -> Result:
    """The ``hta_temporal`` result from the per-rank parts."""
    temp = [p[0] for _, p in parts if p is not None]
    ov = [p[1] for _, p in parts if p is not None]
    if not temp:
        return Result("hta_temporal", skipped="no GPU kernels in any rank (CPU-only trace)")
    tables = {"hta_temporal": pa.Table.from_pylist(temp), "comm_comp_overlap": pa.Table.from_pylist(ov),
              **_hta_tables(temp, ov)}
    return Result("hta_temporal", tables=tables,
                  summary={"overlap_pct": {o["rank"]: round(o["overlap_pct"], 2) for o in ov}})


ANALYSIS = Analysis(
    name="hta_temporal",
    description="HTA-compatible temporal breakdown (idle / compute / non-compute)",
    run=run_hta_temporal,
    needs=("kernels",),
    rank_part=rank_part, combine=combine, rank_reads=(hv.KEY,),
    view=View("Device time: idle, compute, non-compute (as HTA's temporal breakdown)",
        empty="needs GPU kernels in the traces (profile a CUDA or NPU job with device activities)", place="operators"),
)
