"""CUPTI range-profiler counters per kernel, with the operators that launched it.

Pattern: with CUPTI's range profiler each kernel runs alone and appears as one "cuda_profiler_range"
event carrying its counters (model/tables.py keeps them as JSON). Ranges and cudaLaunchKernel calls
are paired in start order (the profiler serializes kernels, no correlation is written); the
operator stack of a launch is the ``cpu_op`` events containing it on its thread, outermost first.

- ``hta_cupti_counters``: HTA's ``get_cupti_counter_data_with_operators``
  (hta/analyzers/cupti_counter_analysis.py:26-95): a rank whose range and launch counts differ is
  left out; columns name, op_stack, top_level_op, bottom_level_op and one per counter;
- ``kernel_flops`` (rankscope): per rank and innermost operator, kernels and floating-point operations
  from the SASS instruction counters (an FMA counts 2, cupti_counter_analysis.py:13).
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import Col, TableView, View
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

RANGE = "cuda_profiler_range"
FLOPS = {f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum": 2 if "fma" in op else 1
         for op in ("ffma", "fmul", "fadd", "hfma", "hmul", "hadd", "dfma", "dmul", "dadd")}


def _stacks(ops: pl.DataFrame, launches: pl.DataFrame) -> list[list[int]]:
    """For each launch, the name ids of the cpu_op events containing it on its thread, by start."""
    out: list[list[int]] = [[] for _ in range(launches.height)]
    for (pid, tid), lt in launches.with_row_index("_i").group_by("pid", "tid"):
        o = ops.filter((pl.col("pid") == pid) & (pl.col("tid") == tid))
        ots, oend, onid = o["ts"].to_numpy(), o["end"].to_numpy(), o["nid"].to_numpy()
        order = hv.pd_argsort(ots)
        for i, ts, end in lt.select("_i", "ts", "end").iter_rows():  # ranges are few: one per kernel run alone
            sel = order[(ots[order] <= ts) & (oend[order] >= end)]
            out[i] = onid[sel].tolist()
    return out


@guarded
def rank_part(d: RankData) -> dict[str, Any] | None:
    v = hv.view(d)
    rid = v.cat_id(RANGE)
    if rid < 0:
        return None
    f = v.frame
    ranges = f.filter(pl.col("cid") == rid)
    ranges = ranges[hv.pd_argsort(ranges["ts"].to_numpy())]
    rt = v.cat_id("cuda_runtime")
    lau = f.filter((pl.col("cid") == rt) & pl.col("nid").is_in(v.name_ids("launch", lambda n: n.startswith(
        "cudaLaunchKernel"))))
    lau = lau[hv.pd_argsort(lau["ts"].to_numpy())]
    if lau.height != ranges.height:
        return {"problem": f"rank {d.rank}: {ranges.height} profiler ranges but {lau.height} kernel launches"}
    counters = d.memo("counters", lambda: d.run.table(d.rank, "events", columns=["counters"]))
    text = counters.column("counters").to_pylist()
    stacks = _stacks(f.filter(pl.col("cid") == v.cat_id("cpu_op")), lau)
    rows = []
    for i, (idx, nid) in enumerate(ranges.select("idx", "nid").iter_rows()):
        st = [v.names[n] for n in stacks[i]]
        rows.append({"rank": d.rank, "i": i, "name": v.names[nid], "op_stack": " | ".join(st),
                     "top_level_op": st[0] if st else "", "bottom_level_op": st[-1] if st else "",
                     **json.loads(text[idx - 1] or "{}")})
    return {"rows": rows}


def run_cupti_counters(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [p for _, p in parts if p is not None]
    rows = [x for p in got for x in p.get("rows", [])]
    problems = [p["problem"] for p in got if "problem" in p]
    if not rows:
        return with_problems(problems, Result("cupti_counters", skipped="; ".join(problems) or
                                              "no CUPTI range-profiler counters "
                      "(profile with torch.profiler's experimental_config profiler_metrics)"))
    t = pl.DataFrame(rows, infer_schema_length=None)
    counters = [c for c in t.columns if c in FLOPS]
    flops = sum((pl.col(c).fill_null(0) * w for c, w in FLOPS.items() if c in counters), pl.lit(0))
    own = t.with_columns(flops=flops).group_by("rank", "bottom_level_op").agg(
        pl.len().alias("kernels"), pl.col("flops").sum()).sort(["rank", "flops"], descending=[False, True])
    return with_problems(problems, Result("cupti_counters", tables={"hta_cupti_counters": t, "kernel_flops": own},
                  summary={"problems": problems} if problems else {}))


ANALYSIS = Analysis(
    name="cupti_counters",
    description="CUPTI range-profiler counters per kernel with its operator stack (HTA parity)",
    run=run_cupti_counters,
    rank_part=rank_part, combine=combine, rank_reads=(hv.KEY,),
    view=View("CUPTI counters per kernel and operator", tables=(
        TableView("kernel_flops", "per innermost operator (SASS instruction counters; an FMA counts 2)", (
            Col("rank", "rank", "count"), Col("bottom_level_op", "operator"), Col("kernels", "kernels", "count"),
            Col("flops", "floating-point operations", "count"))),),
        empty="profile with torch.profiler's experimental_config (profiler_metrics) for CUPTI counters", optional=True),
)
