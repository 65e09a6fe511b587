"""The ``critical_path`` Result: tables, the summary the verdict / diff / advice read, and findings.

Pattern: per step, the bounding rank is the one whose what-if shortens the path most (its cost);
per run, the rank that bounds the most steps, with the median of its cost over all steps (a small
cost in every step is a steady cost and is said, whatever its size). The chain of a step is
coarsened for reading: a rank's segments between two calls become one segment named after the
operator that took most of it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Finding, Result, Severity

if TYPE_CHECKING:
    from rankscope.analysis.deps.analysis import StepResult

MS = 1e6
COMM = ("collective", "p2p")
STEADY_SHARE = 0.005  # a bounding rank that costs 0.5 % of every step is said


def coarse(segs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One segment per run of a rank between calls, calls kept as they are."""
    from rankscope.analysis.deps.chain import run_name

    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []

    def flush() -> None:
        if run:
            nm = run_name(run)
            out.append({"rank": run[0]["rank"], "kind": nm["kind"], "name": nm["name"], "context": nm["context"],
                        "start": run[0]["start"], "end": run[-1]["end"], "dur": sum(s["dur"] for s in run),
                        "group": None, "seq": None})
            run.clear()

    for s in segs:
        if s["kind"] in COMM or (run and run[0]["rank"] != s["rank"]):
            flush()
        if s["kind"] in COMM:
            out.append(dict(s))
        else:
            run.append(s)
    flush()
    return out


def _bounding(r: "StepResult") -> tuple[int | None, int]:
    best = max(r.whatifs, key=lambda w: w.saving_ns, default=None)
    if best is None or best.saving_ns <= 0:
        return None, 0
    return best.rank, best.saving_ns


def describe(rank: int, chain: list[dict[str, Any]]) -> str:
    """"rank 3's <context> (<operator>) then all_reduce #42 of group 0"."""
    i = _own(rank, chain)
    if i is None:
        return f"rank {rank}"
    s = chain[i]
    both = s["context"] and s["name"] and s["context"] != s["name"]
    what = f"{s['context']} ({s['name']})" if both else (s["name"] or s["context"] or s["kind"])
    nxt = next((c for c in chain[i + 1:] if c["kind"] in COMM), None)
    pair = nxt is not None and nxt["kind"] == "p2p" and "->" in str(nxt["group"])
    tail = "" if nxt is None else (
        f" then {nxt['name']} #{nxt['seq']} of ranks {str(nxt['group']).replace('->', ' → ')}" if pair
        else f" then {nxt['name']} #{nxt['seq']} of group {nxt['group']}")
    return f"rank {rank}'s {what}{tail}"


def _own(rank: int, chain: list[dict[str, Any]]) -> int | None:
    """The rank's longest own segment of the chain (not communication), as ``describe`` names it; None: none."""
    own = [i for i, s in enumerate(chain) if s["rank"] == rank and s["kind"] not in COMM]
    return max(own, key=lambda k: chain[k]["dur"]) if own else None


def own_span(rank: int | None, chain: list[dict[str, Any]]) -> str:
    """The span ``describe`` names first for the rank (its longest own segment's context, else its name): what a
    rule reads instead of the description's words (``diagnosis.advice_path``: a Dequeue of torch_npu's task queue)."""
    i = None if rank is None else _own(rank, chain)
    return "" if i is None else str(chain[i]["context"] or chain[i]["name"] or chain[i]["kind"])


def assemble(per_step: list["StepResult"], problems: list[str], unmatched_p2p: int,
             cpu_floor: dict[str, Any] | None = None) -> Result:
    """The Result; ``cpu_floor`` (``deps.floor.Floor.note``): hosts with more ranks than CPUs, where no what-if
    step is shorter than the host's ranks' CPU time over its CPUs."""
    steps_rows, wi_rows, seg_rows, wait_rows, per_step_out = [], [], [], [], []
    for r in per_step:
        rank, cost = _bounding(r)
        ch = coarse(r.segments)
        if_med = r.wall_ms - cost / MS
        wall = int(round(r.wall_ms * MS))
        steps_rows.append({"step": r.step, "step_ns": wall, "path_ns": r.path_ns, "bounding_rank": rank, "cost_ns": cost,
                           "step_if_median_ns": wall - cost, "description": describe(rank, ch) if rank is not None else ""})
        for w in r.whatifs:
            wi_rows.append({"step": r.step, "rank": w.rank, "step_ns": wall,
                            "step_if_median_ns": None if w.path_if_median_ns is None else wall - w.saving_ns,
                            "saving_ns": w.saving_ns})
        seg_rows += [{"step": r.step, "i": i, **{k: s[k] for k in ("rank", "kind", "name", "context", "start", "end",
                                                                  "dur", "group", "seq")},
                      "top": "; ".join(f"{n} {d / MS:.3f} ms" for n, d in s.get("top", []))}
                     for i, s in enumerate(r.segments)]
        wait_rows += [{"step": r.step, **w} for w in r.waits]
        per_step_out.append({"step": r.step, "step_ms": r.wall_ms, "path_ms": r.path_ns / MS, "bounding_rank": rank,
                             "cost_ms": cost / MS, "step_ms_if_median": if_med,
                             "chain": [{k: s[k] for k in ("rank", "kind", "name", "context", "start", "end", "group",
                                                           "seq")} for s in ch],
                             "description": describe(rank, ch) if rank is not None else "",
                             "own_span": own_span(rank, ch)})
    wi = pl.DataFrame(wi_rows, schema={"step": pl.Int64, "rank": pl.Int64, "step_ns": pl.Int64,
                                       "step_if_median_ns": pl.Int64, "saving_ns": pl.Int64})
    summary: dict[str, Any] = {"what_if": _what_if(wi), "per_step": per_step_out, "unmatched_p2p": unmatched_p2p,
                               "problems": problems}
    bound = _run_bounding(per_step_out, wi)
    if cpu_floor is not None:
        summary["cpu_floor"] = cpu_floor
        if bound:
            bound["floored_steps"] = int(cpu_floor["floored_steps"].get(str(bound["rank"]), 0))
    summary["bounding"] = bound
    if bound:  # the facts a view shows (ns)
        summary.update(bounding_rank=bound["rank"], cost_per_step_ns=int(bound["cost_ms"] * MS),
                       step_time_ns=int(bound["step_ms"] * MS), step_time_if_median_ns=int(bound["step_ms_if_median"] * MS),
                       bounding_steps=f"{bound['steps']} of {bound['of_steps']}", description=bound["description"])
    findings = [_finding(bound)] if bound and bound["steady"] else []
    if unmatched_p2p:
        findings.append(Finding(kind="critical_path_p2p", severity=Severity.WARNING,
                                title=f"{unmatched_p2p} point-to-point calls have no peer in the data: they are not "
                                      "edges of the critical path", evidence={"unmatched_p2p": unmatched_p2p}))
    tables = {"steps": pl.DataFrame(steps_rows).to_arrow(), "what_if": wi.to_arrow(),
              "segments": _frame(seg_rows).to_arrow(), "waits": _frame(wait_rows).to_arrow()}
    return Result("critical_path", tables=tables, findings=findings, summary=summary)


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()


def _what_if(wi: pl.DataFrame) -> list[dict[str, Any]]:
    """Per rank, medians over steps: [{rank, step_ms, step_ms_if_median}]."""
    if wi.height == 0:
        return []
    agg = wi.group_by("rank").agg(pl.col("step_ns").median(), pl.col("step_if_median_ns").median()).sort("rank")
    return [{"rank": int(r["rank"]), "step_ms": round(float(r["step_ns"]) / MS, 3),
             "step_ms_if_median": None if r["step_if_median_ns"] is None else round(float(r["step_if_median_ns"]) / MS, 3)}
            for r in agg.to_dicts()]


def _run_bounding(per_step: list[dict[str, Any]], wi: pl.DataFrame) -> dict[str, Any] | None:
    """The rank that bounds most steps, its median cost over every step, and its chain in its median step.
    The cost is never below 0: where its median what-if saving is negative (its calls ran faster than the other
    ranks' median of the same calls: a pipeline's middle stages at 4 ranks, bench/workloads.py seed 2821 run 14,
    -4.0 ms), running at the median would not shorten the step, and "bounds the step by -4.0 ms" says nothing."""
    ranks = [s["bounding_rank"] for s in per_step if s["bounding_rank"] is not None]
    if not ranks:
        return None
    vals, counts = np.unique(ranks, return_counts=True)
    rank = int(vals[np.argmax(counts)])
    mine = wi.filter(pl.col("rank") == rank)
    med = mine["saving_ns"].median() if mine.height else None
    cost = max(0.0, float(med) / MS) if isinstance(med, (int, float)) else 0.0
    steps = [s for s in per_step if s["bounding_rank"] == rank]
    rep = sorted(steps, key=lambda s: s["cost_ms"])[len(steps) // 2]
    step_ms = float(np.median([s["step_ms"] for s in per_step]))
    share = cost / step_ms if step_ms > 0 else 0.0
    # steady: it bounds most steps, at a cost above the rounding of a step (said whatever the straggler bar)
    steady = len(steps) >= max(2, (len(per_step) + 1) // 2) and share >= STEADY_SHARE
    return {"rank": rank, "cost_ms": round(cost, 3), "steps": len(steps), "of_steps": len(per_step),
            "step_ms": round(step_ms, 3), "step_ms_if_median": round(step_ms - cost, 3), "share": round(share, 4),
            "steady": steady, "step": rep["step"], "chain": rep["chain"], "description": rep["description"]}


def _finding(b: dict[str, Any]) -> Finding:
    title = (f"{b['description']}; rank {b['rank']} bounds the step by {b['cost_ms']:.1f} ms "
             f"({b['steps']} of {b['of_steps']} steps); if rank {b['rank']} ran at the other ranks' median the step "
             f"would take {b['step_ms_if_median']:.1f} ms instead of {b['step_ms']:.1f} ms")
    if b.get("floored_steps"):
        title += (f" (in {b['floored_steps']} of {b['of_steps']} steps no shorter than its host's ranks' CPU time over "
                  "its CPUs: the host runs more ranks than it has CPUs)")
    sev = Severity.WARNING if (b["share"] or 0) >= 0.02 else Severity.INFO
    return Finding(kind="critical_path", title=title, severity=sev, ranks=(b["rank"],),
                   evidence={k: b[k] for k in ("cost_ms", "steps", "of_steps", "step_ms", "step_ms_if_median", "share",
                                               "step")})
