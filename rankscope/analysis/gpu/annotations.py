"""User annotations: time per annotation (on the GPU and on the CPU) and each kernel with its annotation.

Pattern: ``record_function`` spans appear twice in a trace, as ``user_annotation`` on the CPU thread and
``gpu_user_annotation`` on the device stream they covered. Per name: sum / max / min / mean / std of
their durations (HTA's ``get_gpu_user_annotation_breakdown``, hta/analyzers/breakdown_analysis.py:346,
top 1000 names or 80 % of the time, the rest "others"); each device kernel gets the innermost GPU
annotation of its stream that overlaps it (``get_gpu_kernels_with_user_annotations``,
breakdown_analysis.py:256-343: annotations taken longest first, a later one overwrites).

Tables: ``hta_gpu_annotation_breakdown``, ``hta_cpu_annotation_breakdown`` (µs),
``hta_kernels_with_annotation`` (rank, correlation, i, user_annotation: HTA's shortened name, "" for
none), and ``annotation_kernels`` (rankscope: per GPU annotation, its instances and time and the
kernels attributed to it and their time, ns).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.gpu.stats import top_n
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

NUM, RATIO = 1000, 0.8  # HTA's defaults (trace_analysis.py:188)


def shorten_name(name: str) -> str:
    """HTA's ``shorten_name`` (hta/utils/utils.py:147): template and argument lists dropped, last word."""
    if name.startswith(("Memcpy", "Memset", "dma")) or (name.find("<") < 0 and name.find("(") < 0):
        return name
    stack: list[str] = []
    for c in name.replace("->", ""):
        if c in ">)":
            opening = "<" if c == ">" else "("
            while stack and stack[-1] != opening:
                stack.pop()
            if stack and stack[-1] == opening:
                stack.pop()
        else:
            stack.append(c)
    return "".join(stack).split(" ")[-1]


def _breakdown(v: hv.View, cat: str, rank: int) -> pl.DataFrame | None:
    a = v.frame.filter(pl.col("cid") == v.cat_id(cat))
    if not a.height:
        return None
    return top_n(v.with_names(a), "dur", NUM, RATIO).with_columns(rank=pl.lit(rank))


def attribute(v: hv.View, hta_order: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kernels with ``user_annotation``, annotations): kernels are HTA's GPU events in frame order."""
    f = v.frame
    k = f.filter(pl.col("gpu"))
    a = v.with_names(f.filter(pl.col("cid") == v.cat_id("gpu_user_annotation"))).select(
        "pid", "tid", "ts", "end", "dur", "name")
    o = hv.pd_argsort(a["dur"].to_numpy(), ascending=False) if hta_order else \
        np.lexsort((a["ts"].to_numpy(), -a["dur"].to_numpy()))
    a = a[o]
    label = np.full(k.height, -1, np.int64)
    kp, kt, ks, ke = (k[c].to_numpy() for c in ("pid", "tid", "ts", "end"))
    ap, at, as_, ae = (a[c].to_numpy() for c in ("pid", "tid", "ts", "end"))
    for i in range(a.height):  # annotations are few (HTA loops over them too); kernels are vectorized
        hit = (kp == ap[i]) & (kt == at[i]) & (ks < ae[i]) & (as_[i] < ke)
        label[hit] = i
    names = a["name"].to_list()
    ann = [names[i] if i >= 0 else "" for i in label.tolist()]
    return k.with_columns(user_annotation=pl.Series(ann, dtype=pl.Utf8), _a=pl.Series(label)), a


def _own(rank: int, k: pl.DataFrame, a: pl.DataFrame) -> pl.DataFrame:
    inst = a.group_by("name").agg(pl.len().alias("instances"), pl.col("dur").sum().alias("time"))
    kern = k.filter(pl.col("_a") >= 0).group_by(pl.col("user_annotation").alias("name")).agg(
        pl.len().alias("kernels"), pl.col("dur").sum().alias("kernel_time"))
    return inst.join(kern, on="name", how="left").with_columns(
        pl.col("kernels").fill_null(0), pl.col("kernel_time").fill_null(0), rank=pl.lit(rank))


@guarded
def rank_part(d: RankData) -> dict[str, Any] | None:
    v = hv.view(d)
    gpu, cpu = _breakdown(v, "gpu_user_annotation", d.rank), _breakdown(v, "user_annotation", d.rank)
    if gpu is None and cpu is None:
        return None
    out: dict[str, Any] = {"gpu": gpu, "cpu": cpu, "kernels": None, "own": None}
    if gpu is not None:
        k, _ = attribute(v, hta_order=True)
        short = {n: shorten_name(n) for n in k["user_annotation"].unique().to_list()}
        out["kernels"] = k.select(pl.lit(d.rank).alias("rank"), "correlation",
                                  pl.int_range(pl.len()).over("correlation").alias("i"),
                                  pl.col("user_annotation").replace_strict(short, return_dtype=pl.Utf8))
        out["own"] = _own(d.rank, *attribute(v, hta_order=False))
    return out


def run_annotations(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def _hta_breakdown(frames: list[pl.DataFrame]) -> pl.DataFrame:
    if not frames:
        return pl.DataFrame(schema={"rank": pl.Int64, "name": pl.Utf8, "sum (us)": pl.Float64})
    t = pl.concat(frames).sort("rank", "name")
    return t.select("rank", "name", *[hv.to_us(pl.col(c)).alias(f"{c} (us)") for c in ("sum", "max", "min")],
                    (pl.col("std") / 1000.0).alias("stddev"), (pl.col("mean") / 1000.0).alias("mean (us)"))


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [p for _, p in parts if p is not None]
    if not got:
        return with_problems(problems, Result("annotations", skipped="no user annotations (record_function) in any rank"))
    tables = {"hta_gpu_annotation_breakdown": _hta_breakdown([p["gpu"] for p in got if p["gpu"] is not None]),
              "hta_cpu_annotation_breakdown": _hta_breakdown([p["cpu"] for p in got if p["cpu"] is not None])}
    kern = [p["kernels"] for p in got if p["kernels"] is not None]
    if kern:
        tables["hta_kernels_with_annotation"] = pl.concat(kern)
        tables["annotation_kernels"] = pl.concat([p["own"] for p in got if p["own"] is not None]).select(
            "rank", "name", "instances", "time", "kernels", "kernel_time").sort("rank", "time", descending=[False, True])
    return with_problems(problems, Result("annotations", tables=tables))


ANALYSIS = Analysis(
    name="annotations",
    description="user annotations on GPU and CPU; each kernel with its annotation (HTA parity)",
    run=run_annotations,
    rank_part=rank_part, combine=combine, rank_reads=(hv.KEY,),
    view=View("User annotations (record_function) on GPU and CPU", tables=(
        TableView("annotation_kernels", "per GPU annotation: its kernels", (
            Col("rank", "rank", "count"), Col("name", "annotation"), Col("instances", "instances", "count"),
            Col("time", "time", NS), Col("kernels", "kernels", "count"), Col("kernel_time", "kernel time", NS))),
        TableView("hta_gpu_annotation_breakdown", "GPU annotations (as HTA)", (
            Col("rank", "rank", "count"), Col("name", "annotation"), Col("sum (us)", "total", "us"),
            Col("mean (us)", "mean", "us"), Col("max (us)", "longest", "us"))),
        TableView("hta_cpu_annotation_breakdown", "CPU annotations (as HTA)", (
            Col("rank", "rank", "count"), Col("name", "annotation"), Col("sum (us)", "total", "us"),
            Col("mean (us)", "mean", "us"), Col("max (us)", "longest", "us")))),
        empty="no user annotations: wrap code in torch.profiler.record_function", optional=True),
)
