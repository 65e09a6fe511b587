"""Kernel breakdown: time per kernel class with overlap labels, and per-rank per-kernel statistics.

Pattern (per rank, then summed): device intervals merged per class, a sweep labels each instant with
the classes running ("COMPUTATION overlapping COMMUNICATION"), per-name sum / min / max / mean / std.

- ``hta_kernel_type`` / ``hta_kernel_breakdown``: HTA's ``get_gpu_kernel_breakdown`` (defaults:
  memory kernels included, top 10 names per class and rank or 80 % of the time, the rest "others";
  hta/analyzers/breakdown_analysis.py:37-160), classes by name (hta/utils/utils.py:109), µs;
- ``kernel_stats``: every kernel name per rank, no "others" (ns), classes as rankscope's (communication
  = ``is_comm``, which also knows renamed NCCL and non-NCCL kernels; memory = memcpy / memset);
- ``kernel_overlap``: the overlap labels per rank with rankscope's classes (ns).
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.classify import DEVICE_KINDS
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.gpu.stats import hta_sweep, sweep, top_n
from rankscope.analysis.rankdata import Later, RankData, part_of
from rankscope.model.run import Run

HTA_CLASSES = (hv.COMPUTATION, hv.COMMUNICATION, hv.MEMORY)
CLASSES = ("computation", "communication", "memory")
NUM_KERNELS, DURATION_RATIO = 10, 0.8  # HTA's defaults (trace_analysis.py:116)
_US = 1000.0


def _is_type(kind: str, name: str) -> bool:
    return hv.kernel_type(name) == kind


def _hta_part(d: RankData) -> dict[str, Any]:
    v = hv.view(d)
    k = hv.device(v.frame.select("nid", "ts", "end", "dur", "stream")).drop("stream")  # a filter copies all it is given
    types_of = {c: v.name_ids(c, functools.partial(_is_type, c)) for c in HTA_CLASSES}
    parts = {c: k.filter(pl.col("nid").is_in(ids)) for c, ids in types_of.items()}
    types = hta_sweep([(c, p["ts"].to_numpy(), p["end"].to_numpy()) for c, p in parts.items()])
    rows = [top_n(p, "dur", NUM_KERNELS, DURATION_RATIO, names=v.names).with_columns(
        kernel_type=pl.lit(c), rank=pl.lit(d.rank)) for c, p in parts.items()]
    return {"types": types, "kernels": pl.concat(rows)}


def _own_part(d: RankData) -> dict[str, Any] | None:
    dev = d.kind_in(DEVICE_KINDS)
    if not dev.any():
        return None
    kernel = d.kind_in(("kernel",))[dev]
    comm = d.comm()[dev]
    cls = np.where(comm, 1, np.where(kernel, 0, 2))  # index into CLASSES
    ts, dur = d.col("ts")[dev], d.col("dur")[dev]
    nid, names = d.memo("name_codes", lambda: hv.codes(d.events.column("name")))
    df = pl.DataFrame({"nid": nid[dev], "cls": cls.astype(np.int8), "dur": dur})
    stats = df.group_by("cls", "nid").agg(
        pl.len().alias("count"), pl.col("dur").sum().alias("sum"), pl.col("dur").min().alias("min"),
        pl.col("dur").max().alias("max"), pl.col("dur").cast(pl.Float64).mean().alias("mean"),
        pl.col("dur").cast(pl.Float64).std(ddof=1).fill_null(0.0).alias("std"))
    stats = stats.with_columns(rank=pl.lit(d.rank), name=pl.lit(pl.Series(names, dtype=pl.Utf8)).gather(pl.col("nid")),
                               **{"class": pl.lit(pl.Series(CLASSES, dtype=pl.Utf8)).gather(pl.col("cls"))})
    stats = stats.drop("nid", "cls")
    over = sweep([(c, ts[cls == i], (ts + dur)[cls == i]) for i, c in enumerate(CLASSES)])
    return {"stats": stats, "overlap": over}


@guarded
def rank_part(d: RankData) -> Later | None:
    own = _own_part(d)
    if own is None:
        return None
    return Later(guarded(lambda data: {**own, "hta": _hta_part(data)}), (hv.KEY,))  # view side: after the events


def run_kernel_breakdown(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, part_of(rank_part, run, r)) for r in run.rank_ids], results)


def _hta_types(parts: list[dict[str, Any]]) -> pl.DataFrame:
    tot: dict[str, int] = {}
    for p in parts:
        for k, v in p["hta"]["types"].items():
            tot[k] = tot.get(k, 0) + v
    t = pl.DataFrame({"kernel_type": list(tot), "sum": [v / _US for v in tot.values()]},
                     schema={"kernel_type": pl.Utf8, "sum": pl.Float64}).sort("sum", descending=True)
    total = t["sum"].sum() or 1.0
    return t.with_columns(percentage=pl.Series(np.round(t["sum"].to_numpy() / total * 100, 1)))


def _hta_kernels(parts: list[dict[str, Any]]) -> pl.DataFrame:
    k = pl.concat([p["hta"]["kernels"] for p in parts]).sort("kernel_type", "name", "rank")
    return k.select("name", (pl.col("sum") / _US).alias("sum (us)"), (pl.col("max") / _US).alias("max (us)"),
                    (pl.col("min") / _US).alias("min (us)"), (pl.col("std") / _US).alias("stddev"),
                    (pl.col("mean") / _US).alias("mean (us)"), "kernel_type", "rank")


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [(r, p) for r, p in parts if p is not None]
    if not got:
        return with_problems(problems, Result("kernel_breakdown", skipped="no GPU kernels in any rank (CPU-only trace)"))
    stats = pl.concat([p["stats"] for _, p in got]).select(
        "rank", "class", "name", "count", "sum", "min", "max", "mean", "std").sort(
        ["rank", "sum"], descending=[False, True])
    over = [{"rank": r, "kernels": k, "time": v} for r, p in got for k, v in p["overlap"].items()]
    ov = pl.DataFrame(over, schema={"rank": pl.Int64, "kernels": pl.Utf8, "time": pl.Int64})
    ov = ov.with_columns(pct=100.0 * pl.col("time") / pl.col("time").sum().over("rank")).sort(
        ["rank", "time"], descending=[False, True])
    hp = [p for _, p in got]
    tables = {"kernel_stats": stats, "kernel_overlap": ov, "hta_kernel_type": _hta_types(hp),
              "hta_kernel_breakdown": _hta_kernels(hp)}
    return with_problems(problems, Result("kernel_breakdown", tables=tables,
                  summary={"kernels": int(stats["count"].sum()), "names": stats["name"].n_unique()}))


ANALYSIS = Analysis(
    name="kernel_breakdown",
    description="kernel time per class with overlap labels; per-rank per-kernel sum / min / max / mean / std (HTA parity)",
    run=run_kernel_breakdown,
    needs=("kernels",),
    rank_part=rank_part, combine=combine,
    view=View("Kernel breakdown (classes, overlap, per kernel)", (
        Col("kernels", "kernels", "count"), Col("names", "distinct kernels", "count")), (
        TableView("kernel_overlap", "device time per rank by what ran at once", (
            Col("rank", "rank", "count"), Col("kernels", "running"), Col("time", "time", NS), Col("pct", "share (%)", "float"))),
        TableView("kernel_stats", "per rank and kernel", (
            Col("rank", "rank", "count"), Col("class", "class"), Col("name", "kernel"), Col("count", "calls", "count"),
            Col("sum", "total", NS), Col("min", "shortest", NS), Col("max", "longest", NS), Col("mean", "mean", NS),
            Col("std", "std", NS))),
        TableView("hta_kernel_type", "as HTA's kernel breakdown (all ranks)", (
            Col("kernel_type", "kernel type"), Col("sum", "time", "us"), Col("percentage", "share (%)", "float"))),
        TableView("hta_kernel_breakdown", "as HTA's kernel breakdown: top kernels per rank", (
            Col("rank", "rank", "count"), Col("kernel_type", "kernel type"), Col("name", "kernel"),
            Col("sum (us)", "total", "us"), Col("mean (us)", "mean", "us"), Col("max (us)", "longest", "us")))),
        "needs GPU kernels in the traces (profile a CUDA or NPU job with device activities)", optional=True),
)
