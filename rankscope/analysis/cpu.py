"""CPU scheduling per rank and step: time the training thread spent waiting for a CPU.

Source: the ``sched`` block of each window in a rank's meta.json (written by ``rankscope.profile``
from ``/proc/thread-self/schedstat``, see :mod:`rankscope.collect.sched`). Traces collected
without rankscope's profile have none: every function here then returns an empty answer and
the analyses that use it say nothing about contention.
"""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.stats import as_float
from rankscope.model.run import Run

SCHEMA = {"rank": pl.Int64, "step": pl.Int64, "cpu_ns": pl.Int64, "runq_wait_ns": pl.Int64}
# the straggler's extra own time is "contention" when at least this share of it was run-queue wait
CONTENTION_SHARE = 0.5


def sched_frame(run: Run) -> pl.DataFrame:
    """rank, step, cpu_ns, runq_wait_ns for every captured step that has scheduler data."""
    rows: list[tuple[int, int, int | None, int | None]] = []
    for rank, info in run.ranks.items():
        for w in info.meta.get("windows") or []:
            s = w.get("sched") if isinstance(w, dict) else None
            if not isinstance(s, dict):
                continue
            steps, cpu, wait = s.get("step") or [], s.get("cpu_ns") or [], s.get("runq_wait_ns") or []
            rows += [(rank, int(st), c, q) for st, c, q in zip(steps, cpu, wait)]
    frame = pl.DataFrame(rows, schema=SCHEMA, orient="row")
    return frame.unique(["rank", "step"], keep="last")


def wait_excess(sched: pl.DataFrame, rank: int, own_excess_ns: float) -> dict[str, Any] | None:
    """How much more ``rank`` waited for a CPU per step than the other ranks (medians over steps).

    Returns None without run-queue data for ``rank`` and at least one other rank."""
    q = sched.filter(pl.col("runq_wait_ns").is_not_null())
    mine, others = q.filter(pl.col("rank") == rank), q.filter(pl.col("rank") != rank)
    if mine.height == 0 or others.height == 0:
        return None
    ref = others.group_by("step").agg(ref=pl.col("runq_wait_ns").median())
    paired = mine.join(ref, on="step")
    if paired.height == 0:
        return None
    excess = as_float((paired["runq_wait_ns"] - paired["ref"]).median(), 0.0)
    share = excess / own_excess_ns if own_excess_ns > 0 else 0.0
    return {"runq_wait_ns": round(as_float(mine["runq_wait_ns"].median(), 0.0)),
            "others_median_ns": round(as_float(ref["ref"].median(), 0.0)),
            "excess_ns": round(excess), "share_of_excess": round(share, 3), "steps": paired.height,
            "source": "/proc/thread-self/schedstat (run-queue wait of the training thread)"}


def wait_share(sched: pl.DataFrame, bd: pl.DataFrame) -> pl.DataFrame:
    """Per rank: median run-queue wait per step and its share of the median step wall time."""
    q = sched.filter(pl.col("runq_wait_ns").is_not_null())
    if q.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "runq_wait_ns": pl.Float64, "share": pl.Float64})
    walls = bd.group_by("rank").agg(wall=pl.col("wall").median().cast(pl.Float64))
    return (q.group_by("rank").agg(runq_wait_ns=pl.col("runq_wait_ns").median().cast(pl.Float64))
            .join(walls, on="rank").with_columns(share=pl.col("runq_wait_ns") / pl.col("wall"))
            .select("rank", "runq_wait_ns", "share").sort("rank"))
