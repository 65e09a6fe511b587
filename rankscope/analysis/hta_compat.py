"""HTA-compatible temporal breakdown (Holistic Trace Analysis's window rules).

Pattern: HTA considers device activity (kernels, memcpy, memset) from the first to the last
one that starts before the *last* ``ProfilerStep`` begins (its last step is dropped). Within
that range: compute = union of non-communication kernels, idle = range − union of all device
activity, non-compute = the rest. Matching HTA lets users compare numbers one-to-one; the
rankscope breakdown (``breakdown``) keeps every step instead.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from rankscope.analysis.base import Result
from rankscope.analysis.intervals import merge
from rankscope.model.run import Run


def _union(ts: np.ndarray, end: np.ndarray) -> int:
    s, e = merge(ts, end)
    return int((e - s).sum())


def temporal(run: Run, rank: int) -> dict[str, int] | None:
    """idle / compute / non_compute / total (ns) of one rank in HTA's window, None without device work."""
    ev = run.table(rank, "events", columns=["kind", "ts", "dur", "is_comm"])
    kind = np.asarray(ev.column("kind").to_numpy(zero_copy_only=False)).astype(str)
    ts, dur = np.asarray(ev.column("ts")), np.asarray(ev.column("dur"))
    comm = np.asarray(ev.column("is_comm"))
    dev = np.isin(kind, ("kernel", "memcpy", "memset"))
    steps = np.asarray(run.table(rank, "steps", columns=["ts"]).column("ts"))
    if len(steps) > 1:
        dev &= (ts >= steps[0]) & (ts < steps[-1])
    if not dev.any():
        return None
    end = ts + dur
    lo, hi = int(ts[dev].min()), int(end[dev].max())
    compute = _union(ts[dev & (kind == "kernel") & ~comm], end[dev & (kind == "kernel") & ~comm])
    busy = _union(ts[dev], end[dev])
    total = hi - lo
    return {"rank": rank, "total": total, "compute": compute, "non_compute": busy - compute,
            "idle": total - busy}


def run_hta_temporal(run: Run, results: dict) -> Result:
    rows = [t for t in (temporal(run, r) for r in run.rank_ids) if t is not None]
    if not rows:
        return Result("hta_temporal", skipped="no GPU kernels in any rank (CPU-only trace)")
    table = pa.Table.from_pylist(rows)
    return Result("hta_temporal", tables={"hta_temporal": table})
