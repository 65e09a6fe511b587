"""Advice that fits a pipeline: balance the stages, pick the schedule, and leave the natural bubble alone.

Pattern: on a pipeline-parallel run, the time a stage waits for its neighbours is the pipeline's bubble,
not data-parallel communication: the rules written for DDP ("bucket sizes, async collectives", "DDP
buckets, FSDP prefetch", "compute differs across ranks") do not apply to it. ``shape_advice`` (called by
the "advice" analysis) keeps such a finding only where the exposed communication left after taking out the
pipeline's waits still passes the rule's own threshold (a data-parallel all-reduce beside the pipeline),
and a compute imbalance only between ranks of one stage; it adds the pipeline's own advice: move layers
off the bottleneck stage (its share of the work and what balancing saves), 1F1B or interleaved instead of
GPipe, and the natural bubble (p - 1) / (m + p - 1) said as information, never as a problem.
"""
from __future__ import annotations

from dataclasses import replace
from statistics import median
from typing import Any

import polars as pl

from rankscope.analysis.base import Finding, Result, Severity, frame
from rankscope.analysis.diagnosis.pipeline import COST_SHARE, CRITICAL_SHARE
from rankscope.analysis.diagnosis.pipeline_shape import bubble_formula

PIPELINE_WAITS = ("advice.exposed_comm", "advice.missing_overlap")


def shape_advice(results: dict[str, Result], found: list[Finding], rules: dict[str, dict[str, float]]) -> list[Finding]:
    """``found`` (the advice rules' findings) fitted to a pipeline run; unchanged on any other run."""
    pipe = results.get("pipeline")
    if pipe is None or pipe.skipped or "ranks" not in pipe.tables:
        return found
    s = pipe.summary
    rest = _exposed_beyond_bubble(results, pipe)
    out = []
    for f in found:
        kept: Finding | None = f
        if f.kind in PIPELINE_WAITS:
            kept = _only_beyond_bubble(f, rest, rules)
        elif f.kind == "advice.dp_imbalance":
            kept = _within_one_stage(f, s, rules)
        if kept is not None:
            out.append(kept)
    return out + [x for x in (balance(s), schedule(s), bubble(s)) if x is not None]


def _exposed_beyond_bubble(results: dict[str, Result], pipe: Result) -> dict[int, dict[str, float]]:
    """Per rank (medians over steps): the step, the exposed communication minus the pipeline's waits, and
    the communication minus the time sends and receives were in flight (never below 0). Exposed
    communication that is not the pipeline's is at most the time some other collective (an all-reduce
    beside the pipeline) was in flight: on gloo, a send still in flight while the stage computes (GPipe
    waits its sends at the end of each phase) can make the breakdown book the stage's own time as exposed
    communication, which is neither a wait nor a data-parallel collective."""
    bd = results.get("breakdown")
    if bd is None or bd.skipped or "breakdown" not in bd.tables:
        return {}
    b = frame(bd.tables["breakdown"])
    b = b.filter(pl.col("complete")) if b.filter(pl.col("complete")).height else b
    med = b.group_by("rank").agg(pl.col("wall", "comm_exposed", "communication").median())
    waits = frame(pipe.tables["ranks"]).group_by("rank").agg(pl.col("bubble_ns", "p2p_ns", "coll_ns").median())
    j = med.join(waits, on="rank", how="left").with_columns(pl.col("bubble_ns", "p2p_ns", "coll_ns").fill_null(0))
    return {int(r["rank"]): {"wall": float(r["wall"] or 0),
                             "comm_exposed": min(max(0.0, float(r["comm_exposed"] or 0) - float(r["bubble_ns"])),
                                                 float(r["coll_ns"])),
                             "communication": max(0.0, float(r["communication"] or 0) - float(r["p2p_ns"]))}
            for r in j.iter_rows(named=True)}


def _only_beyond_bubble(f: Finding, rest: dict[int, dict[str, float]], rules: dict[str, dict[str, float]]
                        ) -> Finding | None:
    """The finding, restated on what is left without the pipeline's waits, when some rank it names still passes
    the rule: the data-parallel collectives beside the pipeline (a stage's gradient all-reduce over its replicas),
    with their own share and severity. Measured (rankscope.demo.workloads.pipeline --dp 2, 1F1B, 4 ranks on 2
    CPUs): "communication is exposed: up to 66 % of the step", critical; of rank 1's 129 ms of exposed
    communication 98 ms were the pipeline's waits, 31 ms its stage's all-reduce after the schedule."""
    name = f.kind.removeprefix("advice.")
    col, share = ("comm_exposed", rules["exposed_comm"]["share"]) if name == "exposed_comm" else \
        ("communication", rules["missing_overlap"]["comm_share"])
    left = {r: rest[r][col] / rest[r]["wall"] for r in f.ranks if r in rest and rest[r]["wall"] > 0}
    keep = tuple(r for r, v in left.items() if v > share)
    if not keep:
        return None
    worst = max(left[r] for r in keep)
    who = f"rank {keep[0]}" if len(keep) == 1 else "ranks " + ", ".join(map(str, keep))
    what = "exposed (not overlapped)" if name == "exposed_comm" else "barely overlapped with compute"
    sev = Severity.CRITICAL if name == "exposed_comm" and worst > 3 * share else Severity.WARNING
    return Finding(
        kind=f.kind, severity=sev, ranks=keep,
        title=f"collectives beside the pipeline ({who}) are {what}: up to {worst:.0%} of the step beyond the "
              "pipeline's own waits (its bubble and sends / receives are left out). Start the gradient all-reduce "
              "of each stage's replicas during its last backward (DDP buckets, FSDP prefetch), or reduce its volume",
        # "share": what is left (what later rules quote: advice_path's "the wait for rank 3" on the same ranks)
        evidence={**f.evidence, "share": {str(r): round(left[r], 4) for r in keep},
                  # the rule's own shares: exposed communication's "share", missing overlap's "comm_share"
                  "with_pipeline_waits_share": f.evidence.get("share") or f.evidence.get("comm_share")})


def _within_one_stage(f: Finding, s: dict[str, Any], rules: dict[str, dict[str, float]]) -> Finding | None:
    """A compute imbalance is data-parallel only between ranks of one stage: the named rank against its stage's
    other ranks, restated so (its ratio against all ranks mixes the stages' layers). Measured (bench/workloads.py
    seed 3011, ppdp-1f1b, stage 0 with 2x the layers on ranks 0, 1): "rank 0 computes 1.67x the other ranks' median
    per step. Balance the work (shard sizes, sequence lengths)"; against rank 1, its replica, 1.11x."""
    if not f.ranks:
        return None
    rank = f.ranks[0]
    peers: list[int] = next((r for r in s.get("stage_ranks", []) if rank in r), [])
    comp = f.evidence.get("computing_ns") or {}
    others = [float(comp[str(p)]) for p in peers if p != rank and str(p) in comp]
    if not others or str(rank) not in comp:
        return None
    mid = median(others)
    ratio = float(comp[str(rank)]) / mid if mid > 0 else 0.0
    if ratio <= rules["dp_imbalance"]["ratio"]:
        return None
    if f.evidence.get("not_work") or f.evidence.get("host_contended"):  # said already: its extra time was waiting
        return f
    stage = next(i for i, r in enumerate(s.get("stage_ranks", [])) if rank in r)
    who = ", ".join(str(p) for p in peers if p != rank)
    return replace(f, title=f"compute differs between the replicas of pipeline stage {stage}: rank {rank} computes "
                            f"{ratio:.2f}x {'rank' if len(peers) == 2 else 'ranks'} {who} per step. Balance their work "
                            "(shard sizes, sequence lengths) or check that rank.",
                   evidence={**f.evidence, "ratio": round(ratio, 3), "all_ranks_ratio": f.evidence.get("ratio"),
                             "compared_with": [p for p in peers if p != rank], "stage": stage})


def balance(s: dict[str, Any]) -> Finding | None:
    """Move layers off the bottleneck stage: its share of the work and what a balanced split saves."""
    stage = s.get("bottleneck_stage")
    bounds = float(s.get("cost_free_share", s.get("cost_share")) or 0.0)  # with a CPU per rank (pipeline._what_if)
    if stage is None or s.get("balanced", True) or bounds < COST_SHARE:
        return None
    ranks = s["stage_ranks"][stage]
    even = 1 / s["stages"]
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {','.join(map(str, ranks))}"
    return Finding(
        kind="advice.pipeline_balance", ranks=tuple(ranks),
        severity=Severity.CRITICAL if s["cost_share"] >= CRITICAL_SHARE else Severity.WARNING,
        title=f"pipeline stage {stage} ({who}) holds {s['bottleneck_work_share']:.0%} of the work of {s['stages']} "
              f"stages (forward, backward and optimizer; {even:.0%} each when balanced) and sets the pace of every "
              f"microbatch: "
              f"move layers from stage {stage} to the other stages; balanced, the step would take "
              f"{s['step_ms_if_balanced']:.1f} ms instead of {s['step_ms']:.1f} ms (-{s['cost_ms']:.1f} ms)",
        evidence={k: s.get(k) for k in ("bottleneck_stage", "bottleneck_work_share", "imbalance", "cost_ms",
                                        "step_ms", "step_ms_if_balanced", "work_measure", "critical_path_stage")})


def schedule(s: dict[str, Any]) -> Finding | None:
    """GPipe keeps every microbatch's activations until the backward: 1F1B or interleaved instead."""
    name, m, p = s.get("schedule", ""), s.get("microbatches"), s.get("stages", 0)
    if name != "GPipe" or not m:
        return None
    inter = (p - 1) / (2 * m + p - 1)
    told = "the trace's spans" if s.get("schedule_from") == "spans" else "the order of its sends and receives"
    return Finding(
        kind="advice.pipeline_schedule", severity=Severity.INFO,
        title=f"the schedule is GPipe (from {told}): each stage holds the activations of all {m} microbatches "
              f"until its backward. 1F1B holds at most {p} with the same bubble; interleaved 1F1B (2 stages per "
              f"rank) cuts the bubble from {s.get('expected_bubble_share') or 0:.0%} to {inter:.0%} of the step "
              "(torch.distributed.pipelining: Schedule1F1B, ScheduleInterleaved1F1B)",
        evidence={"schedule": name, "schedule_from": s.get("schedule_from"), "microbatches": m, "stages": p,
                  "bubble_share": s.get("expected_bubble_share"), "interleaved_bubble_share": round(inter, 4)})


def bubble(s: dict[str, Any]) -> Finding | None:
    """The natural bubble, as information: more microbatches make it smaller."""
    exp, m, p = s.get("expected_bubble_share"), s.get("microbatches"), s.get("stages", 0)
    if exp is None or not m:
        return None
    more = (p - 1) / (2 * int(s.get('stages_per_rank') or 1) * m + p - 1)
    return Finding(
        kind="advice.pipeline_bubble", severity=Severity.INFO,
        title=f"a balanced pipeline of {p} stages and {m} microbatches idles "
              f"{bubble_formula(int(s.get('stages_per_rank') or 1))} = {exp:.0%} of each "
              f"step (the natural bubble: filling and draining the pipeline); {2 * m} microbatches per step would "
              f"make it {more:.0%}",
        evidence={"expected_share": round(exp, 4), "microbatches": m, "stages": p, "with_twice_the_microbatches": round(more, 4)})
