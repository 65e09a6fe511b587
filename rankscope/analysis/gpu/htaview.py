"""One rank's events as Holistic Trace Analysis 0.5.0 loads them: the input of every ``hta_*`` table.

Pattern: HTA's ``TraceAnalysis`` load replayed on rankscope's cached columns (polars, no per-event
Python), so that HTA's analyses can be recomputed exactly (file:line of hta 0.5.0 as installed):

1. events of category "Trace" are dropped (common/trace_parser.py:254);
2. ns-resolution traces: start rounded up, end rounded down to whole µs (trace_parser.py:334-335);
3. ``index_correlation``: each CPU event with a correlation points at the GPU event of the same
   correlation and back, the last pair winning (common/trace.py:62-131);
4. GPU events are ``stream >= 0 and correlation >= 0`` or named Event/Context Sync
   (common/trace_filter.py:330); with two or more ProfilerStep names, CPU events from the start of
   the last step on are dropped and GPU events kept once per surviving CPU event of their correlation
   (trace.py:705-731); the frame is then those GPU events followed by the CPU events;
5. times are aligned to the earliest event of all ranks (trace.py:696): ``ts`` here is relative to the
   rank's earliest event, ``tmin`` (raw trace clock) lets ``combine`` steps align across ranks and
   ``base`` (baseTimeNanoseconds) gives back rankscope's clock: ts + tmin + base.

Times are int64 ns on HTA's (rounded) µs grid; HTA's values are these / 1000.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from rankscope.analysis.rankdata import RankData

SYNC_NAMES = ("Event Sync", "Context Sync")
# hta/utils/utils.py:56, 72, 88: kernel types by name (re.match: anchored at the start)
COMM_RE = r"^nccl.*Kernel"
MEMORY_RE = r"^(Memcpy|Memset|dma)"
NOT_COMPUTE_RE = r"^(nccl.*Kernel|.*Memcpy|Memset|.*Sync)"
COMPUTATION, COMMUNICATION, MEMORY, OTHER = "COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"
_COLS = ["name", "cat", "kind", "ts", "dur", "pid", "tid", "stream", "correlation", "depth", "bytes",
         "bandwidth"]


def kernel_type(name: pl.Expr) -> pl.Expr:
    """HTA's kernel type of a name (utils.py:109 ``get_kernel_type``)."""
    return (pl.when(name.str.contains(COMM_RE)).then(pl.lit(COMMUNICATION))
            .when(name.str.contains(MEMORY_RE)).then(pl.lit(MEMORY))
            .when(~name.str.contains(NOT_COMPUTE_RE)).then(pl.lit(COMPUTATION))
            .otherwise(pl.lit(OTHER)))


def memory_kind(name: pl.Expr) -> pl.Expr:
    """HTA's memory-copy type of a name (utils.py:120 ``get_memory_kernel_type``)."""
    return (pl.when(name.str.slice(0, 6) == "Memset").then(pl.lit("Memset"))
            .when(name.str.slice(0, 6) != "Memcpy").then(pl.lit("Memcpy Unknown"))
            .otherwise(name.str.slice(0, 11)))


def _frame(d: "RankData") -> pl.DataFrame:
    ev = d.events
    cols = {c: ev.column(c) for c in _COLS if c in ev.column_names}
    df = pl.from_arrow(ev.select(list(cols)))
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(pl.col(c).cast(pl.Utf8) for c in ("name", "cat", "kind"))
    return df.with_row_index("idx", offset=1).with_columns(pl.col("idx").cast(pl.Int64))


def _rounded(df: pl.DataFrame, base: int) -> pl.DataFrame:
    """Raw-clock ts / dur / end in ns, on HTA's grid (whole µs where HTA rounds)."""
    raw = pl.col("ts") - base
    df = df.with_columns(raw.alias("ts"))
    frac = df.select(((pl.col("ts") % 1000) != 0).any() | ((pl.col("dur") % 1000) != 0).any()).item()
    if not frac:
        return df.with_columns(end=pl.col("ts") + pl.col("dur"))
    # HTA adds the float µs ts and dur, then ceils the start and floors the end (trace_parser.py:330-336)
    ts_f = (pl.col("ts") // 1000).cast(pl.Float64) + (pl.col("ts") % 1000).cast(pl.Float64) / 1000
    end_f = ts_f + pl.col("dur").cast(pl.Float64) / 1000
    df = df.with_columns(ts=ts_f.ceil().cast(pl.Int64) * 1000, end=end_f.floor().cast(pl.Int64) * 1000)
    return df.with_columns(dur=pl.col("end") - pl.col("ts"))


def _index_correlation(df: pl.DataFrame) -> pl.DataFrame:
    """``index_correlation`` (trace.py:62): 0 = has a correlation, nothing linked; -1 = none."""
    c = df.filter(pl.col("correlation") != -1).select("idx", "correlation", "gpu")
    pairs = c.filter(~pl.col("gpu")).join(c.filter(pl.col("gpu")), on="correlation", suffix="_g")
    # df.loc[index_x] = index_y: with several pairs the last assignment (merge order) stands
    cpu_link = pairs.group_by("idx").agg(pl.col("idx_g").last().alias("link"))
    gpu_link = pairs.group_by("idx_g").agg(pl.col("idx").last().alias("link")).rename({"idx_g": "idx"})
    links = pl.concat([cpu_link, gpu_link])
    df = df.join(links, on="idx", how="left", maintain_order="left")
    return df.with_columns(index_correlation=pl.coalesce("link", pl.min_horizontal(pl.col("correlation"), 0)))\
        .drop("link")


def _filtered(df: pl.DataFrame) -> pl.DataFrame:
    """Drop what HTA's load drops after the last ProfilerStep starts (trace.py:705-731)."""
    steps = df.filter(pl.col("name").str.contains("ProfilerStep", literal=True))["name"].unique()
    if len(steps) < 2:
        return df.with_columns(pos=pl.col("idx"))
    cpu = df.filter(~pl.col("gpu"))
    last = cpu.filter(pl.col("name").is_in(steps.to_list()))["ts"].max()
    cpu = cpu.filter(pl.col("ts") < last)
    gpu = df.filter(pl.col("gpu")).join(cpu.select("correlation"), on="correlation", maintain_order="left")
    out = pl.concat([gpu, cpu])
    return out.with_columns(pos=pl.int_range(1, out.height + 1, dtype=pl.Int64))


def build(d: "RankData") -> dict[str, Any]:
    """The rank's frame as HTA loads it (``frame``, ordered as HTA's) and its earliest start ``tmin``."""
    base = int(d.run.ranks[d.rank].base_time_ns or 0) if d.rank in d.run.ranks else 0
    df = _frame(d).filter(pl.col("cat") != "Trace")
    df = _rounded(df, base)
    df = df.with_columns(gpu=((pl.col("stream") >= 0) & (pl.col("correlation") >= 0))
                         | pl.col("name").is_in(SYNC_NAMES))
    tmin = int(df["ts"].min()) if df.height else 0
    # relative to the rank's earliest event: small numbers, exact even where HTA computes in float
    df = df.with_columns(pl.col("ts") - tmin, pl.col("end") - tmin)
    df = _filtered(_index_correlation(df))
    return {"frame": df, "tmin": tmin, "base": base}


def view(d: "RankData") -> dict[str, Any]:
    """``build`` once per rank (shared by every GPU analysis of the per-rank pass)."""
    return d.memo("htaview", lambda: build(d))


def device(df: pl.DataFrame) -> pl.DataFrame:
    """HTA's ``trace_df[trace_df["stream"].ne(-1)]``: what most HTA analyses call GPU kernels."""
    return df.filter(pl.col("stream") != -1)


def merged(ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's ``merge_kernel_intervals`` (utils.py:130): sort by start, a new group starts where the
    start is after every earlier end (touching intervals merge)."""
    if not len(ts):
        return ts, end
    o = np.argsort(ts, kind="stable")
    s, e = ts[o], end[o]
    run_max = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run_max[:-1]]
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))


def pd_argsort(values: Any, ascending: bool = True) -> np.ndarray:
    """The order of pandas' ``sort_values`` on one column (pandas/core/sorting.py ``nargsort``, kind
    "quicksort"): numpy's unstable quicksort on the values in frame order, so that ties fall where
    they fall in HTA (its cumulative sums and "previous kernel" depend on it)."""
    v = np.asarray(values)
    if ascending:
        return np.argsort(v, kind="quicksort")
    idx = np.arange(len(v))[::-1]
    return idx[v[::-1].argsort(kind="quicksort")][::-1]


def to_us(expr: pl.Expr) -> pl.Expr:
    """ns on HTA's grid -> HTA's µs."""
    return expr.cast(pl.Float64) / 1000.0
