"""ATen operator -> the kernels it launched, with the delay from the operator to its first launch and
from the launch to the kernel.

Pattern: each launch call (cudaLaunchKernel, cuLaunchKernel, ...) is given the innermost ``aten::``
operator that wholly contains it; its kernel comes by correlation. Per operator instance: the kernel
sequence, the first launch's delay after the operator started (aten op delay) and that kernel's start
after its launch (runtime delay); then per (operator, kernel sequence): occurrences and mean delays.
Innermost = latest start, found for every launch at once with a sparse table over the operators' ends.

- ``hta_aten_op_kernels``: HTA's ``get_aten_op_kernels_and_delay`` (hta/analyzers/
  cuda_kernel_analysis.py:405-529): operators of any thread, ties between operators starting at the
  same µs broken as pandas' sort breaks them, µs rounded to 3 places; like HTA 0.5.0 the table of
  rank r also counts the launches of the ranks before it (its ``launch_stats`` list is not reset per
  rank, cuda_kernel_analysis.py:431);
- ``aten_op_kernels`` (rankscope): the operator on the launch's own thread, each rank on its own (ns).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.rankdata import RankData
from rankscope.model.run import Run

_LAUNCH = re.compile(r"(cuda.*LaunchKernel)|(cuLaunchKernel)|(^runFunction)")  # hta/common/types.py:139


def _levels(end: np.ndarray) -> list[np.ndarray]:
    lv = [end]
    while (1 << len(lv)) <= len(end):
        h = 1 << (len(lv) - 1)
        lv.append(np.maximum(lv[-1][:-h], lv[-1][h:]))
    return lv


def _range_max(lv: list[np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """max(end[a:b]) per query (−inf where empty)."""
    n = np.maximum(b - a, 1)
    lg = np.floor(np.log2(n)).astype(np.int64)
    out = np.full(len(a), -np.inf)
    for level in np.unique(lg).tolist():
        s = lg == level
        w = 1 << level
        out[s] = np.maximum(lv[level][a[s]], lv[level][b[s] - w])
    return np.where(b > a, out, -np.inf)


def innermost(ts: np.ndarray, end: np.ndarray, q_ts: np.ndarray, q_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Over intervals sorted by start: for each query, the last j with ts[j] <= q_ts and end[j] >= q_end
    (−1: none), and whether another such interval starts at the same ts[j] (a tie)."""
    if not len(ts):
        return np.full(len(q_ts), -1), np.zeros(len(q_ts), bool)
    # ends as their rank among the distinct ends (int32): compared only with each other and with q_end
    # (x < q for x among them iff its rank < the count of them below q), so the table takes half the memory
    u = np.unique(end)
    end, q_end = np.searchsorted(u, end).astype(np.int32), np.searchsorted(u, q_end)
    del u
    lv = _levels(end)
    pos = np.searchsorted(ts, q_ts, side="right")
    for level in range(len(lv) - 1, -1, -1):  # skip whole blocks from the right that end too early
        w = 1 << level
        can = pos - w >= 0
        m = np.where(can, lv[level][np.clip(pos - w, 0, len(lv[level]) - 1)], np.inf)
        pos = np.where(can & (m < q_end), pos - w, pos)
    j = pos - 1
    ok = j >= 0
    jj = np.where(ok, j, 0)
    lo = np.searchsorted(ts, ts[jj], side="left")
    tie = ok & (_range_max(lv, lo, jj) >= q_end)
    return np.where(ok, j, -1), tie


def _hta_choice(a_ts: np.ndarray, a_end: np.ndarray, order: np.ndarray, l_ts: np.ndarray, l_end: np.ndarray,
                j: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Operator (frame position) HTA picks: the containing one first in pandas' descending sort by start
    (cuda_kernel_analysis.py:433-443); only ties need the sort, done on HTA's own candidate list."""
    pick = np.where(j >= 0, order[np.maximum(j, 0)], -1)
    for i in np.flatnonzero(tie).tolist():  # launches whose innermost start is shared: few
        cand = np.flatnonzero((a_ts <= l_ts[i]) & (a_end >= l_end[i]))
        pick[i] = cand[hv.pd_argsort(a_ts[cand], ascending=False)[0]]
    return pick


def _rows(v: hv.View, same_thread: bool) -> pl.DataFrame:
    """One row per launch with an operator and exactly one kernel, in frame order."""
    f = v.frame.select("idx", "nid", "ts", "end", "tid")  # a filter copies every column it is given
    aten = f.filter(pl.col("nid").is_in(v.name_ids("aten", lambda n: n.startswith("aten::"))))
    lau = f.filter(pl.col("nid").is_in(v.name_ids("kernel_launch", lambda n: _LAUNCH.match(n) is not None)))
    kern = hv.device(v.frame.select("nid", "ts", "stream", "index_correlation")).group_by("index_correlation").agg(
        pl.len().alias("n"), pl.col("ts").first().alias("k_ts"), pl.col("nid").first().alias("k_nid"))
    lau = lau.join(kern.filter(pl.col("n") == 1), left_on="idx", right_on="index_correlation", maintain_order="left")
    a_ts, a_end, a_tid = aten["ts"].to_numpy(), aten["end"].to_numpy(), aten["tid"].to_numpy()
    l_ts, l_end, l_tid = lau["ts"].to_numpy(), lau["end"].to_numpy(), lau["tid"].to_numpy()
    pick = np.full(lau.height, -1)
    groups = np.unique(l_tid).tolist() if same_thread else [None]
    for t in groups:  # one pass per thread (few) when operators must share the launch's thread
        q = np.flatnonzero(l_tid == t) if t is not None else np.arange(lau.height)
        ops = np.flatnonzero(a_tid == t) if t is not None else np.arange(aten.height)
        o = ops[np.argsort(a_ts[ops], kind="stable")]
        if not len(o) or not len(q):
            continue
        j, tie = innermost(a_ts[o], a_end[o], l_ts[q], l_end[q])
        pick[q] = _hta_choice(a_ts, a_end, o, l_ts[q], l_end[q], j, tie & (t is None)) if t is None else \
            np.where(j >= 0, o[np.maximum(j, 0)], -1)
    ok = pick >= 0
    p = pick[ok]
    return pl.DataFrame({"tid": a_tid[p], "op_nid": aten["nid"].to_numpy()[p], "op_ts": a_ts[p],
                         "aten_op_delay": l_ts[ok] - a_ts[p], "runtime_delay": lau["k_ts"].to_numpy()[ok] - l_ts[ok],
                         "nid": lau["k_nid"].to_numpy()[ok]})


def _grouped(v: hv.View, rows: pl.DataFrame) -> pl.DataFrame:
    """(operator, kernel sequence): count, summed first delays (ns) — per operator instance first. Grouped on
    name codes, the strings made once per group (a string per launch: MBs of long kernel names, issue 26),
    then grouped again on the strings (two sequences can read the same)."""
    text = v.text_ids()
    inst = rows.with_columns(k=pl.Series(text[rows["nid"].to_numpy()])).group_by(
        "tid", "op_nid", "op_ts", maintain_order=True).agg(
        pl.col("k").alias("seq"), pl.col("aten_op_delay").first(), pl.col("runtime_delay").first())
    g = inst.with_columns(op=pl.Series(text[inst["op_nid"].to_numpy()], dtype=pl.Int32)).group_by("op", "seq").agg(
        pl.len().alias("occurrence_count"), pl.col("aten_op_delay").sum(), pl.col("runtime_delay").sum())
    n = v.names
    g = g.select(pl.Series("aten_op_name", [n[i] for i in g["op"].to_list()], dtype=pl.Utf8),
                 pl.Series("kernel_sequence", [" -> ".join(n[i] for i in s) for s in g["seq"].to_list()],
                           dtype=pl.Utf8),
                 "occurrence_count", "aten_op_delay", "runtime_delay")
    return g.group_by("aten_op_name", "kernel_sequence").agg(
        pl.col("occurrence_count").sum().cast(g.schema["occurrence_count"]), pl.col("aten_op_delay").sum(),
        pl.col("runtime_delay").sum())


@guarded
def rank_part(d: RankData) -> dict[str, Any] | None:
    v = hv.view(d)
    hta = _grouped(v, _rows(v, same_thread=False))
    own = _grouped(v, _rows(v, same_thread=True))
    return None if not hta.height and not own.height else {"hta": hta, "own": own.with_columns(rank=pl.lit(d.rank))}


def run_aten_kernels(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def _means(t: pl.DataFrame, scale: float, digits: int | None) -> pl.DataFrame:
    # µs sum first, then the mean: the same float steps as pandas' mean of µs values (rounding to 3 places
    # then lands where HTA's does)
    out = t.with_columns(avg_aten_op_launch_delay=pl.col("aten_op_delay") / scale / pl.col("occurrence_count"),
                         avg_runtime_delay=pl.col("runtime_delay") / scale / pl.col("occurrence_count"))
    if digits is not None:
        out = out.with_columns(pl.Series("avg_aten_op_launch_delay", np.round(out["avg_aten_op_launch_delay"], digits)),
                               pl.Series("avg_runtime_delay", np.round(out["avg_runtime_delay"], digits)))
    return out.drop("aten_op_delay", "runtime_delay")


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [(r, p) for r, p in sorted(parts, key=lambda x: x[0]) if p is not None]
    if not got:
        return with_problems(problems, Result(
            "aten_kernels", skipped="no kernel launched inside an aten:: operator in any rank"))
    hta, acc = [], None
    for r, p in got:  # cumulative over ranks, as HTA 0.5.0 (see the module docstring)
        acc = p["hta"] if acc is None else pl.concat([acc, p["hta"]]).group_by(
            "aten_op_name", "kernel_sequence", maintain_order=True).agg(pl.all().sum())
        hta.append(_means(acc, 1000.0, 3).with_columns(rank=pl.lit(r)))
    own = _means(pl.concat([p["own"] for _, p in got]), 1.0, None).sort(
        ["rank", "occurrence_count"], descending=[False, True])
    cols = ["rank", "aten_op_name", "kernel_sequence", "occurrence_count", "avg_aten_op_launch_delay", "avg_runtime_delay"]
    return with_problems(problems, Result("aten_kernels", tables={"aten_op_kernels": own.select(cols),
                                          "hta_aten_op_kernels": pl.concat(hta).select(cols)}))


ANALYSIS = Analysis(
    name="aten_kernels",
    description="aten operator -> kernels launched, operator and runtime launch delays (HTA parity)",
    run=run_aten_kernels,
    needs=("kernels",),
    rank_part=rank_part, combine=combine, rank_reads=(hv.KEY,),
    view=View("ATen operators and the kernels they launch", tables=(
        TableView("aten_op_kernels", "per operator and kernel sequence (operator on the launch's thread)", (
            Col("rank", "rank", "count"), Col("aten_op_name", "operator"), Col("kernel_sequence", "kernels"),
            Col("occurrence_count", "calls", "count"), Col("avg_aten_op_launch_delay", "operator to first launch", NS),
            Col("avg_runtime_delay", "launch to kernel", NS))),),
        empty="needs aten:: operators launching kernels", optional=True),
)
