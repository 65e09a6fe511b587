"""Straggler verdict: which rank the others wait for, why, and how much time it costs.

Pattern: in synchronous data-parallel training every rank's step takes the same wall time,
because the collectives make early ranks wait. A straggler is therefore the rank whose *own*
time per step (wall minus exposed communication wait) is longest. Algorithm:
1. per rank, the median over complete steps of own time = wall − exposed communication;
2. an outlier test against the other ranks (``stats.high_outliers``: ratio rule for 2 ranks,
   Dixon's Q for 3–10, median/MAD beyond) with a minimum relative excess, and the rank above
   the others' median in at least 60 % of the steps (a single noisy step makes no straggler);
   for 2 ranks also a paired rule: a smaller excess, slower step by step (signed-rank test);
3. cause = "contention" when at least half of the extra own time (means per step) was spent waiting
   for a CPU beyond the wait its own extra CPU time brings where ranks share cores (run-queue wait of
   the training thread per step, from rankscope.profile's scheduler samples: the host, not the code,
   made the rank slow; see ``cpu.wait_excess``); else, among the components (compute, data wait, host
   idle) carrying a good share of the extra time, the one that grew most against its usual size
   (restricted to those that can hold the extra *blocked* time: sleeps, I/O, locks, when the scheduler
   samples show it); "imbalance" (input imbalance) when its operators' input elements per step
   exceed the others' by enough to explain the excess (``work.is_input_imbalance``: more work, not
   slower work; it also wins when compute is the largest part of the excess); "comm" when the excess
   sits in DDP's gradient hooks (host traces) and no extra input work explains it, or, from the
   "links" analysis, when one rank sits in every slow group while arrival skew is normal;
4. time lost = what-if at median speed: per step, own time minus the next slowest rank's (the
   step would then be set by that rank), with the others' wait at matched collectives where this
   rank arrived last (clocks aligned) beside it; per step and in total.
"No straggler" is a normal answer. Confidence = step consistency × strength of the excess.
The statistical rules of steps 1-2 live in :mod:`rankscope.analysis.diagnosis.rules`.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Finding, Result, Severity, frame
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.diagnosis.cpu import CONTENTION_SHARE, sched_frame, wait_excess
from rankscope.analysis.diagnosis.rules import COMPONENTS, CONSISTENCY, PAIR_CONSISTENCY, PAIR_MIN, PAIR_THRESHOLD, REL_THRESHOLD, complete_steps, consistency, cpu_available_outliers, outliers, paired, per_rank, with_sched
from rankscope.analysis.stats import as_float
from rankscope.analysis.diagnosis.work import CAUSE_SHARE, Work, extra_calls_ns, imbalance, imbalance_note, is_input_imbalance, work_note
from rankscope.model.run import Run

# A component explains the straggler when it carries at least this share of the extra time (CAUSE_SHARE,
# from rankscope.analysis.diagnosis.work) ...
# ... and among those, the one that grew most against its usual size wins (usual sizes below 5 % of
# the others' own time count as 5 %, so a near-zero component cannot win on noise). Why: on a
# shared host, a rank that is late for other reasons (5 ms of Python busy-work per step, measured
# here) also computes its backward slower while its peer's communication threads run beside it,
# by as much again; the busy-work grew 8x against its usual size, the compute 30 %.
BASE_FLOOR = 0.05


# Blocked time (the training thread neither running nor waiting for a CPU: a sleep, I/O, a lock) is one
# interval somewhere in the step; when it carries a share of the extra time, only a component that
# grew by most of it can hold it. Measured (4 ranks on 2 cores): a 9 ms sleep in the gradient hook
# (inside compute) came with +4.5 ms of data loading under contention, and "grew most against its
# usual size" picked data; compute (+8.7 ms) is the only component that can hold 9 ms. When no
# component grew by that much, the one that grew most (absolute) is taken: measured, a 4.8 ms sleep
# per batch in the data loader gave +6.0 ms blocked, data +3.6 ms and host +1.9 ms on a smaller usual
# size; "grew most against its usual size" said host.
BLOCKED_HOLD = 0.7

# a cause needs a component that grew by at least this share of the usual own time; else "unclear".
# Seen in bench/workloads.py runs: a rank found on own time minus run-queue wait with every component
# at or below the others' (the cause was the largest of three negative numbers), and "data loading"
# drawn from +0.7 µs of data wait.
UNCLEAR_SHARE = 0.01


def cause(row: dict[str, float], others: pl.DataFrame, blocked_excess: float | None = None,
          extra_calls_ns: float = 0.0) -> tuple[str, dict[str, float]]:
    """The component that explains the extra own time: see CAUSE_SHARE, BASE_FLOOR, BLOCKED_HOLD.

    ``extra_calls_ns``: time per step in operators this rank calls more often than the others
    (``Work.more_calls``). Call counts are not timings and carry no noise: when they account for a
    good share of the extra time, compute wins among the candidates. Measured (4 ranks on 2 cores, CPUs
    rotated): 6 extra matmul blocks per step made compute +10.5 ms, and data loading, run beside the
    CPU partner's compute once the rank fell out of step, +4.9 ms on a usual 7.7 ms: "grew most
    against its usual size" named data."""
    usual = {name: as_float(others[col].median(), 0.0) for col, name in COMPONENTS.items()}
    excess = {name: float(row[col]) - usual[name] for col, name in COMPONENTS.items()}
    total = sum(v for v in excess.values() if v > 0)
    floor = BASE_FLOOR * as_float((others["computing"] + others["data_wait"] + others["free"]).median(), 0.0)
    big = [k for k, v in excess.items() if v > 0 and v >= CAUSE_SHARE * total]
    if blocked_excess is not None and blocked_excess >= CAUSE_SHARE * total > 0:
        hold = [k for k in big if excess[k] >= BLOCKED_HOLD * blocked_excess]
        # none grew by most of it: it is still one interval, likeliest in the one that grew most
        big = hold or ([max(big, key=lambda k: excess[k])] if big else big)
    if max(excess.values()) < UNCLEAR_SHARE * sum(usual.values()):
        return "unclear", excess  # no component grew: never a cause drawn from +0.7 µs or from a shrink
    if "compute" in big and extra_calls_ns >= CAUSE_SHARE * total:
        return "compute", excess
    if len(big) < 2:
        return max(excess, key=lambda k: excess[k]), excess
    return max(big, key=lambda k: excess[k] / max(usual[k], floor, 1.0)), excess


# DDP launches gradient communication from AccumulateGrad post-hooks (reducer -> comm hook);
# host time that grows there is time spent getting the rank's gradients onto the wire.
_COMM_HOOK_MARKERS = ("AccumulateGrad", "reducer", "comm_hook", "allreduce_hook")


def top_level_excess(run: Run, rank: int, others: list[int]) -> tuple[str, float]:
    """The step-level operator whose time per step grew most on ``rank`` against ``others``."""
    def per_op(r: int) -> pl.DataFrame:
        ev = frame(run.table(r, "events", columns=["name", "dur", "depth", "kind"]))
        n_steps = max(run.table(r, "steps", columns=["step"]).num_rows, 1)
        return (ev.filter((pl.col("depth") == 1) & pl.col("kind").cast(pl.Utf8).is_in(["cpu_op", "user_annotation"]))
                .group_by(pl.col("name").cast(pl.Utf8)).agg((pl.col("dur").sum() / n_steps).alias(str(r))))
    mine = per_op(rank)
    ref = pl.concat([per_op(o).rename({str(o): "v"}) for o in others]).group_by("name").agg(pl.col("v").median())
    joined = mine.join(ref, on="name", how="left").fill_null(0).with_columns(
        excess=pl.col(str(rank)) - pl.col("v")).sort("excess", descending=True)
    if joined.height == 0:
        return "", 0.0
    top = joined.row(0, named=True)
    return str(top["name"]), float(top["excess"])


def refine(run: Run, kind: str, rank: int, others: list[int], evidence: dict[str, Any]) -> str:
    """Split host 'compute' into real compute and gradient-communication hooks."""
    if kind != "compute":
        return kind
    op, excess = top_level_excess(run, rank, others)
    evidence["top_operator_excess"] = {"name": op, "excess_ns": round(excess)}
    if any(m in op for m in _COMM_HOOK_MARKERS):
        return "comm"
    return kind


def time_lost(run: Run, rank: int, results: dict[str, Result], bd: pl.DataFrame) -> dict[str, float | str]:
    """What-if at median speed: how much shorter each step would be, and the others' wait for ``rank``.

    Steps are synchronous, so at median speed a step would be set by the next slowest rank: lost =
    own(rank) − max(own of the others), per step, clipped at 0. The wait the others spent at matched
    collectives where ``rank`` arrived last (clocks aligned) is reported beside it.
    """
    own = bd.with_columns(own=pl.col("wall") - pl.col("comm_exposed"))
    ref = own.filter(pl.col("rank") != rank).group_by("step").agg(pl.col("own").max().alias("ref"))
    mine = own.filter(pl.col("rank") == rank).sort("ts").join(ref, on="step", how="left")
    lost = np.clip((mine["own"] - mine["ref"]).fill_null(0).to_numpy().astype(float), 0, None)
    wall = as_float(mine["wall"].median(), 0.0) if mine.height else 0.0
    per_step = float(np.median(lost)) if len(lost) else 0.0
    out: dict[str, float | str] = {
        "lost_per_step_ns": round(per_step), "lost_total_ns": round(float(np.sum(lost))),
        "lost_share_of_step": round(per_step / wall, 4) if wall else 0.0, "steps": int(len(lost)),
        "method": "step own time vs next slowest rank"}
    from rankscope.analysis.clock.alignment import alignment_from, matched_collectives
    from rankscope.analysis.comm.links import instances

    inst = instances(matched_collectives(run), alignment_from(results))
    if inst.height and mine.height:
        late = inst.filter((pl.col("last_rank") == rank) & pl.col("second").is_not_null())
        waited = late.select(((pl.col("last") - pl.col("first")) * (pl.col("n") - 1)).sum()).item() or 0
        out["others_wait_at_collectives_per_step_ns"] = round(float(waited) / max(mine.height, 1))
        out["last_arrival_share"] = round(late.height / inst.height, 3)
    return out


LABELS = {"imbalance": "input imbalance", "comm": "communication", "data": "data loading",
          "host": "host (idle between operators)",
          "unclear": "cause unclear (compute, data wait and idle host time are at the other ranks' level)"}


def _finding(rank: int, kind: str, rel: float, evidence: dict[str, Any], conf: float, note: str = "",
             measure: str = "own time") -> Finding:
    """A straggler finding whose title names every figure's measure: "rank 2 is slow: input imbalance,
    +35% input work per step (...), own time +52% vs the other ranks' median, costs 53.0 ms per step (35%)"."""
    evidence["cause"] = kind
    lost = evidence.get("time_lost", {})
    cost = (f", costs {lost['lost_per_step_ns'] / 1e6:.1f} ms per step ({lost.get('lost_share_of_step', 0):.0%})"
            if lost.get("lost_per_step_ns") else "")
    head = f"rank {rank} is slow: {LABELS.get(kind, kind)}"
    if measure.startswith("own time"):
        title = f"{head}{note}, {measure} +{rel:.0%} vs the other ranks' median{cost}"
    else:
        title = f"{head}{note}, {measure}{cost}"
    return Finding(kind="straggler", title=title, severity=Severity.WARNING, ranks=(rank,), evidence=evidence,
                   confidence=round(conf, 2))


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
               last_of: Callable[[int], float] = lambda rank: 0.0) -> list[tuple[int, float, str]]:
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


def work_explains(work: Work, excess: dict[str, float], others: pl.DataFrame, rel: float,
                  cpu_excess: float | None = None) -> bool:
    """More input work accounts for the rank's extra compute, which is a good share of its extra own time:
    then the cause is the input imbalance even when another component grew more against its usual size.
    Measured (bench/workloads.py, 4 ranks on 2 cores): an LM rank with 1.55x longer sequences had compute
    +9 ms, and its idle gaps between operators (queued behind the other ranks for a CPU) +3 ms on a usual
    1 ms: "grew most against its usual size" said host."""
    if not is_input_imbalance(work, rel):
        return False
    usual = as_float(others["computing"].median(), 0.0)
    expected = (work.get("work_ratio", 1.0) - 1) * usual
    total = sum(v for v in excess.values() if v > 0)
    # the extra compute either matches the extra work, or is the largest part of the extra time (4 ranks on
    # 2 cores, bench run 3: 1.33x input work, compute +3.6 ms of an expected ~10, host idle +1.6 ms)
    # or the rank's CPU time (``cpu_excess``: its training thread's extra CPU time per step, from schedstat)
    # grew by half the extra work's expected time, or by all of its extra time: the extra time is work done,
    # not waiting, though the trace put it between operators (bench/workloads.py run 10, 4 ranks on 2 cores:
    # 1.44x input work, the trace's compute +0.2 ms, idle between operators +3.3 ms, CPU time +7.9 ms: "host").
    # Callers pass it only when the cause would be "host": a decode rank reading 1.8x the bytes sorts 1.8x the
    # elements in its DataLoader, and that is data loading (bench/workloads.py, the first try of run 11)
    return expected > 0 and ((excess["compute"] >= CAUSE_SHARE * total and (
        excess["compute"] >= 0.5 * expected or excess["compute"] >= max(excess.values())))
        or (cpu_excess is not None and total > 0 and cpu_excess >= min(0.5 * expected, total)))


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


def own_time_stragglers(run: Run, results: dict[str, Result], bd: pl.DataFrame,
                        pr: pl.DataFrame) -> list[Finding]:
    """Stragglers whose own (non-waiting) time per step is an outlier, with cause and time lost."""
    findings = []
    sched = sched_frame(run)
    steps = with_sched(bd, sched)
    own_steps = complete_steps(steps).select("rank", "step", "own")
    ranks = pr["rank"].to_list()
    # read once per analysis: each rank's work against all the others, and its share of last arrivals
    work_of: Callable[[int], Work | None] = functools.cache(
        lambda rank: imbalance(run, rank, [r for r in ranks if r != rank]))
    last_of: Callable[[int], float] = functools.cache(lambda rank: last_share(run, results, rank))

    def steady(cands: list[tuple[int, float, str]]) -> list[tuple[int, float, str, float]]:
        return steady_candidates(cands, steps, pr, last_of)

    found = steady(outliers(pr["own"].to_numpy().astype(float)) or cpu_available_outliers(steps, pr)
                   or paired(steps, pr, sched))
    for i, rel, test, cons in (found or steady(more_work(pr, work_of)) or steady(more_input(pr, work_of, last_of))
                               or steady(agreeing(run, results, bd, pr))):
        rank = int(pr["rank"][i])
        row = pr.row(i, named=True)
        others = pr.filter(pl.col("rank") != rank)
        waited = wait_excess(sched, rank, own_steps)
        imb = work_of(rank)
        cpu_excess = float(waited["cpu_excess_ns"]) if waited and waited.get("cpu_excess_ns") is not None else None
        kind, excess = cause(row, others, waited["blocked_excess_ns"] if waited else None, extra_calls_ns(imb))

        def explains(kind: str) -> bool:  # the rank's CPU time counts only for time the trace put between operators
            if not imb:
                return False
            return work_explains(imb, excess, others, float(rel), cpu_excess if kind == "host" else None)

        evidence: dict[str, Any] = {
            "own_time_ns": row["own"], "others_median_ns": as_float(others["own"].median()),
            "excess_ns": {k: round(v) for k, v in excess.items()}, "relative_excess": float(rel),
            "test": test, "consistency": round(cons, 3)}
        if waited is not None:
            evidence["cpu_wait"] = waited
            # most of the extra time waiting for a CPU: the host, whichever test found the rank
            if waited["share_of_excess"] >= CONTENTION_SHARE:
                kind = "contention"
        # DDP's gradient hooks growing on a host trace mean communication, unless more input work (a count,
        # not a timing) explains the extra compute: then the hooks grew with it (bench run 3, 4 ranks on
        # 2 cores: a rank with 1.47x longer sequences, compute +13.6 ms, AccumulateGrad +4.3 ms of it)
        if kind != "contention" and bd.filter(pl.col("rank") == rank)["source"][0] == "host" \
                and not explains(kind):
            kind = refine(run, kind, rank, others["rank"].to_list(), evidence)
        note = ""
        if imb:
            evidence["work"] = imb
        if kind in ("host", "data") and explains(kind):
            kind = "compute"  # then named input imbalance below
        if kind == "compute" and imb:
            if is_input_imbalance(imb, float(rel)):
                kind, note = "imbalance", imbalance_note(imb)
            else:
                note = work_note(imb, excess["compute"])
        evidence["time_lost"] = time_lost(run, rank, results, bd)
        floor = (PAIR_MIN if test.startswith("signed-rank") else PAIR_THRESHOLD if test.startswith("ratio")
                 else REL_THRESHOLD)
        strength = min(1.0, rel / (2 * floor))
        measure = "own time"
        if test.endswith("(cpu-available)"):
            # the excess is of own time minus run-queue wait: with more ranks than cores a busy rank can
            # hold a CPU while the others queue, so its own time need not be the longest (measured: 11 ms
            # of host busy-work per step at 4 ranks on 2 cores, own time -5 %, CPU-available +46 %)
            measure = "own time excluding CPU wait"
        findings.append(_finding(rank, kind, rel, evidence, cons * strength, note, measure))
    return findings


def link_stragglers(results: dict[str, Result], bd: pl.DataFrame, taken: set[int]) -> list[Finding]:
    """Communication stragglers from the "links" analysis: one rank in every slow group."""
    links = results.get("links")
    if links is None or links.skipped:
        return []
    out = []
    groups = [f.evidence for f in links.findings if f.kind == "slow_link"]
    n_steps = max(int(bd["step"].n_unique()), 1)
    wall = as_float(bd["wall"].median(), 0.0) or 1.0
    for rank in links.summary.get("comm_stragglers", []):
        if rank in taken:
            continue
        mine = [g for g in groups if rank in g["ranks"]]
        lost = sum((g["transfer_ns"] - g["peers_median_ns"]) * g["instances"] for g in mine) / n_steps
        rel = lost / wall
        evidence = {"slow_groups": [{k: g[k] for k in ("pg_name", "op", "bytes", "ratio", "arrival_skew_ns")}
                                    for g in mine], "relative_excess": rel,
                    "transfer_ratio": max(g["ratio"] for g in mine),
                    "time_lost": {"lost_per_step_ns": round(lost), "lost_total_ns": round(lost * n_steps),
                                  "lost_share_of_step": round(lost / wall, 4), "method": "slow-group transfer"}}
        worst = max(mine, key=lambda g: g["ratio"])
        out.append(_finding(int(rank), "comm", rel, evidence, min(1.0, len(mine) / 2),
                            measure=f"in every slow group (transfers up to {worst['ratio']:.1f}x the other "
                                    "groups' median)"))
    return out


def per_step(bd: pl.DataFrame) -> pl.DataFrame:
    """Per step: the rank with the longest own time and its excess over the other ranks' median."""
    own = bd.with_columns(own=(pl.col("wall") - pl.col("comm_exposed")).cast(pl.Float64))
    return (own.sort("own", descending=True).group_by("step").agg(
        slowest=pl.col("rank").first(), own=pl.col("own").first(),
        others_median=pl.col("own").slice(1).median(), ranks=pl.len())
        .with_columns(rel_excess=pl.col("own") / pl.col("others_median") - 1).sort("step"))


def run_straggler(run: Run, results: dict[str, Result]) -> Result:
    """Registered analysis "straggler": the verdict, per-rank and per-step tables."""
    bd, excluded, note = verdict_input(run, frame(results["breakdown"].tables["breakdown"]))
    pr = per_rank(bd)
    if pr.height < 2:
        return Result("straggler", skipped="needs at least 2 undamaged ranks with complete steps" +
                      (f" ({note})" if note else ""))
    findings = own_time_stragglers(run, results, bd, pr)
    findings += link_stragglers(results, bd, {f.ranks[0] for f in findings})
    findings = [f for f in findings if not set(f.ranks) & set(excluded)]  # never a verdict on broken data
    steps = per_step(bd)
    aside = ""
    if not findings:
        from rankscope.analysis.diagnosis.likely import below_bar_note, evidence, likely_from, untimed_imbalance

        seen = evidence(run, results, steps, pr, excluded)  # arrival order: read once for both
        maybe = likely_from(seen)
        findings = [maybe] if maybe else []
        aside = "" if maybe else "; ".join(x for x in (below_bar_note(seen), untimed_imbalance(run, pr, excluded))
                                           if x)
    verdict = "; ".join(f.title for f in findings) if findings else "no straggler"
    if note or aside:
        verdict += f" ({'; '.join(x for x in (note, aside) if x)})"
    limits = blind_spots(run, sched_frame(run))
    return Result("straggler", tables={"per_rank": pr.to_arrow(), "per_step": steps.to_arrow()},
                  findings=findings,
                  summary={"verdict": verdict, "excluded_ranks": excluded, "coverage_note": note, "limits": limits,
                           "below_bar": aside,
                           "time_lost_per_step_ns": sum(f.evidence["time_lost"]["lost_per_step_ns"] for f in findings
                                               if "time_lost" in f.evidence)})


def blind_spots(run: Run, sched: pl.DataFrame) -> list[str]:
    """Causes this run's data cannot show, said beside the verdict (never a silent "no")."""
    out = []
    if sched.height == 0:
        out.append("contention (ranks slowed by a busy host) cannot be named: the run has no CPU run-queue samples "
                   "(rankscope.profile records them; runs profiled through trace_handler or torch.profiler alone "
                   "do not)")
    probe = run.rank_ids[:2]
    if probe and all(not frame(run.table(r, "events", columns=["input_dims"])).filter(
            pl.col("input_dims").cast(pl.Utf8) != "").height for r in probe):
        out.append("input imbalance cannot be told from slower compute: no input shapes recorded "
                   "(profile with record_shapes=True; rankscope.profile does by default)")
    return out


def verdict_input(run: Run, bd: pl.DataFrame) -> tuple[pl.DataFrame, list[int], str]:
    """The breakdown rows a verdict may use: complete steps of undamaged ranks (a truncated trace
    looks fast or slow for want of data, never because of the rank). Returns (rows, excluded ranks,
    a note saying what was left out, "" when nothing was)."""
    damaged = sorted(run.damaged)
    notes = []
    if damaged:
        from rankscope.intlist import format_int_list

        bd = bd.filter(~pl.col("rank").is_in(damaged))
        notes.append(f"damaged ranks {format_int_list(damaged)} left out of the verdict")
    # Incomplete steps: per_rank (rules.complete_steps) already keeps only the complete ones.
    if run.missing:
        notes.append(f"{len(run.missing)} rank{'s' if len(run.missing) > 1 else ''} missing")
    return bd, damaged, "; ".join(notes)


ANALYSIS = Analysis(
    name="straggler",
    description="which rank the others wait for, and why",
    run=run_straggler,
    after=("breakdown",),
    uses=("clock", "links"),
    view=View("Straggler verdict", (Col("time_lost_per_step_ns", "time lost per step", NS),),
        (TableView("per_step", "per step: the rank with the longest own time", (
            Col("step", "step", "count"), Col("slowest", "rank", "count"), Col("own", "own time", NS),
            Col("others_median", "other ranks' median", NS), Col("rel_excess", "excess", "share"))),), place="overview"),
)
