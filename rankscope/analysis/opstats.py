"""Cross-rank operator and kernel statistics.

Pattern: per rank, total time and call count per name (optionally per input shape) of CPU
operators and of device kernels; then, per name, statistics of the per-rank totals over ranks
(count of ranks, mean, std, min, q1, median, q3, max, sum) and which rank is min and max. A name
whose max rank is far from the median points at the rank that does extra work. Top-N by sum.
Reads one rank's events at a time and keeps only the small per-rank aggregates.
"""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.base import Result
from rankscope.model.run import Run

TOP_N = 50
STATS = ["mean", "std", "min", "q1", "median", "q3", "max", "sum"]


def per_rank_totals(run: Run, rank: int, kinds: tuple[str, ...], by_shape: bool = False) -> pl.DataFrame:
    """One rank's (name[, input_dims]) -> calls, total ns for events of ``kinds``."""
    cols = ["name", "kind", "dur"] + (["input_dims"] if by_shape else [])
    ev = pl.from_arrow(run.table(rank, "events", columns=cols))
    assert isinstance(ev, pl.DataFrame)
    keys = ["name"] + (["input_dims"] if by_shape else [])
    return (ev.filter(pl.col("kind").cast(pl.Utf8).is_in(list(kinds)))
            .with_columns(pl.col(k).cast(pl.Utf8) for k in keys)
            .group_by(keys).agg(calls=pl.len(), total=pl.col("dur").sum())
            .with_columns(rank=pl.lit(rank, pl.Int64)))


def cross_rank(per_rank: pl.DataFrame, keys: list[str], top_n: int = TOP_N) -> pl.DataFrame:
    """Statistics of per-rank totals over ranks, per key; top-N by sum."""
    if per_rank.height == 0:
        return pl.DataFrame()
    v = pl.col("total")
    return (per_rank.group_by(keys).agg(
        ranks=pl.len(), calls=pl.col("calls").sum(), mean=v.mean(), std=v.std(ddof=0), min=v.min(),
        q1=v.quantile(0.25, "linear"), median=v.median(), q3=v.quantile(0.75, "linear"), max=v.max(),
        sum=v.sum(), min_rank=pl.col("rank").sort_by("total").first(),
        max_rank=pl.col("rank").sort_by("total").last())
        .sort("sum", descending=True).head(top_n))


def run_opstats(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``opstats``: tables ``operators``, ``operators_by_shape``, ``kernels``."""
    ops = [per_rank_totals(run, r, ("cpu_op",), by_shape=True) for r in run.rank_ids]
    ker = [per_rank_totals(run, r, ("kernel",)) for r in run.rank_ids]
    op_all = pl.concat([o for o in ops if o.height]) if any(o.height for o in ops) else pl.DataFrame()
    ker_all = pl.concat([k for k in ker if k.height]) if any(k.height for k in ker) else pl.DataFrame()
    if op_all.height == 0 and ker_all.height == 0:
        return Result("opstats", skipped="no CPU operators or kernels in any rank")
    tables = {}
    if op_all.height:
        by_name = op_all.group_by(["rank", "name"]).agg(pl.col("calls").sum(), pl.col("total").sum())
        tables["operators"] = cross_rank(by_name, ["name"]).to_arrow()
        tables["operators_by_shape"] = cross_rank(op_all, ["name", "input_dims"]).to_arrow()
    if ker_all.height:
        tables["kernels"] = cross_rank(ker_all, ["name"]).to_arrow()
    return Result("opstats", tables=tables, summary={"top_n": TOP_N, "ranks": len(run.rank_ids)})
