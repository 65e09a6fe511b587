"""Summaries as HTA writes them (pandas' ``describe`` and HTA's top-N "others" aggregation), in polars.

- ``describe``: count, mean, std (ddof 1), min, 25%, 50%, 75%, max per group, quantiles interpolated
  linearly (pandas ``DataFrame.describe``);
- ``top_n``: hta/analyzers/breakdown_analysis.py:564-627 ``_aggr_gpu_kernel_time``: sum / max / min / mean /
  std per name, sorted by sum; with more than ``num`` names, those past the ``ratio`` quantile of the
  running sum or past the first ``num`` become "others", and then every row is re-aggregated over
  the per-name sums (a kept name's max = min = mean = its sum, std 0).
- ``sweep``: time per combination of classes running at once (breakdown_analysis.py:495-562
  ``_get_gpu_kernel_type_time``): merged intervals per class, a running bitmask, labels
  "A overlapping B" in class order.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from rankscope.analysis.gpu.htaview import merged, pd_argsort

STATS = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")


def describe(df: pl.DataFrame, by: list[str], value: str) -> pl.DataFrame:
    """pandas ``groupby(by)[value].describe()`` as columns ``by`` + STATS (float64)."""
    v = pl.col(value).cast(pl.Float64)
    return df.group_by(by, maintain_order=True).agg(
        v.count().cast(pl.Float64).alias("count"), v.mean().alias("mean"), v.std(ddof=1).alias("std"),
        v.min().alias("min"), v.quantile(0.25, "linear").alias("25%"), v.quantile(0.5, "linear").alias("50%"),
        v.quantile(0.75, "linear").alias("75%"), v.max().alias("max")).sort(by)


def _agg(df: pl.DataFrame, value: str, key: str = "name") -> pl.DataFrame:
    v = pl.col(value)
    return df.group_by(key).agg(v.sum().alias("sum"), v.max().alias("max"), v.min().alias("min"),
                                v.cast(pl.Float64).mean().alias("mean"),
                                v.cast(pl.Float64).std(ddof=1).fill_null(0.0).fill_nan(0.0).alias("std"))


def top_n(df: pl.DataFrame, value: str, num: int, ratio: float, keep: set[str] | None = None,
          names: list[str] | None = None) -> pl.DataFrame:
    """Per-name stats with HTA's "others" grouping (see module docstring). With ``names``, ``df`` is keyed
    by name codes (``nid``): aggregated on the codes, names attached to the (few) aggregated rows."""
    if names is not None:
        t = _agg(df, value, "nid")
        t = t.with_columns(name=pl.lit(pl.Series(names, dtype=pl.Utf8)).gather(pl.col("nid"))).drop("nid")
    else:
        t = _agg(df, value)
    t = t.sort(["sum", "name"], descending=[True, False]).select("name", "sum", "max", "min", "mean", "std")
    if t.height <= num:
        return t
    cum = t["sum"].cum_sum().cast(pl.Float64)
    q = float(np.quantile(cum.to_numpy(), ratio))  # pandas Series.quantile: linear
    kept = pl.col("name").is_in(sorted(keep)) if keep else pl.lit(False)
    other = ~kept & ((cum > q) | (pl.int_range(pl.len()) >= num))
    t = t.with_columns(name=pl.when(other).then(pl.lit("others")).otherwise(pl.col("name")))
    return _agg(t, "sum")


def sweep(classes: list[tuple[str, np.ndarray, np.ndarray]]) -> dict[str, int]:
    """Time per set of classes running together: {"A" | "A overlapping B" | ...: time}."""
    times, deltas = [], []
    for i, (_, ts, end) in enumerate(classes):
        s, e = merged(ts, end)
        times += [s, e]
        deltas += [np.full(len(s), 1 << i, np.int64), np.full(len(e), -(1 << i), np.int64)]
    if not times:
        return {}
    t = np.concatenate(times)
    d = np.concatenate(deltas)
    o = np.argsort(t, kind="stable")
    t, running = t[o], np.cumsum(d[o])
    dur = np.r_[t[1:] - t[:-1], 0]
    out: dict[str, int] = {}
    for mask in np.unique(running[running > 0]):
        label = " overlapping ".join(name for i, (name, _, _) in enumerate(classes) if mask & (1 << i))
        sel = running == mask
        if (dur[sel] > 0).any():
            out[label] = out.get(label, 0) + int(dur[sel].sum())
    return out


def hta_sweep(classes: list[tuple[str, np.ndarray, np.ndarray]]) -> dict[str, int]:
    """``sweep`` as HTA computes it, step by step (breakdown_analysis.py:508-560): each class's merged
    starts then ends appended and the whole re-sorted with pandas' unstable sort, so that equal times
    leave the zero-length labels HTA leaves (a label of time 0 is a row of HTA's table)."""
    time = np.zeros(0, np.int64)
    status = np.zeros(0, np.int64)
    for i, (_, ts, end) in enumerate(classes):
        s, e = merged(ts, end)
        time = np.concatenate([time, s, e])
        status = np.concatenate([status, np.full(len(s), 1 << i, np.int64), np.full(len(e), -(1 << i), np.int64)])
        o = pd_argsort(time)
        time, status = time[o], status[o]
    running = np.cumsum(status)
    dur = np.r_[time[1:] - time[:-1], 0]
    out: dict[str, int] = {}
    for mask in np.unique(running[running > 0]).tolist():
        label = " overlapping ".join(name for i, (name, _, _) in enumerate(classes) if mask & (1 << i))
        out[label] = out.get(label, 0) + int(dur[running == mask].sum())
    return out
