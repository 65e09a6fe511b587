"""Cross-rank operator and kernel statistics.

Pattern: per rank, total time and call count per name (optionally per input shape) of CPU
operators and of device kernels; then, per name, statistics of the per-rank totals over ranks
(count of ranks, mean, std, min, q1, median, q3, max, sum) and which rank is min and max. A name
whose max rank is far from the median points at the rank that does extra work. Top-N by sum.
A kernel has no shapes of its own: ``kernels_by_shape`` keys it by the input shapes of the CPU
operator that launched it (same External id). Grouping works on the dictionary indices of the
name / shape columns; reads one rank's events at a time and keeps only per-rank aggregates.
Tables: ``operators``, ``operators_by_shape``, ``kernels``, ``kernels_by_shape``.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

TOP_N = 50
_COLS = ["name", "kind", "dur", "input_dims", "external_id", "depth"]
STATS = ["mean", "std", "min", "q1", "median", "q3", "max", "sum"]


def per_rank_totals(run: Run, rank: int, kinds: tuple[str, ...], by_shape: bool = False,
                    data: RankData | None = None) -> pl.DataFrame:
    """One rank's (name[, input_dims]) -> calls, total ns for events of ``kinds``.

    Grouped on the dictionary indices (numpy); only the distinct names are decoded to strings."""
    d = data if data is not None else RankData(run, rank, _COLS)
    ev = d.events
    mask = d.kind_in(kinds)
    keys = ["name"] + (["input_dims"] if by_shape else [])
    codes, dics = [], []
    for k in keys:
        idx, dic = d.memo(("dict", k), partial(_indices, ev.column(k)))
        if k == "input_dims" and "kernel" in kinds:
            idx = d.memo("launch_dims", partial(_launch_dims, d, idx, len(dic) - 1))
        codes.append(idx[mask])
        dics.append(dic)
    key = codes[0].astype(np.int64)
    if by_shape:
        key = key * len(dics[1]) + codes[1]
    uniq, inv = np.unique(key, return_inverse=True)
    dur = d.col("dur")[mask]
    total = np.zeros(len(uniq), np.int64)
    np.add.at(total, inv, dur)
    cols = {"name": dics[0].take(uniq // len(dics[1]) if by_shape else uniq)}
    if by_shape:
        cols["input_dims"] = dics[1].take(uniq % len(dics[1]))
    return pl.DataFrame({**{k: pl.Series(k, v.to_numpy(zero_copy_only=False), pl.Utf8) for k, v in cols.items()},
                         "calls": pl.Series("calls", np.bincount(inv, minlength=len(uniq)), pl.UInt32),
                         "total": total, "rank": pl.Series("rank", np.full(len(uniq), rank), pl.Int64)})


def _launch_dims(d: RankData, dims: np.ndarray, empty: int) -> np.ndarray:
    """Per row, the input shapes of the CPU operator that launched it: a kernel carries no shapes,
    its External id names the operator (the deepest one when several share the id). Rows without
    one get the trailing "" index."""
    ext, depth = d.col("external_id"), d.col("depth")
    ops = np.flatnonzero(d.kind_in(("cpu_op",)) & (ext >= 0))
    out = np.full(len(ext), empty, dtype=dims.dtype)
    if not len(ops):
        return out
    order = ops[np.lexsort((depth[ops], ext[ops]))]
    e = ext[order]
    last = np.r_[e[1:] != e[:-1], True]
    e, di = e[last], dims[order][last]
    pos = np.clip(np.searchsorted(e, ext), 0, len(e) - 1)
    hit = (e[pos] == ext) & (ext >= 0)
    out[hit] = di[pos[hit]]
    return out


def _indices(c: Any) -> tuple[np.ndarray, pa.Array]:
    """Row -> dictionary index, and the dictionary with a trailing "" (the index of nulls)."""
    c = c.combine_chunks() if hasattr(c, "combine_chunks") else c
    if not pa.types.is_dictionary(c.type):
        c = c.dictionary_encode()
    dic = pa.concat_arrays([c.dictionary.cast(pa.string()), pa.array([""], pa.string())])
    return c.indices.fill_null(len(dic) - 1).to_numpy(zero_copy_only=False), dic


def cross_rank(per_rank: pl.DataFrame, keys: list[str], top_n: int = TOP_N) -> pl.DataFrame:
    """Statistics of per-rank totals over ranks, per key; top-N by sum."""
    if per_rank.height == 0:
        return pl.DataFrame()
    v = pl.col("total")
    return (per_rank.group_by(keys).agg(
        ranks=pl.len(), calls=pl.col("calls").sum(), mean=v.mean(), std=v.std(ddof=0), min=v.min(),
        q1=v.quantile(0.25, "linear"), median=v.median(), q3=v.quantile(0.75, "linear"), max=v.max(),
        sum=v.sum(), min_rank=pl.col("rank").sort_by(["total", "rank"]).first(),
        max_rank=pl.col("rank").sort_by(["total", "rank"]).last())
        .sort("sum", descending=True).head(top_n))


def rank_part(d: RankData) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-rank step of the shared pass: (CPU operator totals by shape, kernel totals by the
    input shapes of their launching operator)."""
    return (per_rank_totals(d.run, d.rank, ("cpu_op",), by_shape=True, data=d),
            per_rank_totals(d.run, d.rank, ("kernel",), by_shape=True, data=d))


def run_opstats(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``opstats``: tables ``operators``, ``operators_by_shape``, ``kernels``."""
    return combine(run, [(r, rank_part(RankData(run, r, _COLS))) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, tuple[pl.DataFrame, pl.DataFrame]]], results: dict[str, Any]) -> Result:
    """The ``opstats`` result from the per-rank parts."""
    ops = [p[0] for _, p in parts]
    ker = [p[1] for _, p in parts]
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
        by_name = ker_all.group_by(["rank", "name"]).agg(pl.col("calls").sum(), pl.col("total").sum())
        tables["kernels"] = cross_rank(by_name, ["name"]).to_arrow()
        tables["kernels_by_shape"] = cross_rank(ker_all, ["name", "input_dims"]).to_arrow()
    return Result("opstats", tables=tables, summary={"top_n": TOP_N, "ranks": len(run.rank_ids)})


ANALYSIS = Analysis(
    name="opstats",
    description="cross-rank operator and kernel statistics (top-N)",
    run=run_opstats,
    rank_part=rank_part, combine=combine,
    view=View("Operators across ranks", (Col("ranks", "ranks", "count"),), (
        TableView("operators", "top operators: total time per rank over the capture", (
            Col("name", "operator"), Col("calls", "calls", "count"), Col("median", "median rank", NS),
            Col("min", "least", NS), Col("max", "most", NS), Col("max_rank", "rank with most", "count"),
            Col("sum", "all ranks", NS))),
        TableView("operators_by_shape", "by input shape", (
            Col("name", "operator"), Col("input_dims", "input shapes"), Col("calls", "calls", "count"),
            Col("median", "median rank", NS), Col("max", "most", NS), Col("max_rank", "rank with most", "count")))), place="operators"),
)
