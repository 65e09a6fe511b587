"""A likely straggler: the evidence points at one rank but does not reach the bar of a verdict.

The straggler rules (``straggler.own_time_stragglers``) need an own-time excess above a threshold in
most steps. Below that bar the run is not "healthy" when the other evidence agrees: one rank arrives
last at most matched collectives (the others wait for it) *and* has the longest own time in most
steps. Measured (issue 12): a 4-rank LM whose rank 2 got 1.5x the tokens was missed in 4 of 10 runs
with a green "no straggler", while that rank arrived last at 13 of 16 collectives and had the longest
own time in 7 of 8 steps. Then the verdict says "likely straggler: rank 2 (...)", with the counts, at a
lower confidence, and draws no cause from it.

Rules: the rank most often last among instances with at least 2 arrivals; last at >= LAST_SHARE of
them and more often than chance (binomial tail under 1/n per instance below P_MAX); the longest own time
in >= STEP_SHARE of the complete steps; its median own time >= TWIN_SPREAD above the others' median
(below it, ``below_bar_note`` says what was seen, unnamed, beside "no straggler").
"""
from __future__ import annotations

from math import exp, lgamma, log
from typing import TYPE_CHECKING, Any

import polars as pl

from rankscope.analysis.base import Finding, Result, Severity
from rankscope.model.run import Run

if TYPE_CHECKING:
    from rankscope.analysis.diagnosis.bound import Bound

LAST_SHARE = 0.5
STEP_SHARE = 0.6
P_MAX = 0.01
MIN_INSTANCES = 4
MIN_STEPS = 3
# ... and an own time at least this much above the others' median: smaller, steady differences are
# the spread of healthy hardware (a rank on a slower socket), not a rank to look at
MIN_EXCESS = 0.05
# Ranks doing identical work differ steadily: a rank named on own time and arrival order alone (no test
# against the other ranks' spread) must exceed that. Measured (bench/twin_noise.py, 2 vCPUs, CPUs rotated
# every step): plain twin processes differed by up to +8.7 % (4 of 40 pairs at +5 % or more in 8 of 8
# steps); healthy profiled 2-rank DDP decode jobs by up to +14 % (2 of 20 named with a 10 % bar, in 8 of 8
# steps); healthy 4-rank decode jobs (bench/workloads.py runs 9, 10): a rank +8 % to +11 %, last at 6-7 of 8
# collectives, slowest in 5-8 of 8 steps. A persistent per-process difference, not noise that a test on 8
# steps can reject. (At 2 ranks arrival order adds nothing: the slower of two arrives last.)
TWIN_SPREAD = 0.20


def binom_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), 0 < p < 1 (log space: n may be in the thousands)."""
    lp, lq = log(p), log(1 - p)
    return min(1.0, sum(exp(lgamma(n + 1) - lgamma(i + 1) - lgamma(n - i + 1) + i * lp + (n - i) * lq)
                        for i in range(k, n + 1)))


def arrivals(run: Run, results: dict[str, Result]) -> pl.DataFrame:
    """Per rank: how often it arrived last at matched collectives (clocks aligned), of how many."""
    from rankscope.analysis.clock.alignment import alignment_from, matched_collectives
    from rankscope.analysis.comm.links import instances

    inst = instances(matched_collectives(run), alignment_from(results))
    if inst.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "last": pl.UInt32, "of": pl.Int64})
    inst = inst.filter(pl.col("second").is_not_null() & (pl.col("last") > pl.col("second")))
    return (inst.group_by(pl.col("last_rank").cast(pl.Int64).alias("rank")).agg(last=pl.len())
            .with_columns(of=pl.lit(inst.height, pl.Int64)).sort("last", descending=True))


def evidence(run: Run, results: dict[str, Result], per_step: pl.DataFrame, pr: pl.DataFrame,
             excluded: list[int]) -> dict[str, Any] | None:
    """The most-often-last rank's evidence when it passes every rule but TWIN_SPREAD, else None (read once,
    then given to ``likely_from`` and ``below_bar_note``)."""
    n_ranks = pr.height
    if n_ranks < 2 or per_step.height < MIN_STEPS:
        return None
    arr = arrivals(run, results).filter(~pl.col("rank").is_in(excluded))
    if arr.height == 0:
        return None
    rank, last, of = int(arr["rank"][0]), int(arr["last"][0]), int(arr["of"][0])
    slowest = int((per_step["slowest"] == rank).sum())
    steps = per_step.height
    mine = pr.filter(pl.col("rank") == rank)
    others = pr.filter(pl.col("rank") != rank)
    if mine.height == 0 or others.height == 0:
        return None
    own, ref = float(mine["own"][0]), float(others["own"].median() or 0)  # type: ignore[arg-type]
    p = binom_tail(last, of, 1 / n_ranks)
    if (of < MIN_INSTANCES or last < LAST_SHARE * of or p >= P_MAX or slowest < STEP_SHARE * steps
            or ref <= 0 or own < (1 + MIN_EXCESS) * ref):
        return None
    return {"rank": rank, "last_arrivals": last, "instances": of, "binomial_p": round(p, 6),
            "longest_own_time_steps": slowest, "steps": steps, "own_time_ns": round(own),
            "others_median_ns": round(ref), "relative_excess": round(own / ref - 1, 4), "ranks": n_ranks}


def likely_straggler(run: Run, results: dict[str, Result], per_step: pl.DataFrame, pr: pl.DataFrame,
                     excluded: list[int]) -> Finding | None:
    """The likely straggler, or None (see the module's rules)."""
    return likely_from(evidence(run, results, per_step, pr, excluded))


def likely_from(found: dict[str, Any] | None) -> Finding | None:
    """The likely straggler from ``evidence``'s result, or None under TWIN_SPREAD."""
    if found is None or found["relative_excess"] < TWIN_SPREAD:
        return None
    ev = {k: v for k, v in found.items() if k not in ("rank", "ranks")}
    rank, last, of, slowest, steps = (found[k] for k in ("rank", "last_arrivals", "instances",
                                                         "longest_own_time_steps", "steps"))
    rel = ev["relative_excess"]
    conf = round(min(last / of, slowest / steps) * 0.6, 2)
    return Finding(kind="likely_straggler", severity=Severity.INFO, ranks=(rank,), evidence=ev, confidence=conf,
                   title=(f"likely straggler: rank {rank} (arrived last at {last} of {of} collectives; longest own "
                          f"time in {slowest} of {steps} steps; own time +{rel:.0%} vs the other ranks' median, "
                          "below the bar for a verdict; no cause drawn)"))


def below_bar_note(ev: dict[str, Any] | None) -> str:
    """What ``evidence`` showed when it stayed under TWIN_SPREAD ("" otherwise): said beside "no straggler",
    never a finding."""
    if ev is None or ev["relative_excess"] >= TWIN_SPREAD:
        return ""
    seen = (f"rank {ev['rank']}'s own time was +{ev['relative_excess']:.1%} over the other's, longer in "
            f"{ev['longest_own_time_steps']} of {ev['steps']} steps" if ev["ranks"] == 2 else
            f"rank {ev['rank']} arrived last at {ev['last_arrivals']} of {ev['instances']} collectives, its own time "
            f"+{ev['relative_excess']:.1%} vs the other ranks' median, the longest in {ev['longest_own_time_steps']} "
            f"of {ev['steps']} steps")
    return (f"{seen}; not named: with no other evidence, a difference under {TWIN_SPREAD:.0%} is within what "
            "ranks doing identical work show (up to +14% measured)")


def input_imbalance(run: Run, pr: pl.DataFrame, excluded: list[int], b: "Bound | None" = None,
                    saved: dict[int, float] | None = None, no_path: str = "",
                    results: dict[str, Result] | None = None) -> str:
    """More input work on a rank, said beside "no straggler" with what it cost: among the 3 ranks with the most
    compute per step, one with >= IMBALANCE_WORK more input elements per step than the others (a count from the
    shapes, no noise). "An input imbalance that cost no time" only where the critical path shows it: the rank
    does not bound most steps (``bound.Bound``); where it does, its what-if saving is the cost; without a path
    the cost is not told. Measured (bench/workloads.py run 9, 4 ranks on 2 cores): a rank with 1.28x the input
    work, compute +6 %, own time -1 %; the MoE job of issue 25: a rank with 2.5x the expert tokens called
    "cost no time" while the others waited for it inside the all_to_all (booked as compute then). A pipeline
    stage's rank is compared with its replicas only (``work.work_peers``: the other stages hold other layers)."""
    from rankscope.analysis.diagnosis.work import IMBALANCE_WORK, imbalance, imbalance_note, work_peers

    rows = pr.filter(~pl.col("rank").is_in(excluded)).sort("computing", descending=True)
    ranks = rows["rank"].to_list()
    for rank in ranks[:3]:
        work = imbalance(run, rank, work_peers(results or {}, ranks, rank))
        if not work or not work.get("shapes_recorded") or work.get("work_ratio", 1.0) - 1 < IMBALANCE_WORK:
            continue
        what = f"rank {rank} has{imbalance_note(work)[1:]}"
        if saved is None or rank not in saved:
            own = float(rows.filter(pl.col("rank") == rank)["own"][0])
            ref = float(rows.filter(pl.col("rank") != rank)["own"].median() or 0)  # type: ignore[arg-type]
            rel = f"{own / ref - 1:+.0%}" if ref > 0 else "?"
            return (f"{what}, its own time {rel} vs the other ranks' median; what it cost is not told without the "
                    f"critical path ({no_path or 'none'})")
        if b is not None and rank == b.rank and b.steady:
            return what  # its cost on the critical path is said beside it (``Bound.below_bar``)
        who = f"rank {b.rank} bounds {b.steps} of {b.of_steps}" if b is not None else "no rank bounds them"
        if b is not None and b.costs(saved[rank]):  # it did cost time, just not steadily
            return (f"{what}; on the critical path its what-if saves {saved[rank] / 1e6:.1f} ms per step "
                    f"({saved[rank] / b.step_ns:.1%}), but it does not bound the steps steadily ({who})")
        return (f"{what}, but the critical path shows it did not bound the steps ({who}; rank {rank}'s what-if saving "
                f"{saved[rank] / 1e6:.1f} ms per step): an input imbalance that cost no time in these steps")
    return ""
