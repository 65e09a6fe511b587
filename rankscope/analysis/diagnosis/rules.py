"""The statistical rules that name a straggler candidate: outlier tests on per-rank medians and
step-by-step tests (one-sided Wilcoxon signed-rank) on per-step excesses.

Split out of :mod:`rankscope.analysis.diagnosis.straggler` (which adds cause, time lost and the findings) when
that module outgrew ~400 lines. Inputs are the "breakdown" table (rank, step, wall, comm_exposed,
computing, data_wait, free, complete) and, where ``rankscope.profile`` recorded them, the scheduler
samples of :mod:`rankscope.analysis.diagnosis.cpu`.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from rankscope.analysis.stats import as_float, high_outliers, signed_rank_p

REL_THRESHOLD = 0.10  # 3+ ranks: a statistical test also applies
# 2 ranks: no outlier test is possible on two numbers. Two ways to be a straggler:
# - strong: own time +25 % at the median, above the other rank in 75 % of the steps (a margin over
#   the +17 % a healthy 2-rank demo run showed on a quiet 2-core host, bench/RESULTS.md);
# - paired: +8 % at the median and slower step by step beyond chance: one-sided Wilcoxon
#   signed-rank test on the per-step relative differences, p <= 0.002 (needs >= 9 steps: one healthy
#   8-step run had all 8 steps +17 %, p = 1/256). 18 healthy 20-step demo runs gave p >= 0.08 and at most +5 %;
#   injected stragglers (+12 % to +60 %) p <= 0.0014 (bench/RESULTS.md, stragglers).
PAIR_THRESHOLD = 0.25
PAIR_MIN = 0.08
PAIR_P = 0.002
CONSISTENCY = 0.6
PAIR_CONSISTENCY = 0.75  # 2 ranks: one of them is always "above the other's median"
COMPONENTS = {"computing": "compute", "data_wait": "data", "free": "host"}


def complete_steps(bd: pl.DataFrame) -> pl.DataFrame:
    """The complete steps of ``bd``; all of them when none is complete."""
    done = bd.filter(pl.col("complete"))
    return done if done.height else bd


def per_rank(bd: pl.DataFrame) -> pl.DataFrame:
    """Median per-rank step components over complete steps."""
    return (complete_steps(bd).with_columns(own=pl.col("wall") - pl.col("comm_exposed"))
            .group_by("rank").agg(pl.col(c).median() for c in
                                  ["wall", "own", "computing", "comm_exposed", "data_wait", "free"])
            .sort("rank"))


def outliers(values: np.ndarray, min_rel: float | None = None) -> list[tuple[int, float, str]]:
    """Indices of ranks whose own time is a high outlier: (index, relative excess, test)."""
    rel = min_rel if min_rel is not None else PAIR_THRESHOLD if len(values) == 2 else REL_THRESHOLD
    return [(o.index, o.rel_excess, o.test) for o in high_outliers(np.asarray(values, float), rel)]


def _paired_test(steps: pl.DataFrame, col: str, alpha: float) -> tuple[int, float] | None:
    """The rank whose median ``col`` is largest, when it exceeds the other ranks' median by PAIR_MIN
    and its per-step excess over the others' median in the same step passes a one-sided signed-rank
    test at ``alpha``: (rank, relative excess)."""
    med = steps.group_by("rank").agg(pl.col(col).median()).sort(col)
    if med.height < 2:
        return None
    rank = int(med["rank"][-1])
    ref = steps.filter(pl.col("rank") != rank).group_by("step").agg(ref=pl.col(col).median())
    mine = steps.filter(pl.col("rank") == rank).join(ref, on="step").filter(pl.col("ref") > 0)
    rest = as_float(med[col][:-1].median(), 0.0)
    if rest <= 0 or mine.height == 0:
        return None
    rel = as_float(med[col][-1]) / rest - 1
    if rel < PAIR_MIN or signed_rank_p((mine[col] / mine["ref"] - 1).to_numpy()) > alpha:
        return None
    return rank, rel


def with_sched(bd: pl.DataFrame, sched: pl.DataFrame | None) -> pl.DataFrame:
    """``bd`` with own time, and where ``sched`` covers every rank and step: own time minus run-queue
    wait (cpu_available), the training thread's CPU time (cpu) and its blocked time (blocked).
    A frame that already went through here is returned as it is."""
    if "cpu_available" in bd.columns:
        return bd
    steps = bd.with_columns(own=(pl.col("wall") - pl.col("comm_exposed")).cast(pl.Float64))
    if sched is None or not sched.height:
        return steps
    q = sched.filter(pl.col("runq_wait_ns").is_not_null()).select("rank", "step", "cpu_ns", "runq_wait_ns")
    joined = steps.join(q, on=["rank", "step"], how="inner")
    if joined.height != steps.height:
        return steps
    wait, cpu = pl.col("runq_wait_ns").cast(pl.Float64), pl.col("cpu_ns").cast(pl.Float64)
    # never below the CPU time the thread had (at most its own time): the run-queue wait is the whole step's,
    # also where the trace books communication wait (a thread woken by gloo waits for a CPU before the span ends).
    # Measured (tests/e2e/test_demo.py's healthy run, 2 ranks, beside the other pytest worker): rank 0 own 33.4 ms,
    # CPU 17.3 ms, run-queue wait 31.9 ms: own minus wait 1.5 ms, and rank 1 (16.5 ms) was named at +1078 %
    available = pl.max_horizontal(pl.col("own") - wait, pl.min_horizontal(cpu, pl.col("own")))
    return joined.with_columns(cpu_available=available, cpu=cpu, blocked=pl.col("own") - cpu - wait)


def paired(bd: pl.DataFrame, pr: pl.DataFrame, sched: pl.DataFrame | None = None) -> list[tuple[int, float, str]]:
    """Step-by-step tests for the slowest rank, each a one-sided signed-rank test of its per-step
    excess over the other ranks' median in the same step, at PAIR_P * 2 / ranks (the rank was
    picked as the slowest: Bonferroni), shared among the tests of each family below:
    - own time (wall minus exposed communication wait);
    - own time minus the training thread's run-queue wait, where ``sched`` has it for every rank
      ("cpu-available"): with more ranks than cores, waiting for a CPU swamps the whole step (a
      healthy rank +24 %) while the time a rank actually had a CPU stays within a few percent;
    - parts of own time against the others' own time: each component (compute, data wait, idle
      host) and, with ``sched``, the training thread's CPU time and its blocked time (own time minus
      CPU time minus run-queue wait: sleeps, I/O, locks). 5 ms of extra host time per step can
      stand out step after step where the total does not; blocked time is ~0 on a healthy demo rank
      (its only sleep is the exposed communication wait, which own time leaves out), so a rank that
      sleeps 3 ms per step in its data loader or its gradient hook stands out at once.
    Returns [(index into ``pr``, relative excess, test name)] or []."""
    n = pr.height
    if n < 2:
        return []
    steps = with_sched(bd, sched)
    tests = [("own", "signed-rank")]
    parts = dict(COMPONENTS)
    if "cpu_available" in steps.columns:
        tests.append(("cpu_available", "signed-rank (cpu-available)"))
        parts.update(cpu="cpu time", blocked="blocked")
    alpha = PAIR_P * 2 / n
    index = {int(r): i for i, r in enumerate(pr["rank"].to_list())}
    for col, name in tests:
        hit = _paired_test(steps, col, alpha / len(tests))
        if hit is not None:
            return [(index[hit[0]], hit[1], name)]
    own = pr["own"].to_numpy().astype(float)
    for c, label in parts.items():
        # the rank with the most of this part (not necessarily the slowest in total: with 4 ranks on
        # 2 cores, CPU noise of +-15 % hides a 1.5 ms sleep in the total, not in the blocked time)
        rank = int(steps.group_by("rank").agg(pl.col(c).median()).sort(c)["rank"][-1])
        i = index[rank]
        ref = steps.filter(pl.col("rank") != rank).group_by("step").agg(
            pl.col(x).cast(pl.Float64).median().alias(f"ref_{x}") for x in ("own", c))
        mine = steps.filter(pl.col("rank") == rank).join(ref, on="step").filter(pl.col("ref_own") > 0)
        excess = ((mine[c] - mine[f"ref_{c}"]) / mine["ref_own"]).to_numpy()
        if len(excess) and float(np.median(excess)) >= PAIR_MIN and signed_rank_p(excess) <= alpha / len(parts):
            rest = float(np.median(np.delete(own, i)))
            rel = own[i] / rest - 1 if rest > 0 else 0.0
            return [(i, max(float(rel), float(np.median(excess))), f"signed-rank ({label})")]
    return []


def consistency(bd: pl.DataFrame, rank: int, col: str = "own") -> float:
    """Fraction of steps in which ``rank``'s own time (or ``col`` of ``with_sched``) exceeds the other
    ranks' median."""
    own = bd if col in bd.columns else bd.with_columns(own=pl.col("wall") - pl.col("comm_exposed"))
    ref = own.filter(pl.col("rank") != rank).group_by("step").agg(pl.col(col).median().alias("ref"))
    mine = own.filter(pl.col("rank") == rank).join(ref, on="step")
    return as_float((mine[col] > mine["ref"]).mean(), 0.0) if mine.height else 0.0


def cpu_available_outliers(steps: pl.DataFrame, pr: pl.DataFrame) -> list[tuple[int, float, str]]:
    """The outlier tests of ``outliers`` on the median own time minus run-queue wait per rank (where
    ``with_sched`` added it): with a CPU hog beside a 2-rank demo, both ranks waited ~20 ms per step
    for a CPU, which diluted 20 ms of extra host work to +23 % own time (under the +25 % ratio rule)
    while the time the ranks had a CPU differed by +45 %. A fallback for heavy contention, so +25 % at
    any group size (smaller, steady differences are the step-by-step tests' job; at 4 ranks Dixon's Q
    on these medians flagged a healthy rank on a slower vCPU at +13 %)."""
    if "cpu_available" not in steps.columns:
        return []
    med = pr.select("rank").join(complete_steps(steps).group_by("rank").agg(pl.col("cpu_available").median()), on="rank", how="left")
    values = med["cpu_available"].to_numpy().astype(float)
    if np.isnan(values).any():
        return []
    return [(i, rel, f"{test} (cpu-available)") for i, rel, test in outliers(values, PAIR_THRESHOLD)]


def per_step(bd: pl.DataFrame) -> pl.DataFrame:
    """Per step: the rank with the longest own time and its excess over the other ranks' median."""
    own = bd.with_columns(own=(pl.col("wall") - pl.col("comm_exposed")).cast(pl.Float64))
    return (own.sort("own", descending=True).group_by("step").agg(
        slowest=pl.col("rank").first(), own=pl.col("own").first(),
        others_median=pl.col("own").slice(1).median(), ranks=pl.len())
        .with_columns(rel_excess=pl.col("own") / pl.col("others_median") - 1).sort("step"))
