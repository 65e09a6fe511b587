"""The pipeline side of the straggler verdict: the bottleneck stage's rank where neither the rules nor the path can
name it (``stage_candidate``), and the stage model's cost (``stage_cost``). Split out of ``straggler``."""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.base import Result
from rankscope.analysis.diagnosis.bound import BAR
from rankscope.analysis.diagnosis.verdict_ctx import Ctx
from rankscope.analysis.stats import as_float

# From 3 ranks, a stage holding this many times the stages' mean work (thread CPU time, medians over steps) is
# named at ``BAR["share_host"]`` of the step instead of ``BAR["share_many"]``: the work is measured, not
# inferred, and 1F1B hides part of a slow first stage's cost behind its warm-up (``pipeline_replay``).
# Measured (bench/workloads.py, 2 cores): balanced twins 1.005-1.053 (seeds 2512, 2613, 2623), once 1.15
# under load (seed 2624); stages with 2x the layers 1.27-1.32 at 2 stages, 1.47-1.57 at 4. Seed 2651, pp-1f1b
# at 4 ranks, stage 0 with 2x the layers: imbalance 1.47, cost 19.8 ms (9.5 %) by the replay: "no straggler".
# Lowered from 1.25: bench/workloads.py seed 2843, ppdp-1f1b (2 stages x 2 replicas, 1F1B), stage 0 with 2x the
# layers: imbalance 1.238, cost 15.0 ms (8.1 %) in 6 of 6 steps, "no straggler" in 3 of 3 (stage 0 holds the
# embedding, stage 1 the head: a heavy first stage reads lighter). Seed 2841's heavy stages: 1.217-1.42
# (interleaved 1F1B at 2 and 4 ranks, ppdp with stage 1 heavy); its 15 healthy twins of those shapes: 1.001-1.020.
STAGE_IMBALANCE = 1.20


def stage_candidate(ctx: Ctx, unseen: set[int]) -> list[tuple[int, float, str, float]]:
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
    # the bar reads the stage's cost with a CPU per rank: on a host with fewer CPUs than ranks the said cost is less
    # (pipeline._what_if's floor), but which stage bounds the pipeline is the schedule's
    if float(sm.get("cost_free_share", sm.get("cost_share")) or 0.0) < bar or of == 0 or steps < BAR["steps"] * of:
        return []
    mine = [r for r in sorted(unseen) if r in ranks]
    if not mine:
        return []
    own = ctx.pr["own"].to_list()
    r = max(mine, key=lambda x: float(own[ranks.index(x)]))  # of a stage's replicas, the slowest
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


def staged(results: dict[str, Result]) -> set[int]:
    """Every rank of a pipeline's stages (2 or more). The path's what-if compares a rank with the other ranks' median
    of the calls they share, and neither kind of peer sees a stage holding more layers: across stages those are
    other layers, and within a stage (data-parallel replicas) the same layers, as heavy. So the stage model, not
    the path, confirms or denies that a stage's rank bounds the steps (as for ``bound.without_what_if``'s ranks).
    Measured (bench/workloads.py seed 2712, pp-gpipe at 4 ranks, stage 1 with 2x the layers, +29 ms of CPU per
    step by the job's timers): the stage model named stage 1 in 6 of 6 steps at 30.7 ms (22.6 %); the path
    matched its calls with stage 2's and gave it -2.8 to -6.1 ms, and vetoed it: "no straggler" in 3 of 3.
    rankscope.demo.workloads.pipeline --dp 2 (1F1B, 2 stages x 2 replicas, stage 1 with 2x the layers): the stage
    model named stage 1 (ranks 2, 3) at 18.7 ms (11.6 %); the path compared rank 2 with rank 3 and saved 0.2 ms,
    and vetoed it: "no straggler"."""
    pp = results.get("pipeline")
    if pp is None or pp.skipped:
        return set()
    stages = pp.summary.get("stage_ranks") or []
    return {int(r) for rs in stages for r in rs} if len(stages) >= 2 else set()


def stage_cost(results: dict[str, Result]) -> dict[str, Any]:
    """The bottleneck stage's cost per step by the pipeline analysis (the step if the stages were balanced)
    as ``time_lost`` evidence. Measured (bench/workloads.py seed 2616, GPipe, 4 stages, stage 0 with 2x the
    layers): 43.5 ms against the job's own 43.1 ms; own time against the next slowest rank said 62.0 ms."""
    sm = results["pipeline"].summary
    cost, steps = float(sm.get("cost_ns") or 0.0), int(sm.get("of_steps") or 0)
    return {"lost_per_step_ns": round(cost), "lost_total_ns": round(cost * steps),
            "lost_share_of_step": round(float(sm.get("cost_share") or 0.0), 4), "steps": steps,
            "method": "pipeline stages: the step if the stages' work were balanced"}


def stage_work_done(results: dict[str, Result], cpu_excess_ns: float | None) -> bool:
    """The bottleneck stage's cost is its own work: the stage model measured the stages in thread CPU time, which a
    wait for a CPU does not add to, and the rank's CPU time per step exceeds the other ranks' by at least half the
    cost it names (``stage_cost``; as ``cause.cpu_time_explains``). On a loaded host such a rank also waits for a
    CPU, more than in proportion to that work; its cause is its layers, not the host. Measured (bench/workloads.py
    seed 3601 beside a test suite, load 6-9): pp-gpipe at 2 ranks, stage 0 with 2x the layers: CPU time +46.2 ms per
    step against a cost of 41.7 ms, run-queue wait 52 % of its extra own time beyond what the other rank's wait per
    CPU second predicts; ppdp-1f1b at 4 ranks, stage 0 (ranks 0, 1) with 2x the layers: rank 1's CPU time +59.7 ms
    against 68.7 ms, 92 %. Both said "contention"."""
    sm = results["pipeline"].summary
    cost = float(stage_cost(results)["lost_per_step_ns"])
    return (sm.get("work_measure") == "thread CPU time" and cpu_excess_ns is not None and cost > 0
            and cpu_excess_ns >= 0.5 * cost)


def stage_note(results: dict[str, Result]) -> str:
    """" (stage 1 of 2, ranks 2, 3: 63 % of the work)", for a bottleneck stage's rank: its work against the other
    stages' (its replicas, if any, hold the same layers: the work note against them says nothing)."""
    sm = results["pipeline"].summary
    stage, ranks = sm.get("bottleneck_stage"), sm.get("stage_ranks") or []
    if not isinstance(stage, int) or not 0 <= stage < len(ranks):
        return ""
    share = sm.get("bottleneck_work_share")
    held = f": {float(share):.0%} of the work" if isinstance(share, (int, float)) else ""
    who = "rank" if len(ranks[stage]) == 1 else "ranks"
    return f" (stage {stage} of {len(ranks)}, {who} {', '.join(map(str, ranks[stage]))}{held})"


def takes_stage_cost(results: dict[str, Result], rank: int, on_path: bool, path_cost_ns: float = 0.0) -> bool:
    """A named rank of the pipeline's bottleneck stage takes the stage model's cost (``stage_cost``) where the path
    has no what-if for it (``on_path`` False), or compares it with other stages' layers (a rank alone in its
    stage). Measured (bench/workloads.py seed 2713, pp-gpipe at 4 ranks, a middle stage with 2x the layers, +28-34
    ms of extra CPU per step by the job's timers): the path's what-if 1.2-8.6 ms, the stage model's 27.8-32.8 ms.
    A rank with replicas is compared with them on the path, which sees its own extra work (and not its layers, the
    replicas' too): the larger of the two costs is its own. Measured (rankscope.demo.workloads.pipeline --dp 2,
    rank 1 loading data 17.5 ms longer per step): the path's what-if 20.4 ms, the stage model's 3.3 ms."""
    if rank not in bottleneck_ranks(results) or (on_path and rank not in staged(results)):
        return False
    mates: list[int] = next((rs for rs in results["pipeline"].summary.get("stage_ranks") or [] if rank in rs), [])
    return not (on_path and len(mates) >= 2 and path_cost_ns > float(stage_cost(results)["lost_per_step_ns"]))


def stage_cause(kind: str, more_calls: float, calls_ratio: float) -> str:
    """The cause of a stage named by the stage model: "compute" where its own time's components said "host" or
    nothing clear but it calls an operator more often per step than the other stages (``more_calls``: the time per
    step in those calls; ``calls_ratio`` > 1): its extra layers, a count with no noise. The stage model named it on
    its actions' thread CPU work; its gaps between operators are what grows when the host is busy (tests/e2e/
    test_pipeline_shapes.py, ppdp 1F1B with stage 1 at 2x the layers, 4 ranks on 2 CPUs beside two busy loops:
    once "host")."""
    return "compute" if kind in ("host", "unclear") and more_calls > 0 and calls_ratio > 1.0 else kind
