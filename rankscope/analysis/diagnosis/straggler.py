"""Straggler verdict: which rank the others wait for, why, and how much time it costs.

Pattern: who waits for whom comes from dependencies. The ``critical_path`` analysis joins the ranks at
their matched collectives and p2p pairs; the rank whose what-if (its own segments at the other ranks'
median) shortens the path most, steadily across steps, bounds the step (``bound``). Algorithm:
1. the statistical rules (``rules``, ``candidates``) on each rank's own time (wall minus exposed
   communication, from the breakdown, where a wait inside a framework's span is communication) say
   whether the excess stands out of what identical ranks show; a rank they name must be the one that
   bounds the steps distinctly (``Bound.distinct``), or it was only waiting and is not named (where no
   rank does, a candidate standing on counts is kept); the critical path alone names its rank when its
   cost clears ``bound.BAR`` (steady beyond chance, a good share of the step, well above the others');
2. cause (``cause``): the component of own time that explains the excess, among those the rank's own
   segments on the path hold; "contention" when the extra time was mostly run-queue wait (``cpu``);
   input imbalance from the operators' input elements (``work``);
3. cost: the what-if saving per step, said with the chain that bounds the step.
Below the bar a steady cost is said beside "no straggler"; so is an input imbalance, with what it cost.
Without a critical path (one rank, no comparable calls) the rules stand alone and the cost is own time
against the next slowest rank.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Finding, Result, Severity, frame
from rankscope.analysis.diagnosis.bound import BAR, NO_SAVING, Bound, bound, holds, savings, without_what_if
from rankscope.analysis.diagnosis.candidates import agreeing, last_share, more_input, more_work, steady_candidates
from rankscope.analysis.diagnosis.cause import cause, cpu_time_explains, from_path, refine, work_explains
from rankscope.analysis.diagnosis.cpu import OWN_CPU_SHARE, is_contention, sched_frame, wait_excess
from rankscope.analysis.diagnosis.likely import TWIN_SPREAD
from rankscope.analysis.diagnosis.rules import (PAIR_MIN, PAIR_THRESHOLD, REL_THRESHOLD, complete_steps,
                                                cpu_available_outliers, outliers, paired, per_rank, per_step,
                                                with_sched)
from rankscope.analysis.diagnosis.work import Work, calls_ratio, extra_calls_ns, imbalance, imbalance_note, is_input_imbalance, work_note
from rankscope.analysis.stats import as_float
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.model.run import Run

LABELS = {"imbalance": "input imbalance", "comm": "communication", "data": "data loading",
          "host": "host (idle between operators)",
          "unclear": "cause unclear (compute, data wait and idle host time are at the other ranks' level)"}
# the path class each cause lives in (``bound.path_classes``)
_CLASS = {"compute": "compute", "data": "data", "host": "host"}


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


def _finding(rank: int, kind: str, rel: float, evidence: dict[str, Any], conf: float, note: str = "",
             measure: str = "own time", path: str = "") -> Finding:
    """A straggler finding whose title names every figure's measure: "rank 2 is slow: input imbalance,
    +35% input work per step (...), own time +52% vs the other ranks' median, costs 53.0 ms per step (35%)",
    then, from the critical path, the chain that bounds the step (``Bound.clause``)."""
    evidence["cause"] = kind
    lost = evidence.get("time_lost", {})
    cost = (f", costs {lost['lost_per_step_ns'] / 1e6:.1f} ms per step ({lost.get('lost_share_of_step', 0):.0%})"
            if lost.get("lost_per_step_ns") else "")
    head = f"rank {rank} is slow: {LABELS.get(kind, kind)}"
    if measure.startswith("own time"):
        title = f"{head}{note}, {measure} +{rel:.0%} vs the other ranks' median{cost}{path}"
    else:
        title = f"{head}{note}, {measure}{cost}{path}"
    return Finding(kind="straggler", title=title, severity=Severity.WARNING, ranks=(rank,), evidence=evidence,
                   confidence=round(conf, 2))


class _Ctx:
    """What the rules and the cause read, once per analysis."""

    def __init__(self, run: Run, results: dict[str, Result], bd: pl.DataFrame, pr: pl.DataFrame) -> None:
        self.run, self.results, self.bd, self.pr = run, results, bd, pr
        self.sched = sched_frame(run)
        self.steps = with_sched(bd, self.sched)
        self.own_steps = complete_steps(self.steps).select("rank", "step", "own")
        ranks = pr["rank"].to_list()
        self.work_of: Callable[[int], Work | None] = functools.cache(
            lambda rank: imbalance(run, rank, [r for r in ranks if r != rank]))
        self.last_of: Callable[[int], float] = functools.cache(lambda rank: last_share(run, results, rank))

    def steady(self, cands: list[tuple[int, float, str]]) -> list[tuple[int, float, str, float]]:
        return steady_candidates(cands, self.steps, self.pr, self.last_of)

    def rule_candidates(self) -> list[tuple[int, float, str, float]]:
        """The statistical rules' candidates, first family that speaks (see ``rules`` and ``candidates``)."""
        pr = self.pr
        # each timing family must be steady on its own: a ratio on own time that one preempted step makes
        # unsteady no longer hides the CPU-available ratio (measured: the 2-rank demo's host straggler beside
        # two busy loops, rank 1 +46 % own time but slower in 4 of 6 steps, +68 % CPU-available in 6 of 6)
        return (self.steady(outliers(pr["own"].to_numpy().astype(float)))
                or self.steady(cpu_available_outliers(self.steps, pr)) or self.steady(paired(self.steps, pr, self.sched))
                or self.steady(more_work(pr, self.work_of)) or self.steady(more_input(pr, self.work_of, self.last_of))
                or self.steady(agreeing(self.run, self.results, self.bd, pr)))


def counted(ctx: _Ctx, rank: int, test: str) -> bool:
    """Whether a candidate stands on counts (more operator calls, more input elements: no timing noise)."""
    from rankscope.analysis.diagnosis.work import IMBALANCE_WORK

    work = ctx.work_of(rank)
    return test in ("more calls", "input work") or bool(
        work and work.get("shapes_recorded") and work.get("work_ratio", 1.0) - 1 >= IMBALANCE_WORK)


def choose(ctx: _Ctx, b: Bound | None) -> tuple[list[tuple[int, float, str, float]], str]:
    """The candidates to name: the rules' own when they agree with the critical path (a rank they name that
    does not bound the steps was only waiting), or the bounding rank when its cost clears the bar; and a
    note on a rank left out. Where no rank bounds the steps distinctly (the path's timings are as noisy as
    the own times: preempted steps on a loaded host), a candidate that stands on counts is kept. Measured
    (rankscope.demo.workloads.moe, 2 ranks, 6 steps, 2 loaded cores): rank 1 with 1.61x the input elements
    (truth: 2.5x the expert tokens, +9.6 ms CPU per step) saved 7.6 ms per step on the path, rank 0 13.2 ms,
    from two steps preempted by 50 ms; rank 0 bounded 4 of 6 steps (chance, at 2 ranks)."""
    found = ctx.rule_candidates()
    # a rank the path has no what-if for (a pipeline's first or last stage: no other rank runs its calls) is kept
    # where the pipeline analysis names its stage the bottleneck (bench/workloads.py seed 2616, pp-gpipe at 4
    # ranks: stage 0 with 2x the layers, +82 % own time, its cost by the stage model 43.5 ms per step against
    # 43.1 ms injected; the path's what-if covered ranks 1 and 2 only and named rank 1 at 1.6 ms)
    unseen = (without_what_if(ctx.results) | alone_in_stage(ctx.results)) & bottleneck_ranks(ctx.results)
    if b is None:  # no rank has a what-if at all (1F1B at 4 stages: every stage's calls differ): the stage model
        return found or stage_candidate(ctx, unseen), ""
    hungry = starved(ctx, b)
    ranks = ctx.pr["rank"].to_list()
    def kept(r: int, test: str, rel: float) -> bool:
        if not counted(ctx, r, test) and slower_cpu(ctx.pr, r, rel):
            return False
        return ((r == b.rank and (b.distinct or agrees(b))) or (not b.distinct and counted(ctx, r, test)) or r in unseen
                or (hungry and r != b.rank))

    keep = [c for c in found if kept(int(ranks[c[0]]), c[2], c[1])]
    note = ""
    if found and not keep and slower_cpu(ctx.pr, r0 := int(ranks[found[0][0]]), found[0][1]):
        mine, rest = _mine_rest(ctx.pr, r0, "data_wait")
        note = (f"rank {r0}'s own time is +{found[0][1]:.0%} over the other ranks', most of it data loading at "
                f"{mine / rest:.2f}x theirs: within what a slower CPU explains (up to {1 + TWIN_SPREAD:.1f}x), not named")
    elif found and not keep:
        r = int(ranks[found[0][0]])
        others = max((v for k, v in b.savings.items() if k != r), default=0.0)
        who = f"it bounds only {b.steps} of {b.of_steps}" if r == b.rank else f"rank {b.rank} bounds {b.steps} of {b.of_steps}"
        note = (f"rank {r}'s own time is +{found[0][1]:.0%} over the other ranks', but it does not bound the steps on "
                f"the critical path ({who}; what-if saving {b.savings.get(r, 0.0) / 1e6:.1f} ms per step "
                f"({b.savings.get(r, 0.0) / b.step_ns if b.step_ns > 0 else 0.0:.1%}) for rank {r}, "
                f"up to {others / 1e6:.1f} ms for the others): not named")
    clears = (not keep and not hungry and b.rank in ranks
              and (b.clears_bar or b.clears_bar_on_data(data_excess(ctx.pr, b.rank))
                   or b.clears_bar_on_host(data_excess(ctx.pr, b.rank, "free"))))
    if clears and contended(ctx, b):
        clears, note = False, (f"rank {b.rank} bounds {b.steps} of {b.of_steps} steps on the critical path by "
                               f"{b.cost_ns / 1e6:.1f} ms per step ({b.share:.1%}), but its extra time was mostly "
                               f"waiting for a CPU (host contention, not its own work): not named")
    if clears:
        i = ranks.index(b.rank)
        rest = as_float(ctx.pr.filter(pl.col("rank") != b.rank)["own"].median(), 0.0)
        rel = float(ctx.pr["own"][i]) / rest - 1 if rest > 0 else 0.0
        keep = [(i, rel, "critical path", b.steps / max(b.of_steps, 1))]
    if not keep:  # the stage model's work is thread CPU time: a path that waited for a CPU does not veto it
        keep = stage_candidate(ctx, unseen)
    return keep, note


def rescued(ctx: _Ctx, hb: Bound | None, b: Bound,
            note: str) -> tuple[Bound, list[tuple[int, float, str, float]], str]:
    """The own-time rules' first candidate, at least ``likely.TWIN_SPREAD`` over the others, that the path left out
    only because another rank "bounded" steps while it waited for a CPU: with those steps left out (``hb``,
    ``bound.without_host_steps``; at least half the steps stay) it bounds the rest distinctly, or agrees (``agrees``).
    Only the rules' own candidate is rescued: a rank the path alone would name in the remaining steps is not (on
    4 processes sharing 2 CPUs few steps stay, and healthy ranks bound them: bench/workloads.py seed 2761,
    lm-healthy at 4 ranks, 5 of 10 named with the path counted that way). Measured (tests/e2e/test_demo.py's host
    straggler beside the other pytest worker's jobs): rank 1 +83 % own time bounded 3 of 6 steps; rank 0, with
    58-65 ms of run-queue wait per step, the other 3: "no straggler". With those left out: 3 of 3, 28.8 ms."""
    found = ctx.rule_candidates()
    if hb is None or not hb.host_steps or not found or found[0][1] < TWIN_SPREAD or starved(ctx, hb):
        return b, [], note
    i, rel = found[0][0], found[0][1]
    if int(ctx.pr["rank"][i]) != hb.rank or 2 * hb.of_steps < hb.of_steps + hb.host_steps:
        return b, [], note
    if not (hb.distinct or agrees(hb)):
        return b, [], note
    return hb, [found[0]], ""


def contended(ctx: _Ctx, b: Bound) -> bool:
    """The path's bounding rank's extra own time was the host's doing (``cpu.is_contention``): the path alone does
    not name it (the host is to blame, not the rank; ``starved`` covers a wait as long as the whole saving).
    Measured (bench/workloads.py seed 2761 run 175, DDP LM at 4 ranks, a healthy twin; and a healthy `make demo`):
    "rank 1 is slow: contention, bounding the step on the critical path, costs 6.2 ms per step (13%)": 90 % of its
    +18 % own time was run-queue wait, its CPU time +0.5 ms, 4 processes on 2 CPUs.
    Only where the own-time excess is positive and its CPU time is known, and never when its extra CPU time covers
    a quarter of the path's cost (``OWN_CPU_SHARE``): a pipeline's heavy stage looks no busier in own time than the
    stages that wait for it inside their Forward / Backward spans, and its share of run-queue wait says nothing."""
    waited = wait_excess(ctx.sched, b.rank, ctx.own_steps)
    if waited is None or waited.get("cpu_excess_ns") is None or float(waited.get("own_excess_ns") or 0.0) <= 0:
        return False
    if float(waited["cpu_excess_ns"]) >= OWN_CPU_SHARE * b.cost_ns:
        return False
    return is_contention(waited)


def agrees(b: Bound) -> bool:
    """The path agrees with a rank the own-time rules named (its bounding rank) without bounding the steps
    distinctly: in two thirds of the steps (``BAR["steps"]``) at twice any other rank's median saving (not
    ``BAR["over_noise"]``: two methods agree on the rank). Measured (bench/workloads.py seed 2623, fsdp-compute
    at 2 ranks, rank 0's extra matmuls, +11.5 ms per step by its own timers): the rules' +32 % own time; the path
    5 of 6 steps (a coin gives that 11 % of the time), 22.0 ms against rank 1's 8.4 ms (2.6x): "no straggler".
    The healthy demo's "cause unclear" rank (4 of 8 steps, 2.26 against 2.21 ms) still is not named."""
    return b.steps >= BAR["steps"] * b.of_steps and b.cost_ns >= 2.0 * b.others_best_ns and b.cost_ns > 0


# From 3 ranks, a stage holding this many times the stages' mean work (thread CPU time, medians over steps) is
# named at ``BAR["share_host"]`` of the step instead of ``BAR["share_many"]``: the work is measured, not
# inferred, and 1F1B hides part of a slow first stage's cost behind its warm-up (``pipeline_replay``).
# Measured (bench/workloads.py, 2 cores): balanced twins 1.005-1.053 (seeds 2512, 2613, 2623), once 1.15
# under load (seed 2624); stages with 2x the layers 1.27-1.32 at 2 stages, 1.47-1.57 at 4. Seed 2651, pp-1f1b
# at 4 ranks, stage 0 with 2x the layers: imbalance 1.47, cost 19.8 ms (9.5 %) by the replay: "no straggler".
STAGE_IMBALANCE = 1.25


def stage_candidate(ctx: _Ctx, unseen: set[int]) -> list[tuple[int, float, str, float]]:
    """The bottleneck stage's rank, where neither the rules nor the path could name it: the path has no what-if
    for a first or last stage, and its own time is its peers' (a pipeline's waits fill every stage's step). The
    stage model's cost must clear the path's bar (``BAR["share"]`` at 2 ranks, ``BAR["share_many"]`` from 3) in
    two thirds of the steps. Measured (bench/workloads.py seed 2621, pp-gpipe at 4 ranks, stage 0 with 2x the
    layers, +59 ms of CPU per step by the job's own timers): stage 0 the bottleneck in 6 of 6 steps, cost 77.7 ms
    (20.6 %); the rules named nobody and the path named rank 1 at 7.3 ms (1.9 %): "no straggler". Seed 2623,
    pp-1f1b at 4 ranks, stage 1 with 2x the layers (+85.5 ms of CPU per step): no rank had a what-if (each
    stage's 1F1B calls differ), stage 1 the bottleneck in 6 of 6 steps at 82.6 ms (27 %): "no straggler"."""
    pp = ctx.results.get("pipeline")
    if pp is None or pp.skipped or not unseen:
        return []
    sm = pp.summary
    ranks = ctx.pr["rank"].to_list()
    bar = BAR["share"] if len(ranks) < 3 else (
        BAR["share_host"] if float(sm.get("imbalance") or 0.0) >= STAGE_IMBALANCE else BAR["share_many"])
    steps, of = int(sm.get("bottleneck_steps") or 0), int(sm.get("of_steps") or 0)
    if float(sm.get("cost_share") or 0.0) < bar or of == 0 or steps < BAR["steps"] * of:
        return []
    r = min(r for r in unseen)
    if r not in ranks:
        return []
    i = ranks.index(r)
    rest = as_float(ctx.pr.filter(pl.col("rank") != r)["own"].median(), 0.0)
    return [(i, float(ctx.pr["own"][i]) / rest - 1 if rest > 0 else 0.0, "pipeline stages", steps / of)]


def bottleneck_ranks(results: dict[str, Result]) -> set[int]:
    """The ranks of the pipeline's bottleneck stage, where the pipeline analysis found the stages unbalanced."""
    pp = results.get("pipeline")
    if pp is None or pp.skipped or pp.summary.get("balanced", True):
        return set()
    stage, ranks = pp.summary.get("bottleneck_stage"), pp.summary.get("stage_ranks") or []
    return {int(r) for r in ranks[stage]} if isinstance(stage, int) and 0 <= stage < len(ranks) else set()


def alone_in_stage(results: dict[str, Result]) -> set[int]:
    """Ranks that are the only rank of their pipeline stage. The path's what-if compares a rank with the other
    ranks' median of the calls they share; across stages those are other layers, so it neither confirms nor
    denies that such a rank bounds the steps: the stage model does (as for ``bound.without_what_if``'s ranks).
    Measured (bench/workloads.py seed 2712, pp-gpipe at 4 ranks, stage 1 with 2x the layers, +29 ms of CPU per
    step by the job's timers): the stage model named stage 1 in 6 of 6 steps at 30.7 ms (22.6 %); the path
    matched its calls with stage 2's and gave it -2.8 to -6.1 ms, and vetoed it: "no straggler" in 3 of 3."""
    pp = results.get("pipeline")
    if pp is None or pp.skipped:
        return set()
    stages = pp.summary.get("stage_ranks") or []
    return {int(rs[0]) for rs in stages if len(rs) == 1} if len(stages) >= 2 else set()


def stage_cost(results: dict[str, Result]) -> dict[str, Any]:
    """The bottleneck stage's cost per step by the pipeline analysis (the step if the stages were balanced)
    as ``time_lost`` evidence. Measured (bench/workloads.py seed 2616, GPipe, 4 stages, stage 0 with 2x the
    layers): 43.5 ms against the job's own 43.1 ms; own time against the next slowest rank said 62.0 ms."""
    sm = results["pipeline"].summary
    cost, steps = float(sm.get("cost_ns") or 0.0), int(sm.get("of_steps") or 0)
    return {"lost_per_step_ns": round(cost), "lost_total_ns": round(cost * steps),
            "lost_share_of_step": round(float(sm.get("cost_share") or 0.0), 4), "steps": steps,
            "method": "pipeline stages: the step if the stages' work were balanced"}


def takes_stage_cost(results: dict[str, Result], rank: int, on_path: bool) -> bool:
    """A named rank of the pipeline's bottleneck stage takes the stage model's cost (``stage_cost``) where the path
    has no what-if for it (``on_path`` False), or compares it with other stages' layers (a rank alone in its
    stage). Measured (bench/workloads.py seed 2713, pp-gpipe at 4 ranks, a middle stage with 2x the layers, +28-34
    ms of extra CPU per step by the job's timers): the path's what-if 1.2-8.6 ms, the stage model's 27.8-32.8 ms."""
    return rank in bottleneck_ranks(results) and (not on_path or rank in alone_in_stage(results))


def _mine_rest(pr: pl.DataFrame, rank: int, col: str) -> tuple[float, float]:
    """The rank's ``col`` and the other ranks' median of it (0.0 where the rank is absent)."""
    mine = pr.filter(pl.col("rank") == rank)[col]
    return (float(mine[0]) if mine.len() else 0.0), as_float(pr.filter(pl.col("rank") != rank)[col].median(), 0.0)


def slower_cpu(pr: pl.DataFrame, rank: int, rel: float) -> bool:
    """An own-time outlier that a slower CPU explains: own time under ``likely.TWIN_SPREAD`` over the others',
    at least half of that excess data loading, and its data loading within ``1 + TWIN_SPREAD`` times the others'
    (``data_excess`` none). Measured (bench/workloads.py seed 2761, DDP decoding at 4 ranks, a healthy twin):
    rank 2's data loading 189 against 168 ms per step (its timers: 8 % more CPU for the same bytes), +11 % own
    time, a Dixon outlier that bounded 5 of 8 steps by 10.4 ms (5 %): "rank 2 is slow: data loading"."""
    if rel >= TWIN_SPREAD or data_excess(pr, rank) > 0:
        return False
    own, own_rest = _mine_rest(pr, rank, "own")
    data, data_rest = _mine_rest(pr, rank, "data_wait")
    return own > own_rest and data - data_rest >= 0.5 * (own - own_rest)


def data_excess(pr: pl.DataFrame, rank: int, col: str = "data_wait") -> float:
    """The rank's data wait (or ``col``: "free", host time between operators) per step beyond what a slower CPU
    explains (ns): over ``1 + likely.TWIN_SPREAD`` times the other ranks' median. A slower vCPU slows every part of
    a step alike, by up to the twin spread; where data loading is most of the step, that alone is a data excess of
    several percent of the step. Measured (bench/workloads.py seed 2753, DDP decoding at 2 ranks, healthy twins,
    data loading 83-94 ms of a 98 ms step): 3 of 10 twins had their data loading 10-14 % over the other rank's
    (the job's own timers agree: 8-13 % more CPU for the same bytes), and so bounded the step by 7.6-9.2 ms with
    data loading on the path: named at ``BAR["share_data"]``. The data stragglers of seeds 2751-2753 (FSDP2,
    2 and 4 ranks) took 19-190x the others' data wait."""
    mine = pr.filter(pl.col("rank") == rank)[col]
    rest = as_float(pr.filter(pl.col("rank") != rank)[col].median(), 0.0)
    return float(mine[0]) - (1.0 + TWIN_SPREAD) * rest if mine.len() else 0.0


def starved(ctx: _Ctx, b: Bound) -> bool:
    """The path's bounding rank waited for a CPU, over the other ranks and beyond what its own extra CPU time
    brings at their rate (``wait_excess``'s unexplained wait: a rank busy with its own extra work waits more
    too, and is not starved), at least as long as its what-if saving:
    its segments on the path are the run queue's, not its own work: the path names nobody and does not veto
    another rank the rules name (a rule naming this same rank still needs the path to agree).
    Measured (tests/e2e/test_demo.py's host straggler, 2 ranks, beside the other pytest worker's jobs): rank 1's
    host loop +11 ms CPU per step; rank 0 waited 26-61 ms per step for a CPU (15 ms over rank 1's mean, with less
    CPU time of its own) and so bounded 5 of 6 steps by 13.0 ms, which dropped the rules' rank 1 (+41 % own
    time): "no straggler"."""
    waited = wait_excess(ctx.sched, b.rank, ctx.own_steps)
    return waited is not None and b.cost_ns > 0 and float(waited["unexplained_ns"]) >= b.cost_ns


def named(ctx: _Ctx, i: int, rel: float, test: str, cons: float, b: Bound | None) -> Finding:
    """The finding for one candidate: cause, evidence, cost."""
    pr, run = ctx.pr, ctx.run
    rank = int(pr["rank"][i])
    row = pr.row(i, named=True)
    others = pr.filter(pl.col("rank") != rank)
    waited = wait_excess(ctx.sched, rank, ctx.own_steps)
    imb = ctx.work_of(rank)
    cpu_excess = float(waited["cpu_excess_ns"]) if waited and waited.get("cpu_excess_ns") is not None else None
    mine = b if b is not None and b.rank == rank else None
    usual = {k: as_float(others[c].median(), 0.0) for c, k in (("computing", "compute"), ("data_wait", "data"),
                                                                ("free", "host"))}
    eligible = {k for k, c in _CLASS.items() if holds(mine, c, float(row[{"compute": "computing", "data": "data_wait",
                                                                          "host": "free"}[k]]) - usual[k])}
    kind, excess = cause(row, others, waited["blocked_excess_ns"] if waited else None, extra_calls_ns(imb),
                         eligible if mine is not None else None, calls_ratio(imb))
    on_path = from_path(mine.path, mine.cost_ns, excess) if mine is not None else None
    if on_path is not None:
        kind = on_path

    def explains(kind: str) -> bool:  # the rank's CPU time counts only for time the trace put between operators
        return bool(imb) and work_explains(imb, excess, others, float(rel),  # type: ignore[arg-type]
                                           cpu_excess if kind == "host" else None)

    evidence: dict[str, Any] = {
        "own_time_ns": row["own"], "others_median_ns": as_float(others["own"].median()),
        "excess_ns": {k: round(v) for k, v in excess.items()}, "relative_excess": float(rel),
        "test": test, "consistency": round(cons, 3)}
    if on_path is not None:  # the components could not hold the path's cost: the cause is read off the path
        evidence["cause_from"] = "critical path"
    if waited is not None:
        evidence["cpu_wait"] = waited
        if is_contention(waited):  # mostly waiting for a CPU, not for its own extra work: the host, whatever the test
            kind = "contention"
    # DDP's gradient hooks growing on a host trace mean communication, unless more input work (a count) explains
    # the extra compute (bench run 3, 4 ranks on 2 cores: 1.47x longer sequences, AccumulateGrad +4.3 ms of +13.6)
    if kind != "contention" and ctx.bd.filter(pl.col("rank") == rank)["source"][0] == "host" and not explains(kind):
        kind = refine(run, kind, rank, others["rank"].to_list(), evidence)
    note = ""
    if imb:
        evidence["work"] = imb
    if kind in ("host", "data") and explains(kind) or (
            kind == "unclear" and imb and cpu_time_explains(imb, others, float(rel), cpu_excess)):  # type: ignore[arg-type]
        kind = "compute"  # then named input imbalance below
    if kind == "compute" and imb:
        if is_input_imbalance(imb, float(rel)):
            kind, note = "imbalance", imbalance_note(imb)
        else:
            note = work_note(imb, excess["compute"])
    evidence["time_lost"] = time_lost(run, rank, ctx.results, ctx.bd)
    path = ""
    if mine is not None:  # the cost is the what-if saving; the chain says where
        evidence["time_lost"].update(mine.time_lost())
        evidence["critical_path"] = mine.evidence()
        path = mine.clause()
    elif b is not None:  # named on counts while no rank bounds the steps distinctly: what the path saw
        evidence["path_saving_ns"] = round(b.savings.get(rank, 0.0))
        evidence["bounding"] = b.evidence()
    if takes_stage_cost(ctx.results, rank, mine is not None):
        evidence["time_lost"].update(stage_cost(ctx.results))
    floor = PAIR_MIN if test.startswith("signed-rank") else PAIR_THRESHOLD if test.startswith("ratio") else REL_THRESHOLD
    strength = (min(1.0, mine.share / 0.4 if mine else 0.0) if test == "critical path" else
                min(1.0, float(ctx.results["pipeline"].summary.get("cost_share") or 0.0) / 0.4) if test == "pipeline stages"
                else min(1.0, max(rel, 0.0) / (2 * floor)))
    measure = "own time"
    if test == "pipeline stages":
        measure = "the pipeline's bottleneck stage"
    elif test == "critical path":
        # named from the dependencies alone: its own time may even be below the others' (they wait inside
        # framework spans booked as compute: FSDP's pre_forward, issue 25), so no own-time figure is said
        measure = "bounding the step on the critical path"
    elif test.endswith("(cpu-available)"):
        # the excess is of own time minus run-queue wait: with more ranks than cores a busy rank can hold a CPU
        # while the others queue (measured: 11 ms of host busy-work per step at 4 ranks on 2 cores, own -5 %,
        # CPU-available +46 %)
        measure = "own time excluding CPU wait"
    return _finding(rank, kind, rel, evidence, cons * strength, note, measure, path)


def run_straggler(run: Run, results: dict[str, Result]) -> Result:
    """Registered analysis "straggler": the verdict, per-rank and per-step tables."""
    bd, excluded, note = verdict_input(run, frame(results["breakdown"].tables["breakdown"]))
    pr = per_rank(bd)
    if pr.height < 2:
        return Result("straggler", skipped="needs at least 2 undamaged ranks with complete steps" +
                      (f" ({note})" if note else ""))
    ctx = _Ctx(run, results, bd, pr)
    b, no_path = bound(results, excluded)
    cands, left_out = choose(ctx, b)
    if not cands and b is not None and "runq_wait_ns" in ctx.steps.columns:
        b, cands, left_out = rescued(ctx, bound(results, excluded, ctx.steps)[0], b, left_out)
    findings = [named(ctx, *c, b) for c in cands]
    findings += link_stragglers(results, bd, {f.ranks[0] for f in findings})
    findings = [f for f in findings if not set(f.ranks) & set(excluded)]  # never a verdict on broken data
    steps = per_step(bd)
    aside = left_out
    if not findings:
        aside = "; ".join(x for x in (left_out, *below_bar(run, results, steps, pr, excluded, b, no_path, bool(left_out))) if x)
        from rankscope.analysis.diagnosis.likely import evidence, likely_from

        seen = evidence(run, results, steps, pr, excluded)
        maybe = likely_from(seen) if b is None or (seen and seen["rank"] == b.rank) else None
        findings = [maybe] if maybe else []
        if maybe:
            aside = left_out
    verdict = "; ".join(f.title for f in findings) if findings else "no straggler"
    if note or aside:
        verdict += f" ({'; '.join(x for x in (note, aside) if x)})"
    # the path ran and cannot compare the ranks (or was skipped): why is a limit; no rank costing the step is not
    blind = b is None and "critical_path" in results and no_path != NO_SAVING
    limits = blind_spots(run, ctx.sched) + ([no_path] if blind and no_path else [])
    if b is not None:
        steps = steps.join(_bounding_per_step(results), on="step", how="left")
    summary: dict[str, Any] = {
        "verdict": verdict, "excluded_ranks": excluded, "coverage_note": note, "limits": limits, "below_bar": aside,
        "time_lost_per_step_ns": sum(f.evidence["time_lost"]["lost_per_step_ns"] for f in findings
                                     if "time_lost" in f.evidence),
        "bounding": b.evidence() if b is not None else None}
    return Result("straggler", tables={"per_rank": pr.to_arrow(), "per_step": steps.to_arrow()}, findings=findings,
                  summary=summary)


def below_bar(run: Run, results: dict[str, Result], steps: pl.DataFrame, pr: pl.DataFrame, excluded: list[int],
              b: Bound | None, no_path: str, left_out: bool = False) -> list[str]:
    """What is said beside "no straggler": a steady cost on the critical path, evidence under the bar, an
    input imbalance and what it cost."""
    from rankscope.analysis.diagnosis.likely import below_bar_note, evidence, input_imbalance

    # a rank left out already says what the path saw of it (``choose``)
    out = [b.below_bar()] if b is not None and (b.steady or not left_out) else []
    seen = evidence(run, results, steps, pr, excluded)
    if b is None or (seen and seen["rank"] == b.rank):
        out.append(below_bar_note(seen))
    out.append(input_imbalance(run, pr, excluded, b, savings(results, excluded), no_path))
    return out


def _bounding_per_step(results: dict[str, Result]) -> pl.DataFrame:
    """Per step: the rank that bounds it on the critical path and its cost (ns)."""
    st = frame(results["critical_path"].tables["steps"])
    return st.select("step", pl.col("bounding_rank").alias("bounding"), pl.col("cost_ns").alias("bounding_cost"))


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
    description="which rank the others wait for (the critical path across ranks), why, and what it costs",
    run=run_straggler,
    after=("breakdown",),
    uses=("clock", "links", "critical_path", "pipeline"),
    view=View("Straggler verdict", (Col("time_lost_per_step_ns", "time lost per step", NS),),
        (TableView("per_step", "per step: the rank with the longest own time, and the rank that bounds it", (
            Col("step", "step", "count"), Col("slowest", "rank", "count"), Col("own", "own time", NS),
            Col("others_median", "other ranks' median", NS), Col("rel_excess", "excess", "share"),
            Col("bounding", "bounds the step (critical path)", "count"), Col("bounding_cost", "its cost", NS))),),
        place="overview"),
)
