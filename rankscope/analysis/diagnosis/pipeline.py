"""Registered analysis ``pipeline``: a pipeline-parallel run's stages, bubbles and bottleneck stage.

Pattern: a stage's step is its own work plus the time it waits for its neighbours (the bubble):
activations from the previous stage, gradients from the next one, a neighbour not ready to take a send
(``pipeline_waits``: from the send / receive calls, which the schedule wraps in its own spans). The stages,
microbatches and schedule come from the layout and the point-to-point traffic (``pipeline_shape``).

Algorithm: per stage and step, the bubble and the own work (median over the stage's ranks). The stage
with the most own work per step bounds the pipeline: with m microbatches, the step's critical path runs
through every stage once (fill and drain) and through that stage's other m - 1 microbatches, so
step ≈ Σ_s w_s + (m - 1)·max_s w_s (w_s: own work per microbatch). Balanced, every stage would hold the
mean, and the step would be shorter by (m - 1)·(max_s w_s - mean_s w_s): the bottleneck's cost. A
balanced pipeline still waits: the natural bubble (p - 1) / (m + p - 1) of p stages. The critical path
across ranks (``critical_path``), when it ran, is checked against this: which stage holds the most own
time on it, and its what-if for the bottleneck stage's ranks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from rankscope.analysis.base import Analysis, Finding, Result, Severity
from rankscope.analysis.diagnosis import pipeline_shape as shape
from rankscope.analysis.diagnosis.pipeline_waits import RankWaits, rank_part
from rankscope.analysis.stats import as_float
from rankscope.analysis.view import NS, Col, TableView, View

if TYPE_CHECKING:
    from rankscope.analysis.diagnosis.pipeline_shape import Stages
    from rankscope.model.run import Run

MS = 1e6
WAITS = ("fwd_wait_ns", "bwd_wait_ns", "send_wait_ns", "other_wait_ns")
# The bottleneck is said when the balanced what-if saves at least this share of the step, and its stage
# holds at least IMBALANCE times the stages' mean own work.
COST_SHARE = 0.03
IMBALANCE = 1.10
CRITICAL_SHARE = 0.25  # a cost above this share of the step is critical
BUBBLE_SLACK = 0.05  # a bubble within this (absolute share of the step) of the natural one is natural


def run_pipeline(run: "Run", results: dict[str, Result]) -> Result:
    """Registered analysis ``pipeline`` (standalone: its own pass over the ranks)."""
    from rankscope.analysis.rankdata import RankData

    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def combine(run: "Run", parts: list[tuple[int, RankWaits]], results: dict[str, Result]) -> Result:
    layout = run.manifest.get("layout") or next((i.meta.get("layout") for i in run.ranks.values()
                                                 if i.meta.get("layout")), None)
    st = shape.stages(parts, layout, run.rank_ids, run.world_size or len(run.rank_ids))
    if st is None:
        return Result("pipeline", skipped="not a pipeline: no layout pp and no point-to-point traffic between "
                                          "stages in the trace")
    problems = [p.problem for _, p in parts if p.problem]
    m = shape.microbatches(parts, st)
    sched, how = shape.schedule(parts, st, m)
    virtual = shape.stages_per_rank(parts)
    expected = shape.expected_bubble(st.count, m, sched, virtual)
    ranks = _rank_rows(parts, st)
    if ranks.height == 0:
        return Result("pipeline", skipped=f"{st.count} stages (from the {st.source}) but no send / receive calls "
                                          "in the captured steps: the waits are unknown", summary=_shape(st, m, sched, how))
    per_ranks = _with_cpu(run, ranks)
    per_step = _stage_steps(per_ranks, expected)
    stages_t = _stage_table(per_step, st, _path_shares(results, st))
    runtime = _runtime(parts, st)
    what = _what_if(per_step, m, "" if st.looped else sched, hop_latency(results, 0.1 if runtime else 0.5), runtime,
                    cpu_floor(run, per_ranks))
    summary = {**_shape(st, m, sched, how), "stages_per_rank": virtual, "expected_bubble_share": expected,
               "problems": problems,
               "bubble": [{"stage": r["stage"], "step": r["step"], "bubble_ms": round(r["bubble_ns"] / MS, 3),
                           **{k.replace("_ns", "_ms"): round(r[k] / MS, 3) for k in WAITS}}
                          for r in per_step.iter_rows(named=True)],
               "per_stage": [{k: _round(v) for k, v in r.items()} for r in stages_t.iter_rows(named=True)],
               **what, **_critical_path(results, st, what.get("bottleneck_stage"))}
    summary.update(_facts(summary))
    return Result("pipeline", tables={"stages": stages_t.to_arrow(), "bubbles": per_step.to_arrow(),
                                      "ranks": ranks.to_arrow()},
                  findings=findings(summary), summary=summary)


SOURCES = {"layout": "the layout (pp)", "p2p": "the send / receive traffic",
           "layout+p2p": "the layout (pp) and the send / receive traffic"}


def _shape(st: "Stages", m: int | None, sched: str, how: str) -> dict[str, Any]:
    return {"stages": st.count, "stages_from": st.source, "stage_ranks": st.ranks_of, "looped": st.looped,
            "notes": st.notes, "microbatches": m, "schedule": sched, "schedule_from": how,
            "stage_order": " → ".join("/".join(map(str, r)) for r in st.ranks_of),
            "shape": f"{st.count} stages, from {SOURCES[st.source]}"}


def _round(v: Any) -> Any:
    return round(v, 4) if isinstance(v, float) else v


def _rank_rows(parts: list[tuple[int, RankWaits]], st: "Stages") -> pl.DataFrame:
    rows = []
    for rank, p in parts:
        s = st.stage_of.get(rank)
        if s is None:
            continue
        for sw in p.steps:
            kinds = shape.wait_kinds(st, rank, sw)
            wall = sw.end - sw.start
            bubble = min(sum(kinds.values()), wall)
            rows.append({"rank": rank, "stage": s, "step": sw.step, "step_ns": wall, "bubble_ns": bubble,
                         "work_ns": wall - bubble, **kinds, "p2p_ns": min(sw.p2p_ns, wall),
                         "coll_ns": min(sw.coll_ns, wall), "optim_ns": min(sw.optim_ns, wall - bubble)})
    schema = {"rank": pl.Int64, "stage": pl.Int64, "step": pl.Int64, "step_ns": pl.Int64, "bubble_ns": pl.Int64,
              "work_ns": pl.Int64, **{k: pl.Int64 for k in WAITS}, "p2p_ns": pl.Int64, "coll_ns": pl.Int64,
              "optim_ns": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row").sort("step", "stage", "rank")


def _stage_steps(ranks: pl.DataFrame, expected: float | None) -> pl.DataFrame:
    """Per stage and step: medians over the stage's ranks; the bubble's share of the step. A stage's own work is
    the lower median over its replicas (with 2, the faster one): a replica's own extra work (its data loading,
    a slow host) is that rank's, not its stage's layers, and a plain median of 2 replicas would give the stage
    half of it (measured: one of 2 replicas loading data 17.5 ms longer per step made its stage "the
    bottleneck, 61 % of the work")."""
    cols = ["step_ns", "bubble_ns", *WAITS]
    own = ["work_ns", "cpu_ns", "optim_ns"]
    out = ranks.group_by("stage", "step").agg(
        *(pl.col(c).median().round().cast(pl.Int64) for c in cols),
        *(pl.col(c).quantile(0.5, interpolation="lower").round().cast(pl.Int64) for c in own))
    out = out.with_columns(bubble_share=pl.col("bubble_ns") / pl.col("step_ns"),
                           expected_share=pl.lit(expected, pl.Float64))
    out = out.with_columns(work_share=pl.col("work_ns") / pl.col("work_ns").sum().over("step"))
    return out.sort("step", "stage")


def _stage_table(per_step: pl.DataFrame, st: "Stages", on_path: dict[int, float]) -> pl.DataFrame:
    """Per stage: medians over steps."""
    cols = ["step_ns", "bubble_ns", "work_ns", "cpu_ns", *WAITS, "optim_ns"]
    t = per_step.group_by("stage").agg(*(pl.col(c).median().round().cast(pl.Int64) for c in cols),
                                       pl.col("bubble_share").median(), pl.col("work_share").median(),
                                       pl.col("expected_share").first())
    return t.with_columns(
        ranks=pl.col("stage").map_elements(lambda s: ",".join(map(str, st.ranks_of[s])), return_dtype=pl.Utf8),
        path_share=pl.col("stage").replace_strict(on_path, default=None, return_dtype=pl.Float64)).sort("stage")


def cpu_floor(run: "Run", ranks: pl.DataFrame) -> float:
    """The step no schedule beats on a host with more ranks than CPUs (ns): per step, the ranks' training-thread
    CPU time on the host over its CPUs (``host_cpus`` in meta.json), the median over steps, the largest host's;
    0 where a host's CPUs are unknown, where none runs more ranks than it has CPUs, or without CPU times."""
    if "cpu_ns" not in ranks.columns or ranks["cpu_ns"].null_count() == ranks.height:
        return 0.0
    from rankscope.analysis.deps.floor import hosts

    host, cpus = hosts(run)
    per = ranks.with_columns(host=pl.col("rank").replace_strict(host, default=None, return_dtype=pl.Utf8))
    best = 0.0
    for (h,), g in per.drop_nulls(["host", "cpu_ns"]).group_by("host"):
        n = cpus.get(str(h))
        if n and g["rank"].n_unique() > n:
            best = max(best, as_float(g.group_by("step").agg(pl.col("cpu_ns").sum())["cpu_ns"].median(), 0.0) / n)
    return best


def _with_cpu(run: "Run", ranks: pl.DataFrame) -> pl.DataFrame:
    """The training thread's CPU time per rank and step (``rankscope.profile``'s scheduler samples) on a
    CPU run; null elsewhere (a GPU stage's work is not its host thread's CPU time)."""
    from rankscope.analysis.diagnosis.cpu import cpu_run, sched_frame

    cpu_only = cpu_run(run)  # the training threads' CPU time is the ranks' work
    sf = sched_frame(run).select("rank", "step", "cpu_ns") if cpu_only else pl.DataFrame()
    if sf.height == 0:
        return ranks.with_columns(cpu_ns=pl.lit(None, pl.Int64))
    return ranks.join(sf, on=["rank", "step"], how="left")


def _what_if(per_step: pl.DataFrame, m: int | None, sched: str = "", latency: float = 0.0,
             runtime: "Runtime | None" = None, floor: float = 0.0) -> dict[str, Any]:
    """The bottleneck stage and its cost per step: the step with the stages' own work as measured minus
    the step with every stage at the mean. For torch's GPipe and 1F1B, both steps come from replaying
    the schedule's program (``pipeline_replay``: a backward is taken as twice its forward, and each message
    takes the run's own median latency, ``hop_latency``; each stage's optimizer, torch.optim's spans, runs between
    steps, and the step is the steady state's of steps back to back: a slow last stage's optimizer overlaps the
    first stage's last backward and next forward). torch's runtime schedules (interleaved 1F1B, zero bubble) name
    each action in a span ("PP:2F3"): their replay runs each rank's actions in the order the trace holds, each
    (stage, action) at its own time (``_runtime``); otherwise
    from Σ_s w_s + (m - 1)·max_s w_s, so the cost is (m - 1)·(max_s w_s - mean_s w_s). The replay
    differs where the schedule hides a stage: in 1F1B a fast stage after the slow one waits for nothing.

    w_s, a stage's own work per microbatch, is the median over steps of its own wall time / m. When every
    stage has its thread's CPU time, the stages are compared by CPU time instead, scaled to wall time at
    the run's own wall / CPU ratio: on a host where ranks share cores, a stage's wall time also holds
    waits for a CPU that depend on what its neighbours run. Medians per stage first, then the maximum:
    the maximum of noisy steps would call the noise a bottleneck.

    ``floor`` (``cpu_floor``): on a host with more ranks than CPUs, no step is shorter than the ranks' CPU time
    over the CPUs, balanced or not (balancing moves work between ranks, it does not remove it): both steps are
    held at least at it (``cost_ms``). Whether the stage bounds the pipeline is the schedule's, not the host's: the
    findings and the verdict's bar read the cost with a CPU per rank (``cost_free_ms``). Measured (bench/pipeline_twins.py seed 2904, ZB-V at 4 ranks on 2 CPUs): the balanced
    replay said 175 ms where the unbalanced run's threads used 418 ms of CPU per step, 209 ms on 2 CPUs; its twin
    took 203 ms."""
    if not m or per_step.height == 0:
        return {}
    cpu = per_step["cpu_ns"]
    by_cpu = cpu.null_count() == 0 and as_float(cpu.min(), 0.0) > 0
    col = "cpu_ns" if by_cpu else "work_ns"
    opt = pl.col("optim_ns").median() if "optim_ns" in per_step.columns else pl.lit(0.0)
    med = per_step.group_by("stage").agg(pl.col(col).median().alias("x"), pl.col("work_ns").median().alias("wall"),
                                         pl.col("step_ns").median(), opt.fill_null(0.0).alias("opt")).sort("stage")
    scale = float(med["wall"].sum()) / float(med["x"].sum()) if by_cpu and float(med["x"].sum()) > 0 else 1.0
    w = {int(s): scale * float(x) / m for s, x in zip(med["stage"], med["x"])}
    # the optimizer runs between steps, outside the schedule's microbatches (pipeline_replay.step's tail)
    tail = {int(s): min(float(o), w[int(s)] * m) for s, o in zip(med["stage"], med["opt"])}
    top = max(w, key=lambda s: (w[s], -s))
    mean = sum(w.values()) / len(w)
    if mean <= 0:
        return {}
    wins = per_step.sort(col, descending=True).group_by("step", maintain_order=True).first()
    step_ms = as_float(per_step.group_by("step").agg(pl.col("step_ns").median())["step_ns"].median(), 0.0) / MS
    model = free = _model_steps(w, m, sched, latency, tail, runtime)
    if floor > min(model[0], model[1]):
        model = (max(model[0], floor), max(model[1], floor), f"{model[2]}, at least the host's CPU time over its CPUs")
    cost_ms = (model[0] - model[1]) / MS
    free_ms = (free[0] - free[1]) / MS  # with a CPU per rank: whether the stage bounds the pipeline
    return {"bottleneck_stage": top, "bottleneck_steps": int((wins["stage"] == top).sum()), "of_steps": wins.height,
            "bottleneck_work_share": round(w[top] / sum(w.values()), 4),
            "work_measure": "thread CPU time" if by_cpu else "own wall time",
            "imbalance": round(w[top] / mean, 4), "balanced": w[top] / mean < IMBALANCE, "step_ms": round(step_ms, 3),
            "cost_ms": round(cost_ms, 3), "step_ms_if_balanced": round(step_ms - cost_ms, 3),
            "cost_share": round(cost_ms / step_ms, 4) if step_ms > 0 else 0.0,
            "cost_free_ms": round(free_ms, 3), "cost_free_share": round(free_ms / step_ms, 4) if step_ms > 0 else 0.0,
            "model_step_ms": round(model[0] / MS, 3), "model": model[2], "hop_latency_ms": round(latency / MS, 3),
            "cpu_floor_ms": round(floor / MS, 3)}


def _model_steps(w: dict[int, float], m: int, sched: str, latency: float = 0.0,
                 tail: dict[int, float] | None = None, runtime: "Runtime | None" = None) -> tuple[float, float, str]:
    """(step as measured, step balanced, how) of the stages' own work per microbatch ``w``, of which ``tail``
    per step (the optimizer) runs between steps, not in the microbatches; balanced, both at their means."""
    from rankscope.analysis.diagnosis.pipeline_replay import step

    work = [w[s] for s in sorted(w)]
    mean = sum(work) / len(work)
    t = [float((tail or {}).get(s, 0.0)) for s in sorted(w)]
    mb = [x - ts / m for x, ts in zip(work, t)]  # per microbatch, without the tail
    mb_mean, t_mean = sum(mb) / len(mb), sum(t) / len(t)
    if sched in ("GPipe", "1F1B") and len(w) > 1:
        as_is = step({"schedule": sched, "fwd": [x / 3 for x in mb], "bwd": [2 * x / 3 for x in mb],
                      "latency": latency, "tail": t}, m)
        even = step({"schedule": sched, "fwd": [mb_mean / 3] * len(mb), "bwd": [2 * mb_mean / 3] * len(mb),
                     "latency": latency, "tail": [t_mean] * len(t)}, m)
        if as_is is not None and even is not None:
            return as_is, even, f"replay of torch's {sched} schedule"
    got = _runtime_steps(runtime, {s: x * m for s, x in zip(sorted(w), mb)}, t, m, latency) if len(w) > 1 else None
    if got is not None:
        return got
    return sum(work) + (m - 1) * max(work), len(work) * mean + (m - 1) * mean, "Σ w + (m - 1)·max w"


# A runtime schedule's own order: per stage (a position in the pipeline) the actions (F|B|I|W, stage the
# schedule names, microbatch) of one of its ranks in one step, and each (named stage, action)'s own time per
# microbatch (ns, the median over ranks, steps and microbatches: ``pipeline_waits``' span_own).
Runtime = tuple[dict[int, list[tuple[str, int, int]]], dict[tuple[int, str], float]]


def _runtime(parts: list[tuple[int, RankWaits]], st: "Stages") -> "Runtime | None":
    """The order and the actions' own times of torch's runtime schedules, whose spans name their stage; None for
    the single-stage schedules (GPipe, 1F1B: "Forward 3") or where a stage has no full step."""
    import statistics

    by = dict(parts)
    orders: dict[int, list[tuple[str, int, int]]] = {}
    for s, ranks in enumerate(st.ranks_of):
        full = [sw.spans for r in ranks if r in by for sw in by[r].steps if sw.spans]
        if not full or any(stg < 0 for x in full for _, stg, _ in x):
            return None
        orders[s] = max(full, key=len)  # a cut first or last step holds fewer actions
    own: dict[tuple[int, str], list[int]] = {}
    for _, p in parts:
        for sw in p.steps:
            for (act, stg, _), ns in zip(sw.spans, sw.span_own):
                own.setdefault((stg, act), []).append(ns)
    return orders, {k: float(statistics.median(v)) for k, v in own.items()}


def _runtime_steps(runtime: "Runtime | None", work: dict[int, float], tail: list[float], m: int,
                   latency: float) -> tuple[float, float, str] | None:
    """(step as measured, step balanced, how) of a runtime schedule's replay in its own order (``_runtime``). Each
    stage's actions are scaled so that they sum to its own work per step less its optimizer (``work``: the
    measure the stages are compared by); balanced, every stage's actions are scaled again to the stages' mean
    work. A stage keeps its own mix of actions: the first named stage computes no gradient of its input (zero
    bubble's I), the last one the loss. Taking each action at the mean of its kind over the named stages
    instead gave a balanced step 9 % below the balanced twins' (bench/pipeline_twins.py seed 2902, ZB-V)."""
    from rankscope.analysis.diagnosis.pipeline_replay import runtime_programs, steady

    if runtime is None or set(runtime[0]) != set(work):
        return None
    orders, own = runtime
    scaled: dict[tuple[int, str], float] = {}
    even: dict[tuple[int, str], float] = {}
    mean = sum(work.values()) / len(work)
    for s, order in orders.items():
        raw = sum(own.get((stg, a), 0.0) for a, stg, _ in order)
        for a, stg, _ in order:
            scaled[(stg, a)] = own.get((stg, a), 0.0) * (work[s] / raw if raw > 0 else 0.0)
            even[(stg, a)] = own.get((stg, a), 0.0) * (mean / raw if raw > 0 else 0.0)
    lists = [orders[s] for s in sorted(orders)]
    progs, progs_even = runtime_programs(lists, scaled), runtime_programs(lists, even)
    if progs is None or progs_even is None:
        return None
    as_is = steady(progs, tail, m, latency)
    balanced = steady(progs_even, [sum(tail) / len(tail)] * len(tail), m, latency)
    if as_is is None or balanced is None:
        return None
    return as_is, balanced, "replay of the schedule's own order in the trace"


def hop_latency(results: dict[str, Result], q: float = 0.5) -> float:
    """The run's latency of a point-to-point message (ns), the quantile ``q`` over messages (the median by default):
    a receive's return after both its side and its send were posted (``collectives``' p2p pairs, on aligned
    clocks); 0 when unknown. torch's runtime schedules post a receive ahead of the action that waits for it, so
    there the return also holds the receiver's own work before it waited, and only the messages that found their
    receiver waiting, the low tail (``q`` 0.1), measure the latency itself."""
    col = results.get("collectives")
    if col is None or col.skipped or "p2p" not in col.tables:
        return 0.0
    p2p = pl.from_arrow(col.tables["p2p"])
    if not isinstance(p2p, pl.DataFrame) or p2p.height == 0:
        return 0.0
    lat = p2p.filter(pl.col("paired")).select(pl.col("recv_end") - pl.max_horizontal("send_start", "recv_start"))
    got = lat.to_series().filter(lat.to_series() >= 0)
    return as_float(got.median() if q == 0.5 else got.quantile(q), 0.0) if got.len() else 0.0


def _path_shares(results: dict[str, Result], st: "Stages") -> dict[int, float]:
    """Per stage: its share of the own work (not calls) on the critical path across ranks, all steps."""
    cp = results.get("critical_path")
    if cp is None or cp.skipped or "segments" not in cp.tables:
        return {}
    seg = pl.from_arrow(cp.tables["segments"])
    if not isinstance(seg, pl.DataFrame) or seg.height == 0 or "kind" not in seg.columns:
        return {}
    own = seg.filter(~pl.col("kind").is_in(["collective", "p2p"]))
    by = own.with_columns(stage=pl.col("rank").replace_strict(st.stage_of, default=None)).drop_nulls("stage")
    total = float(by["dur"].sum() or 0)
    if total <= 0:
        return {}
    return {int(s): float(d) / total for s, d in by.group_by("stage").agg(pl.col("dur").sum()).iter_rows()}


def _critical_path(results: dict[str, Result], st: "Stages", stage: int | None) -> dict[str, Any]:
    """What the critical path across ranks says: the stage with the most own time on it, and its what-if
    (the step if the bottleneck stage's ranks ran at the other ranks' median; only ranks with a peer that
    runs the same calls have one)."""
    shares = _path_shares(results, st)
    out: dict[str, Any] = {}
    if shares:
        top = max(shares, key=lambda s: shares[s])
        out["critical_path_stage"] = top
        out["critical_path_stage_share"] = round(shares[top], 4)
    cp = results.get("critical_path")
    if stage is None or cp is None or cp.skipped:
        return out
    wi = [w for w in cp.summary.get("what_if", []) if w.get("rank") in st.ranks_of[stage]
          and w.get("step_ms_if_median") is not None]
    if wi:
        out["critical_path_what_if"] = wi
    return out


def _facts(s: dict[str, Any]) -> dict[str, Any]:
    """The facts the view shows (ns and shares)."""
    out: dict[str, Any] = {}
    if "cost_ms" in s:
        out.update(cost_ns=int(s["cost_ms"] * MS), step_time_ns=int(s["step_ms"] * MS),
                   step_if_balanced_ns=int(s["step_ms_if_balanced"] * MS))
    return out


def findings(s: dict[str, Any]) -> list[Finding]:
    """The bottleneck stage (with its cost) when it costs something; the bubble against the natural one."""
    out = []
    stage = s.get("bottleneck_stage")
    if stage is not None and _bounds_share(s) >= COST_SHARE and s["imbalance"] >= IMBALANCE:
        ranks = tuple(s["stage_ranks"][stage])
        out.append(Finding(
            kind="pipeline_bottleneck", ranks=ranks,
            severity=Severity.INFO,  # the diagnosis; the advice ("advice.pipeline_balance") carries the severity
            title=f"stage {stage} ({_ranks(ranks)}) bounds the pipeline: it holds {s['bottleneck_work_share']:.0%} "
                  f"of the work of {s['stages']} stages; balanced, the step would take {s['step_ms_if_balanced']:.1f} "
                  f"ms instead of {s['step_ms']:.1f} ms ({s['cost_ms']:.1f} ms, {s['cost_share']:.0%})",
            evidence={k: s.get(k) for k in ("bottleneck_work_share", "imbalance", "cost_ms", "step_ms",
                                            "step_ms_if_balanced", "bottleneck_steps", "of_steps",
                                            "critical_path_stage", "microbatches")}))
    exp = s.get("expected_bubble_share")
    per = s.get("per_stage") or []
    if per:
        least = min(per, key=lambda r: r["bubble_share"])
        natural = exp is not None and least["bubble_share"] <= exp + BUBBLE_SLACK
        what = (f"the natural bubble of {s['stages']} stages and {s['microbatches']} microbatches is "
                f"{shape.bubble_formula(int(s.get('stages_per_rank') or 1))} = {exp:.0%}" if exp is not None
                else "the natural bubble is unknown")
        out.append(Finding(
            kind="pipeline_bubble", severity=Severity.INFO, ranks=(),
            title=f"pipeline bubble: the stages wait for their neighbours "
                  f"{min(r['bubble_share'] for r in per):.0%}-{max(r['bubble_share'] for r in per):.0%} of the "
                  f"step; {what}" + ("" if natural or exp is None else
                                     f"; even the least waiting stage (stage {least['stage']}) waits more"),
            evidence={"expected_share": exp, "natural": natural,
                      "bubble_share": {str(r["stage"]): r["bubble_share"] for r in per}}))
    return out


def _bounds_share(s: dict[str, Any]) -> float:
    """The bottleneck's cost share with a CPU per rank (the host's CPUs left out: ``_what_if``'s floor)."""
    return float(s.get("cost_free_share", s.get("cost_share")) or 0.0)


def _ranks(ranks: tuple[int, ...]) -> str:
    from rankscope.intlist import format_int_list

    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_int_list(ranks)}"


ANALYSIS = Analysis(
    name="pipeline",
    description="pipeline stages: the bubble per stage and step, the bottleneck stage and what it costs",
    run=run_pipeline,
    rank_part=rank_part, combine=combine,
    uses=("critical_path", "collectives"),
    view=View("Pipeline stages and bubbles", (
        Col("shape", "stages"), Col("stage_order", "stage order (ranks)"), Col("schedule", "schedule"),
        Col("microbatches", "microbatches per step", "count"),
        Col("expected_bubble_share", "natural bubble (p-1)/(m+p-1)", "share"),
        Col("bottleneck_stage", "bottleneck stage", "count"),
        Col("bottleneck_work_share", "its share of the work", "share"),
        Col("cost_ns", "its cost per step", NS), Col("step_time_ns", "step time", NS),
        Col("step_if_balanced_ns", "step time if the stages were balanced", NS), Col("model", "balanced step from")), (
        TableView("stages", "per stage, median over steps", (
            Col("stage", "stage", "count"), Col("ranks", "ranks"), Col("step_ns", "step time", NS),
            Col("work_ns", "own work", NS), Col("bubble_ns", "waiting (bubble)", NS),
            Col("fwd_wait_ns", "for activations", NS), Col("bwd_wait_ns", "for gradients", NS),
            Col("send_wait_ns", "for a send to be taken", NS), Col("optim_ns", "optimizer (between steps)", NS),
            Col("bubble_share", "bubble share", "share"), Col("work_share", "share of the work", "share"),
            Col("path_share", "share of the critical path", "share"))),
        TableView("bubbles", "per stage and step", (
            Col("step", "step", "count"), Col("stage", "stage", "count"), Col("step_ns", "step time", NS),
            Col("bubble_ns", "waiting (bubble)", NS), Col("fwd_wait_ns", "for activations", NS),
            Col("bwd_wait_ns", "for gradients", NS), Col("send_wait_ns", "for a send to be taken", NS),
            Col("bubble_share", "bubble share", "share")))),
        "a pipeline-parallel run: layout pp or send / receive between stages", optional=True, place="pipeline"),
)
