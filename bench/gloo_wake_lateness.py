"""How late gloo closes a collective's span after the thread waiting for it resumed (the critical path's
``timed.LATE_END_NS``), measured on kept runs of bench/workloads.py (gloo on CPU).

Per rank and ``c10d::*`` issue op: the gloo span it issued (the first ``gloo:*`` span starting after it), the
longest idle gap on the issuing thread between the issue and that span's end + 50 ms (the untraced
``Work.wait()``), and the thread's resumption after that gap minus the span's end. Negative: the thread resumed
while the span was still open (gloo closes it after waking the waiter). Only gaps over 5 ms are counted.

    .venv/bin/python bench/gloo_wake_lateness.py /tmp/wl-dec/run0 /tmp/wl-dec/run1 ...
"""
from __future__ import annotations

import sys

import numpy as np
import polars as pl

from rankscope.analysis.rankdata import RankData
from rankscope.model.run import load_run

MS = 1e6


def lateness(path: str) -> list[tuple[int, float, float]]:
    """(rank, gap ms, resumption - span end ms) per issue op of the run at ``path``."""
    run = load_run(path, jobs=1)
    out = []
    for r in run.rank_ids:
        ev = pl.from_arrow(RankData(run, r).events).filter(pl.col("stream") == -1)
        ev = ev.with_columns(pl.col("name").cast(pl.String)).filter(~pl.col("name").str.starts_with("ProfilerStep"))
        spans = ev.filter(pl.col("name").str.starts_with("gloo:")).sort("ts")
        s_ts, s_end = spans["ts"].to_numpy(), (spans["ts"] + spans["dur"]).to_numpy()
        for row in ev.filter(pl.col("name").str.starts_with("c10d::")).sort("ts").iter_rows(named=True):
            k = int(np.searchsorted(s_ts, row["ts"]))
            if k >= len(s_ts):
                continue
            th = ev.filter((pl.col("tid") == row["tid"]) & (pl.col("ts") >= row["ts"])
                           & (pl.col("ts") <= s_end[k] + 50 * MS)).sort("ts")
            ts, end = th["ts"].to_numpy(), (th["ts"] + th["dur"]).to_numpy()
            if len(ts) < 2:
                continue
            gaps = ts[1:] - np.maximum.accumulate(end)[:-1]
            i = int(np.argmax(gaps))
            out.append((r, gaps[i] / MS, (ts[i + 1] - s_end[k]) / MS))
    return out


def main(paths: list[str]) -> None:
    rows = [row for p in paths for row in lateness(p)]
    late = np.array([d for _, gap, d in rows if gap > 5])
    if not len(late):
        print("no waits over 5 ms")
        return
    before = late[late < 0]
    by = f"median {-np.median(before):.1f}, 90th percentile {-np.quantile(before, 0.1):.1f}, most {-before.min():.1f}"
    print(f"{len(late)} waits over 5 ms in {len(paths)} runs; the thread resumed before the span closed in "
          f"{len(before)}, by (ms) " + (by if len(before) else "-"))
    far = -before[before < -20]
    if len(far):
        print(f"over 20 ms before (LATE_END_NS: not taken as a wait): {len(far)}, "
              + ", ".join(f"{v:.1f}" for v in far))


if __name__ == "__main__":
    main(sys.argv[1:])
