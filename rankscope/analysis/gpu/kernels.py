"""HTA-parity kernel analyses: kernel breakdown, launch statistics and idle-time breakdown.

Pattern (Holistic Trace Analysis's definitions, vectorized):

- kernel breakdown: device time per class (communication, memory = memcpy/memset, computation)
  per rank and its share; top-N kernels with sum/mean/min/max/std over ranks (``opstats``).
- launch statistics: each kernel, memcpy and memset joined to its runtime call by ``correlation``:
  CPU call duration, GPU duration, launch delay = device start − end of the call, clipped at 0
  (HTA's definition, hta/analyzers/cuda_kernel_analysis.py:616-621); counts of short kernels (GPU
  duration < CPU call duration), of launch delays over ``LAUNCH_DELAY_NS`` and of runtime calls over
  ``RUNTIME_CUTOFF_NS`` (HTA's cutoffs; per-launch rows: ``analysis/gpu/launch_delay.py``).
- idle-time breakdown: each gap before a device event on its stream is "host wait" when its call
  started after the previous one ended (strictly, as HTA: breakdown_analysis.py:769), "kernel wait"
  when the gap is shorter than ``KERNEL_WAIT_NS`` (back-to-back launch overhead), else "other";
  summed over the rank's streams (per stream: ``analysis/gpu/idle_time.py``).

Needs GPU kernels; reads one rank's events at a time.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import View
from rankscope.analysis.classify import DEVICE_KINDS
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

LAUNCH_DELAY_NS = 100_000
RUNTIME_CUTOFF_NS = 50_000
KERNEL_WAIT_NS = 30_000
_COLS = ["name", "kind", "ts", "dur", "stream", "is_comm", "external_id", "correlation"]


def _launch_ts(runtime: np.ndarray, corr: np.ndarray, ts: np.ndarray, dur: np.ndarray,
               dev: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Launch start and launch CPU duration of each device event (-1 when not found)."""
    rt = runtime & (corr >= 0)
    rc, order = corr[rt], np.argsort(corr[rt], kind="stable")
    rc, rts, rdur = rc[order], ts[rt][order], dur[rt][order]
    launch = np.full(dev.sum(), -1, np.int64)
    ldur = np.full(dev.sum(), -1, np.int64)
    if len(rc):
        dc = corr[dev]
        pos = np.clip(np.searchsorted(rc, dc), 0, len(rc) - 1)
        ok = (rc[pos] == dc) & (dc >= 0)
        launch[ok], ldur[ok] = rts[pos][ok], rdur[pos][ok]
    return launch, ldur


def rank_kernels(run: Run, rank: int, data: RankData | None = None) -> dict[str, Any] | None:
    """Class totals, launch stats and idle breakdown of one rank (None without device work)."""
    d = data if data is not None else RankData(run, rank, _COLS)
    dev = d.kind_in(DEVICE_KINDS)
    if not dev.any():
        return None
    ts, dur, corr = d.col("ts"), d.col("dur"), d.col("correlation")
    comm = d.comm()[dev]
    is_kernel = d.kind_in(("kernel",))[dev]
    k_ts, k_dur, stream = ts[dev], dur[dev], d.col("stream")[dev]
    launch, ldur = _launch_ts(d.kind_in(("runtime",)), corr, ts, dur, dev)
    classes = {"computation": int(k_dur[is_kernel & ~comm].sum()), "communication": int(k_dur[comm].sum()),
               "memory": int(k_dur[~is_kernel & ~comm].sum())}
    return {"classes": classes, "launch": _launch_row(rank, is_kernel, k_ts, k_dur, launch, ldur),
            "idle": _idle_row(rank, k_ts, k_dur, stream, launch)}


def _launch_row(rank: int, is_kernel: np.ndarray, ts: np.ndarray, dur: np.ndarray, launch: np.ndarray,
                ldur: np.ndarray) -> dict[str, Any]:
    ok = launch >= 0  # kernels, memcpy and memset with their runtime call
    delay = np.clip(ts[ok] - (launch[ok] + ldur[ok]), 0, None)
    pct = (lambda q: float(np.percentile(delay, q)) if len(delay) else 0.0)
    return {"rank": rank, "kernels": int(is_kernel.sum()), "linked": int(ok.sum()),
            "launch_cpu_mean": float(ldur[ok].mean()) if ok.any() else 0.0,
            "launch_delay_p50": pct(50), "launch_delay_p95": pct(95),
            "launch_delay_max": float(delay.max()) if len(delay) else 0.0,
            "short_kernels": int((dur[ok] < ldur[ok]).sum()),
            "long_delays": int((delay > LAUNCH_DELAY_NS).sum()),
            "long_runtime": int((ldur[ok] > RUNTIME_CUTOFF_NS).sum())}


def _idle_row(rank: int, ts: np.ndarray, dur: np.ndarray, stream: np.ndarray, launch: np.ndarray) -> dict[str, Any]:
    order = np.lexsort((ts, stream))
    s, t, e, la = stream[order], ts[order], (ts + dur)[order], launch[order]
    prev_end = _prev_end(s, e)
    has_prev = prev_end > np.iinfo(np.int64).min
    gap = (t - np.where(has_prev, prev_end, t)).clip(0)
    host = has_prev & (la >= 0) & (la > prev_end) & (gap > 0)
    kwait = has_prev & ~host & (gap > 0) & (gap < KERNEL_WAIT_NS)
    other = has_prev & ~host & ~kwait & (gap > 0)
    return {"rank": rank, "idle": int(gap.sum()), "host_wait": int(gap[host].sum()),
            "kernel_wait": int(gap[kwait].sum()), "other": int(gap[other].sum())}


def _prev_end(s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Running max end of the earlier events on the same stream (int64 min for the first)."""
    lo = np.iinfo(np.int64).min
    first = np.r_[True, s[1:] != s[:-1]]
    shifted = np.r_[lo, e[:-1]]
    shifted[first] = lo
    out = np.empty(len(e), np.int64)
    starts = np.flatnonzero(first)
    for g0, g1 in zip(starts, np.r_[starts[1:], len(e)]):  # one pass per stream (few), not per event
        out[g0:g1] = np.maximum.accumulate(shifted[g0:g1])
    return out


def rank_part(d: RankData) -> dict[str, Any] | None:
    """Per-rank step of the shared pass (``registry.per_rank_pass``)."""
    return rank_kernels(d.run, d.rank, d)


def run_kernels(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``kernels``: class breakdown, launch stats, idle breakdown, top kernels."""
    return combine(run, [(r, rank_kernels(run, r)) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, dict[str, Any] | None]], results: dict[str, Any]) -> Result:
    """The ``kernels`` result from the per-rank parts."""
    rows = [(r, k) for r, k in parts if k is not None]
    if not rows:
        return Result("kernels", skipped="no GPU kernels in any rank (CPU-only trace)")
    cls = []
    for r, k in rows:
        total = sum(k["classes"].values()) or 1
        cls += [{"rank": r, "class": c, "time": v, "pct": 100.0 * v / total} for c, v in k["classes"].items()]
    tables = {"kernel_classes": pa.Table.from_pylist(cls),
              "launch_stats": pa.Table.from_pylist([k["launch"] for _, k in rows]),
              "idle_breakdown": pa.Table.from_pylist([k["idle"] for _, k in rows])}
    op = results.get("opstats")
    if op is not None and not op.skipped and "kernels" in op.tables:
        tables["top_kernels"] = op.tables["kernels"]
    return Result("kernels", tables=tables)


ANALYSIS = Analysis(
    name="kernels",
    description="kernel classes, launch statistics, idle-time breakdown (HTA parity)",
    run=run_kernels,
    needs=("kernels",),
    uses=("opstats",),
    rank_part=rank_part, combine=combine,
    view=View("Kernels", empty="needs GPU kernels in the traces (profile a CUDA or NPU job with device activities)", place="operators"),
)
