"""HTA-compatible temporal breakdown and communication–computation overlap.

Pattern: Holistic Trace Analysis considers device activity (kernels, memcpy, memset) that starts
at or after the first ``ProfilerStep`` and before the *last* one begins (its last step is
dropped). Within that range:

- temporal breakdown: compute = union of non-communication kernels, idle = range − union of
  all device activity, non-compute = the rest;
- comm–comp overlap = |union(comm kernels) ∩ union(compute kernels)| / |union(comm kernels)|,
  kernels only (memcpy/memset count neither as compute nor as communication).

Matching HTA lets users compare numbers one-to-one (checked against holistictraceanalysis 0.5.0
on HTA's own trace_filter data: see tests/golden); the rankscope ``breakdown`` keeps every step.
Needs one rank's events at a time.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from rankscope.analysis.base import Result
from rankscope.analysis.classify import DEVICE_KINDS, col
from rankscope.analysis.intervals import coverage, merge, per_window
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

_COLS = ["kind", "ts", "dur", "is_comm", "external_id", "correlation"]


def _union(ts: np.ndarray, end: np.ndarray) -> int:
    s, e = merge(ts, end)
    return int((e - s).sum())


def _window(run: Run, rank: int, data: RankData | None = None) -> dict[str, np.ndarray] | None:
    """Device activity of one rank inside HTA's window: ts, end, kernel, comm masks."""
    d = data if data is not None else RankData(run, rank, _COLS)
    ts, dur = d.col("ts"), d.col("dur")
    dev = d.kind_in(DEVICE_KINDS).copy()
    steps = col(d.table("steps"), "ts")
    if len(steps) > 1:
        dev &= (ts >= steps[0]) & (ts < steps[-1])
    if not dev.any():
        return None
    return {"ts": ts[dev], "end": (ts + dur)[dev], "kernel": d.kind_in(("kernel",))[dev], "comm": d.comm()[dev]}


def _temporal(rank: int, w: dict[str, np.ndarray]) -> dict[str, Any]:
    ts, end, k, comm = w["ts"], w["end"], w["kernel"], w["comm"]
    lo, hi = int(ts.min()), int(end.max())
    compute = _union(ts[k & ~comm], end[k & ~comm])
    busy = _union(ts, end)
    total = hi - lo
    return {"rank": rank, "total": total, "compute": compute, "non_compute": busy - compute,
            "idle": total - busy}


def _overlap(rank: int, w: dict[str, np.ndarray]) -> dict[str, Any]:
    ts, end, k, comm = w["ts"], w["end"], w["kernel"], w["comm"]
    sets = {"c": (ts[k & ~comm], end[k & ~comm]), "m": (ts[k & comm], end[k & comm])}
    lo, hi = np.array([int(ts.min())]), np.array([int(end.max())])
    seg, length, cov = coverage(sets, lo, hi)
    both = int(per_window(seg, length, cov["c"] & cov["m"], 1)[0]) if len(seg) else 0
    comm_t = int(per_window(seg, length, cov["m"], 1)[0]) if len(seg) else 0
    pct = 100.0 * both / comm_t if comm_t else 0.0
    return {"rank": rank, "comm_time": comm_t, "overlapped": both, "overlap_pct": pct}


def temporal(run: Run, rank: int) -> dict[str, int] | None:
    """idle / compute / non_compute / total (ns) of one rank in HTA's window, None without device work."""
    w = _window(run, rank)
    return None if w is None else _temporal(rank, w)


def overlap(run: Run, rank: int) -> dict[str, Any] | None:
    """HTA's communication–computation overlap of one rank (percent of comm time under compute)."""
    w = _window(run, rank)
    return None if w is None else _overlap(rank, w)


def rank_part(d: RankData) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Per-rank step of the shared pass: (temporal row, overlap row), None without device work."""
    w = _window(d.run, d.rank, d)
    return None if w is None else (_temporal(d.rank, w), _overlap(d.rank, w))


def run_hta_temporal(run: Run, results: dict) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r, _COLS))) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, Any]], results: dict) -> Result:
    """The ``hta_temporal`` result from the per-rank parts."""
    temp = [p[0] for _, p in parts if p is not None]
    ov = [p[1] for _, p in parts if p is not None]
    if not temp:
        return Result("hta_temporal", skipped="no GPU kernels in any rank (CPU-only trace)")
    return Result("hta_temporal", tables={"hta_temporal": pa.Table.from_pylist(temp),
                                          "comm_comp_overlap": pa.Table.from_pylist(ov)},
                  summary={"overlap_pct": {o["rank"]: round(o["overlap_pct"], 2) for o in ov}})
