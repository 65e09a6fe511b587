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
Modules: ``verdict_ctx`` (what the rules read, once), ``path_choice`` (which candidate the path lets stand, and the
notes on a rank left out), ``stage_verdict`` (a pipeline's bottleneck stage); this one names and sizes the finding.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Finding, Result, Severity, frame
from rankscope.analysis.diagnosis.bound import NO_SAVING, Bound, bound, holds, savings
from rankscope.analysis.diagnosis.cause import cause, cpu_time_explains, from_path, refine, work_explains
from rankscope.analysis.diagnosis.cpu import cpu_run, is_contention, many_intra_op_threads, wait_excess, work_rel
from rankscope.analysis.diagnosis.path_choice import choose, rescued
from rankscope.analysis.diagnosis.rules import PAIR_MIN, PAIR_THRESHOLD, REL_THRESHOLD, per_rank, per_step
from rankscope.analysis.diagnosis.stage_verdict import (stage_cause, stage_cost, stage_note, stage_work_done,
                                                        takes_stage_cost)
from rankscope.analysis.diagnosis.verdict_ctx import Ctx
from rankscope.analysis.diagnosis.work import (calls_ratio, extra_calls_ns, imbalance, imbalance_note,
                                               is_input_imbalance, work_note, work_peers)
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
    if measure.startswith(("own time", "CPU time")):
        title = f"{head}{note}, {measure} +{rel:.0%} vs the other ranks' median{cost}{path}"
    else:
        title = f"{head}{note}, {measure}{cost}{path}"
    return Finding(kind="straggler", title=title, severity=Severity.WARNING, ranks=(rank,), evidence=evidence,
                   confidence=round(conf, 2))


def _cost(ctx: Ctx, rank: int, row: dict[str, Any], mine: Bound | None, b: Bound | None,
          cpu_cost: float | None, evidence: dict[str, Any], by_stage: bool = False, by_cpu: bool = False) -> str:
    """The finding's cost into ``evidence["time_lost"]`` (own time against the next slowest rank; the path's what-if
    where the rank bounds the steps; its extra CPU time ``cpu_cost`` where it was found on CPU time, ``by_cpu``, or
    where neither the path nor its own time showed a cost; the stage model's for a pipeline's bottleneck stage), with
    what the path saw; returns the path's clause."""
    evidence["time_lost"] = time_lost(ctx.run, rank, ctx.results, ctx.bd)
    path = ""
    if mine is not None:  # the cost is the what-if saving; the chain says where
        evidence["time_lost"].update(mine.time_lost())
        evidence["critical_path"] = mine.evidence()
        path = mine.clause()
    elif b is not None:  # named on counts while no rank bounds the steps distinctly: what the path saw
        evidence["path_saving_ns"] = round(b.savings.get(rank, 0.0))
        evidence["bounding"] = b.evidence()
    # own time never above the next slowest rank's, on a CPU run (a device rank's thread CPU time is not its work)
    unseen = not evidence["time_lost"].get("lost_per_step_ns") and cpu_run(ctx.run)
    if mine is None and cpu_cost is not None and cpu_cost > 0 and (by_cpu or unseen):
        # ranks share CPUs: the step's wall time cannot separate its extra work from the others' run-queue wait
        # (found on CPU time, or on own time less CPU wait: tests/e2e/test_workloads.py's LM job under load once said
        # "costs 0.0 ms"); the cost said is that work, in CPU time. Only the path's what-if says "no time"
        wall = float(row["wall"]) if "wall" in row else 0.0
        evidence["time_lost"].update({"lost_per_step_ns": round(cpu_cost), "lost_share_of_step":
                                      round(cpu_cost / wall, 4) if wall > 0 else 0.0,
                                      "method": "its training thread's extra CPU time per step (ranks share CPUs: "
                                                "own time and the path's what-if cannot separate it)"})
    # named by the stage model: its cost; named by the path against its replicas: the larger (``takes_stage_cost``)
    if takes_stage_cost(ctx.results, rank, mine is not None, mine.cost_ns if mine is not None and not by_stage else 0.0):
        evidence["time_lost"].update(stage_cost(ctx.results))
        if mine is not None and (mine.steps == 0 or mine.cost_ns < 0.5 * evidence["time_lost"]["lost_per_step_ns"]):
            # the path compared the stage with other layers or its replicas and saw little of it: "bounds 0 of 6
            # steps; the step would take 101.7 ms instead of 101.7 ms" (interleaved 1F1B at 2 ranks), or 164.4
            # instead of 164.6 beside the stage model's 20.9 ms (2 stages x 2 replicas) is not the stage's cost
            path = ""
    return path


def _compared_with(ctx: Ctx, rank: int, test: str) -> pl.DataFrame:
    """The other ranks' rows a candidate's components are read against: all of them, or for a pipeline's stage the
    other stages' ranks (its replicas hold the same layers, as heavy)."""
    others = ctx.pr.filter(pl.col("rank") != rank)
    if test != "pipeline stages":
        return others
    mates = work_peers(ctx.results, ctx.pr["rank"].to_list(), rank)
    rest = others.filter(~pl.col("rank").is_in(mates))
    return rest if rest.height else others


def _measure(test: str) -> str:
    """What the title's figure measures, by the test that found the rank."""
    if test == "pipeline stages":
        return "the pipeline's bottleneck stage"
    if test == "critical path":
        # named from the dependencies alone: its own time may even be below the others' (they wait inside
        # framework spans booked as compute: FSDP's pre_forward, issue 25), so no own-time figure is said
        return "bounding the step on the critical path"
    if test.endswith("(cpu-available)"):
        # the excess is of own time minus run-queue wait: with more ranks than cores a busy rank can hold a CPU
        # while the others queue (measured: 11 ms of host busy-work per step at 4 ranks on 2 cores, own -5 %,
        # CPU-available +46 %)
        return "own time excluding CPU wait"
    if test.endswith("(cpu time)"):  # more ranks than CPUs: own time holds the wait the others' work causes
        return "CPU time"
    return "own time"


def named(ctx: Ctx, i: int, rel: float, test: str, cons: float, b: Bound | None) -> Finding:
    """The finding for one candidate: cause, evidence, cost (a stage's CPU waits read as in ``_compared_with``)."""
    pr, run = ctx.pr, ctx.run
    rank = int(pr["rank"][i])
    row = pr.row(i, named=True)
    mine = b if b is not None and b.rank == rank else None
    # a rank of the bottleneck stage that takes the stage model's cost (``takes_stage_cost``) is judged as that stage
    # however it was found: against the other stages. CI at 3b2d54b, tests/e2e/test_pipeline_shapes.py (ppdp 1F1B,
    # stage 1 with 3x the layers): rank 2 named on the path (2 of 3 steps), its cause read off the path against its
    # replica, as heavy: "host (idle between operators)", where it calls its layers' operators 3x as often. Its CPU
    # wait too is read against all other ranks (against its replica: "contention" beside two busy loops, that test)
    as_stage = test == "pipeline stages" or takes_stage_cost(ctx.results, rank, mine is not None,
                                                             mine.cost_ns if mine is not None else 0.0)
    others = _compared_with(ctx, rank, "pipeline stages" if as_stage else test)
    waited = wait_excess(ctx.sched, rank, ctx.own_steps, None if as_stage else ctx.peers(rank))
    imb = ctx.work_of(rank)
    cpu_excess = float(waited["cpu_excess_ns"]) if waited and waited.get("cpu_excess_ns") is not None else None
    rw = work_rel(run, float(rel), waited)  # what more input work must explain: own time's, or CPU time's excess
    # a stage's cause is the stage model's (its layers' thread CPU work), not the path's segments: those compare it
    # with its replicas (bench/workloads.py seed 2844, ppdp-1f1b: "host (idle between operators)" off the path)
    path_cause = None if as_stage else mine
    usual = {k: as_float(others[c].median(), 0.0) for c, k in (("computing", "compute"), ("data_wait", "data"),
                                                                ("free", "host"))}
    eligible = {k for k, c in _CLASS.items() if holds(path_cause, c, float(row[{"compute": "computing",
                                                                                "data": "data_wait", "host": "free"}[k]])
                                                       - usual[k])}
    # the calls the stage makes more often than the other stages (its extra layers), where a stage is named
    calls = imbalance(run, rank, others["rank"].to_list()) if as_stage else imb
    kind, excess = cause(row, others, waited["blocked_excess_ns"] if waited else None, extra_calls_ns(calls),
                         eligible if path_cause is not None else None, calls_ratio(calls))
    on_path = from_path(path_cause.path, path_cause.cost_ns, excess) if path_cause is not None else None
    if on_path is not None:
        kind = on_path
    kind = stage_cause(kind, extra_calls_ns(calls), calls_ratio(calls)) if as_stage else kind

    def explains(kind: str) -> bool:  # the rank's CPU time counts only for time the trace put between operators
        return bool(imb) and work_explains(imb, excess, others, rw,  # type: ignore[arg-type]
                                           cpu_excess if kind == "host" else None)

    # its CPU time grew by half of what its extra input predicts: that work, done (``cause.cpu_time_explains``), where
    # the training thread's CPU time is the rank's work (``cpu.cpu_run``: not beside an intra-op pool, nor on a device)
    work_done = bool(imb) and cpu_run(run) and cpu_time_explains(imb, others, rw, cpu_excess,  # type: ignore[arg-type]
                                                float((waited or {}).get("others_cpu_ns") or 0.0))
    evidence: dict[str, Any] = {
        "own_time_ns": row["own"], "others_median_ns": as_float(others["own"].median()),
        "excess_ns": {k: round(v) for k, v in excess.items()}, "relative_excess": float(rel),
        "test": test, "consistency": round(cons, 3), **({"work": imb} if imb else {})}
    if on_path is not None:  # the components could not hold the path's cost: the cause is read off the path
        evidence["cause_from"] = "critical path"
    if waited is not None:
        evidence["cpu_wait"] = waited
        # mostly waiting for a CPU, not for its own extra work: the host, whatever the test. Not where its CPU time grew
        # by what its extra input predicts: a fresh clone's LM test (1.47x input work, quiet) waited +43 ms for a CPU, a
        # share of 0.51, with CPU time +12.0 ms against 10.3 ms predicted: "contention" for the input imbalance
        # nor where a pipeline stage's extra CPU time covers the stage model's cost (``stage_work_done``)
        if is_contention(waited) and not work_done and not (as_stage and stage_work_done(ctx.results, cpu_excess)):
            kind = "contention"
    # DDP's gradient hooks growing on a host trace mean communication, unless more input work (a count) explains
    # the extra compute (bench run 3, 4 ranks on 2 cores: 1.47x longer sequences, AccumulateGrad +4.3 ms of +13.6)
    if kind != "contention" and ctx.bd.filter(pl.col("rank") == rank)["source"][0] == "host" and not explains(kind):
        kind = refine(run, kind, rank, others["rank"].to_list(), evidence)
    note = ""
    by_cpu = test.endswith("(cpu time)")  # found on counts and CPU time (``candidates.more_input_cpu``)
    if by_cpu and kind in ("unclear", "host", "compute") and imb:
        kind = "compute"  # its CPU time grew by at least half of what its extra input predicts: that work, done
    if kind in ("host", "data") and explains(kind) or (kind == "unclear" and work_done):
        kind = "compute"  # then named input imbalance below
    if kind == "compute" and imb:
        if is_input_imbalance(imb, rw):
            kind, note = "imbalance", imbalance_note(imb)
        else:
            note = work_note(imb, excess["compute"])
    if as_stage and kind == "compute":
        note = stage_note(ctx.results)  # the stage's layers against the other stages', not against its replicas
    path = _cost(ctx, rank, row, mine, b, cpu_excess, evidence, test == "pipeline stages", by_cpu)
    floor = PAIR_MIN if test.startswith("signed-rank") else PAIR_THRESHOLD if test.startswith("ratio") else REL_THRESHOLD
    strength = (min(1.0, mine.share / 0.4 if mine else 0.0) if test == "critical path" else
                min(1.0, float(ctx.results["pipeline"].summary.get("cost_share") or 0.0) / 0.4) if test == "pipeline stages"
                else min(1.0, max(rel, 0.0) / (2 * floor)))
    return _finding(rank, kind, rel, evidence, cons * strength, note, _measure(test), path)


def run_straggler(run: Run, results: dict[str, Result]) -> Result:
    """Registered analysis "straggler": the verdict, per-rank and per-step tables."""
    bd, excluded, note = verdict_input(run, frame(results["breakdown"].tables["breakdown"]))
    pr = per_rank(bd)
    if pr.height < 2:
        return Result("straggler", skipped="needs at least 2 undamaged ranks with complete steps" +
                      (f" ({note})" if note else ""))
    ctx = Ctx(run, results, bd, pr, excluded)
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
        "bounding": b.evidence() if b is not None else None, "host_contended_rank": ctx.host_contended}
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
    out.append(input_imbalance(run, pr, excluded, b, savings(results, excluded), no_path, results))
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
    elif (threads := many_intra_op_threads(run)) is not None:
        out.append(f"the training threads' CPU time is not the ranks' work (torch ran {threads} intra-op threads): "
                   "no cause or cost is drawn from it (torch.set_num_threads(1) makes it so)")
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
