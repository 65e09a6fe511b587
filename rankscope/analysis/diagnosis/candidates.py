"""Candidates a straggler rule names beyond the outlier tests: more operator calls, more input work,
arrival order; and which candidates are steady over the steps.

Split out of :mod:`rankscope.analysis.diagnosis.straggler`. Each returns [(index into the per-rank
table, relative excess of own time, test name)]; counts (calls, input elements) carry no timing noise,
which is why they may name a rank timings alone cannot.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import polars as pl

from rankscope.analysis.base import Result
from rankscope.analysis.diagnosis.rules import CONSISTENCY, PAIR_CONSISTENCY, PAIR_MIN, consistency, per_step
from rankscope.analysis.diagnosis.work import CAUSE_SHARE, Work, extra_calls_ns
from rankscope.analysis.stats import as_float
from rankscope.model.run import Run

def more_work(pr: pl.DataFrame, work_of: Callable[[int], Work | None]) -> list[tuple[int, float, str]]:
    """The rank with the longest median own time, when it is >= PAIR_MIN above the others' median and
    operators it calls more often per step than the others (``Work.more_calls``: counts, no noise) hold
    >= CAUSE_SHARE of that excess. Healthy data-parallel ranks call the same operators; where timings
    alone are too noisy to tell, the counts can. Measured: one extra matmul block per step at 2 ranks
    with the CPUs rotated (vCPUs of different speed, swapped every step): own time +29 %, but the
    per-step ratio swung between 0.79 and 2.48, so neither the +25 % ratio rule (70 % of the steps
    above) nor the signed-rank test spoke, in 3 of 6 runs."""
    if pr.height < 2:
        return []
    i = int(np.argmax(pr["own"].to_numpy()))
    rank, own = int(pr["rank"][i]), float(pr["own"][i])
    others = pr.filter(pl.col("rank") != rank)
    rest = as_float(others["own"].median(), 0.0)
    if rest <= 0 or own / rest - 1 < PAIR_MIN:
        return []
    return [(i, own / rest - 1, "more calls")] if extra_calls_ns(work_of(rank)) >= CAUSE_SHARE * (own - rest) else []


def more_input(pr: pl.DataFrame, work_of: Callable[[int], Work | None],
               last_of: Callable[[int], float] = lambda rank: 0.0,
               cpu: dict[int, float] | None = None) -> list[tuple[int, float, str]]:
    """Among the 3 ranks with the longest own time, one whose input work per step (elements of its
    operators' inputs: shapes, no noise) is >= IMBALANCE_WORK above the others' and whose own time is
    >= PAIR_MIN above theirs, or >= MIN_EXCESS when the others waited for it at most collectives
    (``last_of(rank)`` >= LAST_SHARE: the extra work costs them time). Measured (bench/workloads.py, 4 ranks
    on 2 cores): an LM rank with 1.3-1.6x longer sequences had +20-40 % own time, but with four processes
    sharing two cores the other ranks' own times spread too much for Dixon's test in 5 of 10 runs; in run 7
    a rank with 1.35x the input work had own time +5 % and arrived last at 6 of 8 collectives."""
    from rankscope.analysis.diagnosis.likely import LAST_SHARE, MIN_EXCESS
    from rankscope.analysis.diagnosis.work import IMBALANCE_WORK

    if pr.height < 2:
        return []
    for i in np.argsort(-pr["own"].to_numpy())[:3]:
        rank, own = int(pr["rank"][int(i)]), float(pr["own"][int(i)])
        rest = as_float(pr.filter(pl.col("rank") != rank)["own"].median(), 0.0)
        work = work_of(rank)
        if rest <= 0 or not work or work.get("work_ratio", 1.0) - 1 < IMBALANCE_WORK:
            continue
        rel = own / rest - 1
        if rel >= PAIR_MIN or (rel >= MIN_EXCESS and last_of(rank) >= LAST_SHARE):
            return [(int(i), rel, "input work")]
    return more_input_cpu(pr, work_of, last_of, cpu or {})


def more_input_cpu(pr: pl.DataFrame, work_of: Callable[[int], Work | None], last_of: Callable[[int], float],
                   cpu: dict[int, float]) -> list[tuple[int, float, str]]:
    """``more_input`` on the training thread's CPU time (``cpu``: rank -> median per step) where own time cannot
    tell: with more ranks than CPUs, each rank's own time holds the run-queue wait the others' work causes. A rank
    with >= IMBALANCE_WORK more input elements, whose CPU time is over the others' by PAIR_MIN and by half its
    extra input, and that the others waited for at most collectives (``last_of`` >= LAST_SHARE). Measured
    (bench/workloads.py seed 2771 run 18, DDP LM at 4 ranks on 2 CPUs, rank 1 with 1.37x longer sequences, +4.2 ms
    of CPU per step by the job's timers): +29 % input, CPU time +23 %, last at 5 of 8 collectives, own time -3 %
    (ranks 2 and 3 waited 3-4 ms more for a CPU): "no straggler (... an input imbalance that cost no time)"."""
    from rankscope.analysis.diagnosis.likely import LAST_SHARE
    from rankscope.analysis.diagnosis.work import IMBALANCE_WORK

    if pr.height < 2 or set(cpu) != set(pr["rank"].to_list()):
        return []
    for i in np.argsort(-np.array([cpu[int(r)] for r in pr["rank"]])):
        rank = int(pr["rank"][int(i)])
        rest = float(np.median([v for r, v in cpu.items() if r != rank]))
        work = work_of(rank)
        extra = work.get("work_ratio", 1.0) - 1 if work else 0.0
        if rest <= 0 or not work or not work.get("shapes_recorded") or extra < IMBALANCE_WORK:
            continue
        rel = cpu[rank] / rest - 1
        if rel >= max(PAIR_MIN, 0.5 * extra) and last_of(rank) >= LAST_SHARE:
            return [(int(i), rel, "input work (cpu time)")]
    return []


def agreeing(run: Run, results: dict[str, Result], bd: pl.DataFrame, pr: pl.DataFrame) -> list[tuple[int, float, str]]:
    """The likely straggler (``likely.likely_straggler``) when its evidence is strong enough for a verdict:
    own time >= TWIN_SPREAD above the others' median, last at >= 75 % of the matched collectives and the
    longest own time in >= 75 % of the steps. Measured (bench/workloads.py, 4 ranks on 2 cores): a rank
    decoding 1.9x the bytes had +39 % own time, arrived last at 8 of 8 collectives and was the slowest in
    8 of 8 steps, yet Dixon's test (the other ranks' spread) did not speak. The bar is the twin spread
    (``likely.TWIN_SPREAD``), not REL_THRESHOLD: with no test against the other ranks' spread, a steady
    excess is all the evidence, and identical work shows up to +14 % in every step; bench/workloads.py run 9:
    a healthy 4-rank decode run had a rank +11 %, last at 6 of 8, slowest in 8 of 8, named "data loading"
    with a 10 % bar (the slowed decode ranks of that run: +30 % and more)."""
    from rankscope.analysis.diagnosis.likely import TWIN_SPREAD, likely_straggler

    f = likely_straggler(run, results, per_step(bd), pr, [])
    if f is None:
        return []
    ev = f.evidence
    strong = (ev["relative_excess"] >= TWIN_SPREAD and ev["last_arrivals"] >= 0.75 * ev["instances"]
              and ev["longest_own_time_steps"] >= 0.75 * ev["steps"])
    i = pr["rank"].to_list().index(f.ranks[0])
    return [(i, float(ev["relative_excess"]), "arrival order + steps")] if strong else []


def last_share(run: Run, results: dict[str, Result], rank: int) -> float:
    """Share of the matched collectives at which ``rank`` arrived last, when no rank did so more often.

    The steadiness of an input-work candidate: with more ranks than cores, per-step own times swing
    with whoever shares the CPU. Measured (bench/workloads.py run 7, 4 ranks on 2 cores): a rank with
    1.57x the input elements had own time +10 % at the median and compute +16 %, yet exceeded the others'
    median in only 4 of 8 steps, while it arrived last at 5 of 8 collectives; at 2 ranks, 1.29x input
    work, +16 % own time, 4 of 8 steps, last at 7 of 8."""
    from rankscope.analysis.diagnosis.likely import arrivals

    try:
        arr = arrivals(run, results)
    except Exception:  # noqa: BLE001 - no matched collectives: no arrival evidence
        return 0.0
    if arr.height == 0 or int(arr["rank"][0]) != rank or (arr.height > 1 and arr["last"][1] == arr["last"][0]):
        return 0.0
    return float(arr["last"][0]) / max(float(arr["of"][0]), 1.0)


def steady_candidates(cands: list[tuple[int, float, str]], steps: pl.DataFrame, pr: pl.DataFrame,
                      last_of: Callable[[int], float]) -> list[tuple[int, float, str, float]]:
    """The candidates slower than the others' median in enough of the steps, with that share; for
    more input work (a count, no noise), also those the others waited for at most collectives."""
    out = []
    for i, rel, test in cands:
        col = "cpu_available" if test.endswith("(cpu-available)") else "own"
        cons = consistency(steps, int(pr["rank"][i]), col)
        if test == "input work":
            cons = max(cons, last_of(int(pr["rank"][i])))
        if cons >= (PAIR_CONSISTENCY if test.startswith("ratio") and pr.height == 2 else
                    0.0 if test.startswith("signed-rank") else CONSISTENCY):
            out.append((i, rel, test, cons))
    return out
