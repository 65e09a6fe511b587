"""Which candidates the straggler verdict names, given the critical path's bounding rank (``choose``): the rules'
own where the path agrees, the path's rank where its cost clears the bar, and the notes on a rank left out (a
slower CPU, a rank starved of or contending for a CPU, a rank that does not bound the steps). Split out of
``straggler`` (which had grown past 550 lines) with ``verdict_ctx`` and ``stage_verdict``."""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.diagnosis.bound import BAR, STEADY_SHARE, Bound, host_bounded, without_what_if
from rankscope.analysis.diagnosis.cpu import OWN_CPU_SHARE, is_contention, wait_excess
from rankscope.analysis.diagnosis.likely import TWIN_SPREAD
from rankscope.analysis.diagnosis.stage_verdict import bottleneck_ranks, stage_candidate, staged
from rankscope.analysis.diagnosis.verdict_ctx import Ctx, counted
from rankscope.analysis.stats import as_float


def choose(ctx: Ctx, b: Bound | None) -> tuple[list[tuple[int, float, str, float]], str]:
    """The candidates to name: the rules' own when they agree with the critical path (a rank they name that
    does not bound the steps was only waiting), or the bounding rank when its cost clears the bar; and a
    note on a rank left out. Where no rank bounds the steps distinctly (the path's timings are as noisy as
    the own times: preempted steps on a loaded host), a candidate that stands on counts is kept. Measured
    (rankscope.demo.workloads.moe, 2 ranks, 6 steps, 2 loaded cores): rank 1 with 1.61x the input elements
    (truth: 2.5x the expert tokens, +9.6 ms CPU per step) saved 7.6 ms per step on the path, rank 0 13.2 ms,
    from two steps preempted by 50 ms; rank 0 bounded 4 of 6 steps (chance, at 2 ranks)."""
    found, pipe_note = balanced_stages(ctx, ctx.rule_candidates())
    # a rank the path has no what-if for (a pipeline's first or last stage: no other rank runs its calls) is kept
    # where the pipeline analysis names its stage the bottleneck (bench/workloads.py seed 2616, pp-gpipe at 4
    # ranks: stage 0 with 2x the layers, +82 % own time, its cost by the stage model 43.5 ms per step against
    # 43.1 ms injected; the path's what-if covered ranks 1 and 2 only and named rank 1 at 1.6 ms)
    unseen = (without_what_if(ctx.results) | staged(ctx.results)) & bottleneck_ranks(ctx.results)
    if b is None:  # no rank has a what-if at all (1F1B at 4 stages: every stage's calls differ): the stage model
        return found or stage_candidate(ctx, unseen), pipe_note
    hungry = starved(ctx, b)
    ranks = ctx.pr["rank"].to_list()
    # where the path names nobody (its rank starved), a rules' candidate whose own extra time was the host's is not
    # kept either: the same test as the path's rank gets (``contended``)
    waiting = {int(ranks[c[0]]) for c in found if hungry and waited_for_cpu(ctx, int(ranks[c[0]]))}
    def kept(r: int, test: str, rel: float) -> bool:
        if not counted(ctx, r, test) and slower_cpu(ctx.pr, r, rel):
            return False
        if r == b.rank and costs_nothing(ctx, b):  # it bounds the steps, but running as the others it saves nothing
            return r in unseen
        return ((r == b.rank and (b.distinct or agrees(b))) or (not b.distinct and counted(ctx, r, test)) or r in unseen
                or (hungry and r != b.rank and r not in waiting))

    keep = [c for c in found if kept(int(ranks[c[0]]), c[2], c[1])]
    note = ""
    if found and not keep and (r0 := int(ranks[found[0][0]])) in waiting:
        ctx.host_contended = r0
        note = (f"rank {r0}'s own time is +{found[0][1]:.0%} over the other ranks', but its extra time was waiting for "
                f"a CPU (host contention, not its own work), and rank {b.rank}, which bounds {b.steps} of {b.of_steps} "
                "steps on the critical path, waited for a CPU longer than it saved: not named")
    elif found and not keep and slower_cpu(ctx.pr, r0, found[0][1]):
        mine, rest = mine_rest(ctx.pr, r0, "data_wait")
        note = (f"rank {r0}'s own time is +{found[0][1]:.0%} over the other ranks', most of it data loading at "
                f"{mine / rest:.2f}x theirs: within what a slower CPU explains (up to {1 + TWIN_SPREAD:.1f}x), not named")
    elif found and not keep and int(ranks[found[0][0]]) == b.rank and costs_nothing(ctx, b):
        # measured (rankscope synth --format ascend --task-queue, 8 ranks, rank 0's queue thread 3 ms per operator):
        # its device idles +120 %, and the pipeline's slack hides all of it (the step as the job without it)
        note = (f"rank {b.rank}'s own time is +{found[0][1]:.0%} over the other ranks', but on the critical path it "
                f"costs {b.cost_ns / 1e6:.2f} ms per step ({b.share:.1%}): its extra time cost the step nothing: "
                "not named")
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
        ctx.host_contended = b.rank
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
        if keep:  # named by the stage model: the path's reading of the same steps is not a note beside it
            return keep, ""
    return keep, note or (pipe_note if not keep else "")


def balanced_stages(ctx: Ctx, found: list[tuple[int, float, str, float]]
                    ) -> tuple[list[tuple[int, float, str, float]], str]:
    """The rules' candidates, less those a pipeline's balanced stages deny, and the note on them: a rank's own
    time there holds its waits inside the schedule's own spans, and the stage model's work (thread CPU time) found
    the stages alike. Candidates that stand on counts, or whose extra own time is mostly data loading (outside the
    schedule, and not CPU work where it waits for I/O), stay. Measured (bench/workloads.py seed 2843, pp-zbv-healthy
    at 4 ranks, ZB-V: rank 0 holds the first and the last stage): "rank 0 is slow: compute, own time excluding CPU
    wait +29 %, costs 26.7 ms per step", where the stages held 1.05x the mean work at most."""
    pp = ctx.results.get("pipeline")
    if pp is None or pp.skipped or not pp.summary.get("balanced") or len(pp.summary.get("stage_ranks") or []) < 2:
        return found, ""
    ranks = ctx.pr["rank"].to_list()
    own = ctx.pr["own"].to_list()

    def stands(i: int, test: str) -> bool:  # on counts, or on data loading (not a wait inside the schedule)
        r = int(ranks[i])
        rest = sorted(float(o) for k, o in enumerate(own) if k != i)
        excess = float(own[i]) - (rest[len(rest) // 2] if rest else 0.0)
        return counted(ctx, r, test) or (excess > 0 and data_excess(ctx.pr, r) >= 0.5 * excess)

    keep = [c for c in found if stands(c[0], c[2])]
    if keep or not found:
        return keep, ""
    r = int(ranks[found[0][0]])
    busiest = float(pp.summary.get("imbalance") or 1.0)
    return [], (f"rank {r}'s own time is +{found[0][1]:.0%} over the other ranks', but the pipeline's stages hold "
                f"balanced work (the busiest {busiest:.2f}x the mean): its extra own time is waiting inside the "
                "schedule, not named")


def rescued(ctx: Ctx, hb: Bound | None, b: Bound,
            note: str) -> tuple[Bound, list[tuple[int, float, str, float]], str]:
    """The own-time rules' first candidate, at least ``likely.TWIN_SPREAD`` over the others, that the path left out
    only because another rank "bounded" steps while it waited for a CPU: with those steps left out (``hb``,
    ``bound.without_host_steps``; at least half the steps stay) it bounds the rest distinctly, or agrees (``agrees``).
    Only the rules' own candidate is rescued: a rank the path alone would name in the remaining steps is not (on
    4 processes sharing 2 CPUs few steps stay, and healthy ranks bound them: bench/workloads.py seed 2761,
    lm-healthy at 4 ranks, 5 of 10 named with the path counted that way). Measured (tests/e2e/test_demo.py's host
    straggler beside the other pytest worker's jobs): rank 1 +83 % own time bounded 3 of 6 steps; rank 0, with
    58-65 ms of run-queue wait per step, the other 3: "no straggler". With those left out: 3 of 3, 28.8 ms."""
    found = balanced_stages(ctx, ctx.rule_candidates())[0]
    if hb is None or not hb.host_steps or not found or found[0][1] < TWIN_SPREAD or starved(ctx, hb):
        return b, [], note
    i, rel = found[0][0], found[0][1]
    if int(ctx.pr["rank"][i]) != hb.rank or 2 * hb.of_steps < hb.of_steps + hb.host_steps:
        return b, [], note
    if not (hb.distinct or agrees(hb)):
        return b, [], note
    return hb, [found[0]], ""


def contended(ctx: Ctx, b: Bound) -> bool:
    """The path's bounding rank's extra own time was the host's doing: the path alone does not name it (the host
    is to blame, not the rank; ``starved`` covers a wait as long as the whole saving). Either over all steps
    (``cpu.is_contention``: most of its extra own time was run-queue wait its own extra CPU time does not explain),
    or step by step: in at least half of the steps it bounds, it waited on the run queue, over the other ranks in
    that step, at least as long as its what-if saving there (``bound.host_bounded``).
    Measured (bench/workloads.py seed 2761 run 175, DDP LM at 4 ranks, a healthy twin; and a healthy `make demo`):
    "rank 1 is slow: contention, bounding the step on the critical path, costs 6.2 ms per step (13%)": 90 % of its
    +18 % own time was run-queue wait, its CPU time +0.5 ms, 4 processes on 2 CPUs. Step by step (seed 2781 run
    55, the same healthy job): "rank 2 is slow: compute (same operators and input sizes, slower), costs 4.7 ms per
    step (10%)" with CPU time +0.4 ms per step; in 4 of the 5 steps it bounded, it waited longer for a CPU, over the
    others' median there (7-14 ms), than it saved (4.6-14.0 ms), but over all steps run-queue wait was 49.5 % of its extra own
    time: one 45 ms preemption of rank 3 in another step raised the others' mean.
    Only where the own-time excess is positive and its CPU time is known, and never when its extra CPU time covers
    a quarter of the path's cost (``OWN_CPU_SHARE``): a pipeline's heavy stage looks no busier in own time than the
    stages that wait for it inside their Forward / Backward spans, and its share of run-queue wait says nothing;
    a rank busy with extra work of its own waits for a CPU in proportion on a shared host."""
    waited = _extra_split(ctx, b.rank)
    if waited is None or float(waited["cpu_excess_ns"]) >= OWN_CPU_SHARE * b.cost_ns:
        return False
    return is_contention(waited) or 0 < len(b.bounded) <= 2 * host_bounded(ctx.results, b, ctx.steps, ctx.excluded)


def waited_for_cpu(ctx: Ctx, rank: int) -> bool:
    """A rules' candidate's extra own time was the host's doing (``cpu.is_contention``: mostly run-queue wait its own
    extra CPU time does not explain), where its own-time excess is positive and its CPU time known. Asked only where
    the path's bounding rank starved (``starved``), which would otherwise keep the rules' candidate unchecked.
    Measured (bench/workloads.py seed 2793 run 20, a healthy FSDP2 job at 4 ranks on 2 CPUs): rank 2 +11 % own time
    (a Dixon outlier), its CPU time -0.6 ms per step against the others', 11.0 ms more run-queue wait; the path's rank
    0 bounded 3 of 6 steps by 6.7 ms and waited 9.0 ms more for a CPU: "rank 2 is slow: contention, ... costs 0.6 ms
    per step (0%)"."""
    waited = _extra_split(ctx, rank)
    return waited is not None and is_contention(waited)


def _extra_split(ctx: Ctx, rank: int) -> dict[str, Any] | None:
    """``cpu.wait_excess`` of ``rank`` where there is an own-time excess to split and its CPU time is known."""
    waited = wait_excess(ctx.sched, rank, ctx.own_steps, ctx.peers(rank))
    if waited is None or waited.get("cpu_excess_ns") is None or float(waited.get("own_excess_ns") or 0.0) <= 0:
        return None
    return waited


def costs_nothing(ctx: Ctx, b: Bound) -> bool:
    """The bounding rank's what-if saves under ``STEADY_SHARE`` of the step, on a path that joins every rank (each
    has a what-if, no send or receive lacks its peer): not a verdict from a path that misses a rank's calls (a rank
    whose collectives were not exported: tests/unit/test_ingest_hostile_more.py)."""
    cp = ctx.results.get("critical_path")
    if cp is None or cp.skipped or int(cp.summary.get("unmatched_p2p") or 0):
        return False
    seen = {int(w["rank"]) for w in cp.summary.get("what_if") or [] if w.get("step_ms_if_median") is not None}
    return {int(r) for r in ctx.pr["rank"].to_list()} <= seen and b.share < STEADY_SHARE


def agrees(b: Bound) -> bool:
    """The path agrees with a rank the own-time rules named (its bounding rank) without bounding the steps
    distinctly: in two thirds of the steps (``BAR["steps"]``) at twice any other rank's median saving (not
    ``BAR["over_noise"]``: two methods agree on the rank). Measured (bench/workloads.py seed 2623, fsdp-compute
    at 2 ranks, rank 0's extra matmuls, +11.5 ms per step by its own timers): the rules' +32 % own time; the path
    5 of 6 steps (a coin gives that 11 % of the time), 22.0 ms against rank 1's 8.4 ms (2.6x): "no straggler".
    The healthy demo's "cause unclear" rank (4 of 8 steps, 2.26 against 2.21 ms) still is not named."""
    return b.steps >= BAR["steps"] * b.of_steps and b.cost_ns >= 2.0 * b.others_best_ns and b.cost_ns > 0


def starved(ctx: Ctx, b: Bound) -> bool:
    """The path's bounding rank waited for a CPU, over the other ranks and beyond what its own extra CPU time
    brings at their rate (``wait_excess``'s unexplained wait: a rank busy with its own extra work waits more
    too, and is not starved), at least as long as its what-if saving:
    its segments on the path are the run queue's, not its own work: the path names nobody and does not veto
    another rank the rules name (a rule naming this same rank still needs the path to agree).
    Measured (tests/e2e/test_demo.py's host straggler, 2 ranks, beside the other pytest worker's jobs): rank 1's
    host loop +11 ms CPU per step; rank 0 waited 26-61 ms per step for a CPU (15 ms over rank 1's mean, with less
    CPU time of its own) and so bounded 5 of 6 steps by 13.0 ms, which dropped the rules' rank 1 (+41 % own
    time): "no straggler".
    A rank whose own extra CPU time alone is at least half its saving did its own work on the path, whatever it
    waited besides: rankscope.demo.workloads.pipeline --dp 2 (1F1B, 4 ranks on 2 CPUs), rank 1 loading data 17.5 ms
    longer per step (its timers), +24 ms of CPU time and +49 ms of run-queue wait per step over the other ranks,
    saved 20.4 ms in 5 of 6 steps and was called starved: "no straggler"."""
    waited = wait_excess(ctx.sched, b.rank, ctx.own_steps, ctx.peers(b.rank))
    if waited is None or b.cost_ns <= 0 or float(waited["unexplained_ns"]) < b.cost_ns:
        return False
    return waited.get("cpu_excess_ns") is None or float(waited["cpu_excess_ns"]) < 0.5 * b.cost_ns


def mine_rest(pr: pl.DataFrame, rank: int, col: str) -> tuple[float, float]:
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
    own, own_rest = mine_rest(pr, rank, "own")
    data, data_rest = mine_rest(pr, rank, "data_wait")
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
