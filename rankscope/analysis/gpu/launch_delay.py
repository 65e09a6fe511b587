"""Kernel launch delay: how long each kernel (and memcpy / memset) waited on the device after its
runtime call returned, and which runtime calls were slow.

Pattern: each launch call joined to its device event by ``correlation``; launch delay = device start
− end of the launch call, clipped at 0 (HTA's ``get_cuda_kernel_launch_stats``,
hta/analyzers/cuda_kernel_analysis.py:537-637: cudaLaunchKernel / cudaLaunchKernelExC / MTIA
runFunction and cudaMemcpyAsync / cudaMemsetAsync). Per rank, counts of short kernels (device time
under the call's own time, call ≤ ``RUNTIME_CUTOFF_NS``), slow runtime calls (> ``RUNTIME_CUTOFF_NS``)
and long delays (> ``LAUNCH_DELAY_CUTOFF_NS``), HTA's cutoffs (trace_analysis.py:327-328).

Tables: ``hta_launch_stats`` (one row per launch, HTA's columns, µs) and ``launch_summary`` (ns).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "runFunction - job_prep_and_submit_for_execution")
MEMORY_LAUNCH_NAMES = ("cudaMemsetAsync", "cudaMemcpyAsync")
RUNTIME_CUTOFF_NS = 50_000
LAUNCH_DELAY_CUTOFF_NS = 100_000


def launches(v: hv.View) -> pl.DataFrame:
    """Launch call × device event pairs of HTA's frame, in HTA's merge order: correlation, cpu_duration,
    gpu_duration, launch_delay (ns), i (occurrence of the correlation)."""
    f = v.frame.select("nid", "correlation", "stream", "ts", "dur")  # a filter copies every column it is given
    ids = v.name_ids("launch_stats", lambda n: n in LAUNCH_NAMES + MEMORY_LAUNCH_NAMES)
    corr = f.filter(pl.col("nid").is_in(ids))["correlation"].unique()
    cpu = f.filter((pl.col("stream") == -1) & pl.col("correlation").is_in(corr.implode()))
    gpu = f.filter((pl.col("stream") != -1) & pl.col("correlation").is_in(corr.implode()))
    j = cpu.select("correlation", "ts", "dur").join(
        gpu.select("correlation", pl.col("ts").alias("ts_g"), pl.col("dur").alias("dur_g")), on="correlation",
        maintain_order="left_right")
    return j.select("correlation", pl.col("dur").alias("cpu_duration"), pl.col("dur_g").alias("gpu_duration"),
                    (pl.col("ts_g") - pl.col("ts") - pl.col("dur")).clip(0).alias("launch_delay")).with_columns(
        i=pl.int_range(pl.len()).over("correlation"))


def _summary(rank: int, j: pl.DataFrame) -> dict[str, Any]:
    delay = j["launch_delay"].to_numpy()
    cpu, gpu = j["cpu_duration"].to_numpy(), j["gpu_duration"].to_numpy()
    pct = (lambda q: float(np.percentile(delay, q)) if len(delay) else 0.0)
    return {"rank": rank, "launches": len(j), "short_kernels": int(((cpu <= RUNTIME_CUTOFF_NS) & (gpu < cpu)).sum()),
            "long_runtime": int((cpu > RUNTIME_CUTOFF_NS).sum()),
            "long_delay": int((delay > LAUNCH_DELAY_CUTOFF_NS).sum()),
            "runtime_mean": float(cpu.mean()) if len(cpu) else 0.0, "runtime_max": int(cpu.max()) if len(cpu) else 0,
            "delay_p50": pct(50), "delay_p95": pct(95), "delay_max": int(delay.max()) if len(delay) else 0}


@guarded
def rank_part(d: RankData) -> dict[str, Any] | None:
    j = launches(hv.view(d))
    if not j.height:
        return None
    hta = j.select(pl.lit(d.rank).alias("rank"), "correlation", "i",
                   *[hv.to_us(pl.col(c)).alias(c) for c in ("cpu_duration", "gpu_duration", "launch_delay")])
    return {"summary": _summary(d.rank, j), "hta": hta}


def run_launch_delay(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [p for _, p in parts if p is not None]
    if not got:
        why = "no kernel launches with their device events in any rank"
        return with_problems(problems, Result("launch_delay", skipped=why))
    summ = pl.DataFrame([p["summary"] for p in got])
    tables = {"launch_summary": summ, "hta_launch_stats": pl.concat([p["hta"] for p in got])}
    return with_problems(problems, Result("launch_delay", tables=tables,
                  summary={"long_runtime_calls": int(summ["long_runtime"].sum()),
                           "long_delays": int(summ["long_delay"].sum())}))


ANALYSIS = Analysis(
    name="launch_delay",
    description="kernel launch delay after the runtime call ends; slow runtime calls (HTA parity)",
    run=run_launch_delay,
    needs=("kernels",),
    rank_part=rank_part, combine=combine, rank_reads=(hv.KEY,),
    view=View("Kernel launch delay and slow runtime calls", (
        Col("long_runtime_calls", "runtime calls over 50 µs", "count"), Col("long_delays", "launch delays over 100 µs", "count")), (
        TableView("launch_summary", "per rank (delay = kernel start − end of its launch call, ≥ 0)", (
            Col("rank", "rank", "count"), Col("launches", "launches", "count"), Col("short_kernels", "kernels shorter than their launch", "count"),
            Col("long_runtime", "calls over 50 µs", "count"), Col("long_delay", "delays over 100 µs", "count"),
            Col("delay_p50", "median delay", NS), Col("delay_p95", "p95 delay", NS), Col("delay_max", "longest delay", NS),
            Col("runtime_max", "longest call", NS))),),
        "needs kernel launches with their kernels (CUDA / ROCm traces)", optional=True),
)
