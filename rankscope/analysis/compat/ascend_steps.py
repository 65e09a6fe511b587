"""cluster_step_trace_time.csv rows as msprof-analyze 26.2.0 writes them (text mode).

From msprof_analyze/cluster_analyse/: analysis/step_trace_time_analysis.py (rank rows with the
per-rank file's values, stage rows with the column maxima), analysis/stage_group_analysis.py
(stages) and cluster_utils/parallel_algorithm.py + parallel_strategy_calculator.py (DP / PP / TP
Index from the Megatron sizes in ``distributed_args``; any inconsistency: no index columns).
"""
from __future__ import annotations

import json
from typing import Any

from rankscope.model.run import Run

PARALLEL = ["DP Index", "PP Index", "TP Index"]
SIZES = ("world_size", "tensor_model_parallel_size", "pipeline_model_parallel_size", "data_parallel_size",
         "context_parallel_size", "expert_model_parallel_size")


def _float(v: Any) -> float | int:
    try:
        return float(v)
    except (TypeError, ValueError):
        return 0  # msprof-analyze logs the error and writes 0


def megatron_index(args: dict[str, Any]) -> list[tuple[int, int, int] | None]:
    """Rank -> (DP, PP, TP index) by MegatronAlgorithm; raises ValueError where msprof-analyze errors."""
    s = {k: args.get(k, 1) for k in SIZES}
    if any(type(v) is not int for v in s.values()):
        raise ValueError("parallel sizes must be int")
    world, tp, pp, dp, cp, ep = (s[k] or 1 if k != "world_size" else s[k] for k in SIZES)
    if dp % ep or (dp * cp) % ep or world != tp * pp * dp:
        raise ValueError(f"world_size {world} != tp {tp} x pp {pp} x dp {dp} (or dp not divisible by ep {ep})")
    per = world // pp
    dp_groups = [list(range(per * i + k, per * (i + 1), tp * cp)) for i in range(pp) for k in range(tp * cp)]
    out: list[tuple[int, int, int] | None] = [None] * world
    for d in range(dp):
        group = [g[d] for g in dp_groups]
        for p, j in enumerate(range(0, len(group), tp)):
            for t, r in enumerate(group[j:j + tp]):
                out[r] = (d, p, t)
    return out


def stages(records: list[dict[str, Any]]) -> list[list[int]]:
    """StageInfoAnalysis: collective groups cut by the "pp" p2p groups, merged where they touch."""
    links = [set(r["rank_set"]) for r in records if r["type"] == "p2p" and str(r["pg_name"]).lower().startswith("pp")]
    if not links:
        return []
    links.sort(key=min)
    unions = []
    while links:
        u, rm = set(links[0]), [links[0]]
        for x in links[1:]:
            if x & u:
                u |= x
                rm.append(x)
        unions.append(u)
        links = [x for x in links if x not in rm]
    coll = {r["group_name"]: set(r["rank_set"]) for r in records if r["type"] == "collective"}
    found: dict[int, set[int]] = {}
    for ranks in coll.values():
        if any(len(ranks & u) > 1 for u in unions):
            continue
        merged, drop = set(), []
        for first, st in found.items():
            if ranks & st:
                merged |= ranks | st
                drop.append(first)
        for k in drop:
            del found[k]
        found[min(merged or ranks)] = merged or ranks
    return [list(found[k]) for k in sorted(found)]


def step_trace(run: Run, steps: list[tuple[int, dict[str, Any]]], records: list[dict[str, Any]]
               ) -> tuple[list[str], list[list[Any]], str]:
    """(header, rows, note on the index columns) of cluster_step_trace_time.csv."""
    if not steps:
        return [], [], ""
    rows: list[list[Any]] = []
    cols: list[str] = []
    for r, s in steps:
        vals = json.loads(s["row"])
        cols = cols or list(vals)
        rows.append([s["step"], "rank", r] + [_float(v) for v in vals.values()])
    groups: dict[int, tuple[int, ...]] = {}
    for st in stages(records):
        for r in st:
            groups.setdefault(r, tuple(st))
    agg: dict[tuple[str, tuple[int, ...]], list[float]] = {}
    for row in list(rows):
        key = (row[0], groups.get(row[2], ()))
        agg[key] = [max(a, b) for a, b in zip(agg[key], row[3:])] if key in agg else row[3:]
    if groups:
        rows += [[step, "stage", st] + vals for (step, st), vals in agg.items()]
    header = ["Step", "Type", "Index"] + cols
    args = next((run.ranks[r].meta.get("distributed_args") for r in run.rank_ids
                 if run.ranks[r].meta.get("distributed_args")), None)
    if not isinstance(args, dict):
        return header, rows, "no distributed_args in profiler_metadata.json: no DP/PP/TP Index"
    try:
        index = megatron_index(args)
    except ValueError as exc:
        return header, rows, f"distributed_args unusable ({exc}): no DP/PP/TP Index"
    if len(index) < len({r for r, _ in steps}):
        return header, rows, "distributed_args cover fewer ranks than the run: no DP/PP/TP Index"
    for row in rows:
        ix = index[row[2]] if row[1] == "rank" and row[2] < len(index) else None
        row += list(ix) if ix else ["NA"] * 3
    return header + PARALLEL, rows, ""
