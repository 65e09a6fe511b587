"""Frequent kernel sequences: for each CPU operator name, the sequences of kernels its calls launched.

Pattern: the calls of a name at the shallowest nesting depth where that name occurs are the roots;
a kernel belongs to a root when its launch call is nested in it on the same thread, or is the root
(a cudaGraphLaunch runs a whole graph) (kernels by correlation, in device start order). Roots
launching at least ``MIN_PATTERN_LEN`` kernels give a
pattern "operator|kernel|kernel|..."; per pattern: count, summed kernel time and operator time.
Roots of one depth do not overlap on a thread, so each depth is one sorted search for all launches.

- ``hta_kernel_sequences``: HTA's ``get_frequent_cuda_kernel_sequences`` for each operator name
  (hta/analyzers/cuda_kernel_analysis.py:25-120: min_pattern_len 3, kernels on streams > 0 as
  HTA links them, trace_call_graph.py ``get_cpu_gpu_correlation``; µs). HTA takes one name and matches
  every name containing it, and links the autograd thread under the main thread's
  "## backward ##" annotation: where either applies, its depths differ from the ones here;
- ``kernel_sequences`` (rankscope): the same on every stream (ns), most frequent first.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.gpu import htaview as hv
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.rankdata import RankData
from rankscope.model.tables import nesting_depth
from rankscope.model.run import Run

MIN_PATTERN_LEN = 3
HOST_CATS = ("cpu_op", "user_annotation", "python_function")


def _cpu_threads(f: pl.DataFrame) -> pl.DataFrame:
    """CPU events of the threads HTA builds call stacks for (hta/common/types.py:16 ``infer_device_type``:
    a thread whose events all have a stream > 0, or whose pid or tid is 0, is a GPU stream); ``thread``
    numbers their (pid, tid) in sorted order from 1. Group codes in numpy: polars' group_by, join and
    struct rank here held three copies of the frame at the pass's peak (issue 26)."""
    pid, tid, stream = (f[c].to_numpy() for c in ("pid", "tid", "stream"))
    o = np.lexsort((tid, pid))
    new = np.r_[True, (pid[o][1:] != pid[o][:-1]) | (tid[o][1:] != tid[o][:-1])] if len(o) else np.ones(0, bool)
    grp = np.empty(len(o), np.int64)
    grp[o] = np.cumsum(new) - 1
    first = o[new]  # pid and tid are constant within a group
    gpu = (np.bincount(grp, weights=stream <= 0, minlength=len(first)) == 0) | (pid[first] == 0) | (tid[first] == 0)
    keep = (stream == -1) & ~gpu[grp]
    thread = np.unique(grp[keep], return_inverse=True)[1].reshape(-1).astype(np.int64) + 1
    # the columns chosen before the rows: a filter copies every column it is given (most rows stay here)
    return f.select("idx", "nid", "cid", "ts", "dur", "end", "depth").filter(pl.Series(keep)).with_columns(
        thread=pl.Series(thread, dtype=pl.Int64))


def _pairs(roots: pl.DataFrame, launches: pl.DataFrame) -> pl.DataFrame:
    """(root row, kernel row) for every kernel whose launch is nested in a root of the same thread."""
    out = []
    for (depth, thread), r in roots.group_by("depth", "thread"):
        r = r.sort("ts")
        lt = launches.filter(pl.col("thread") == thread)
        if not lt.height:
            continue
        rts, rend = r["ts"].to_numpy(), r["end"].to_numpy()
        lts, lend = lt["ts"].to_numpy(), lt["end"].to_numpy()
        j = np.searchsorted(rts, lts, side="right") - 1
        ok = (j >= 0) & (lend <= rend[np.maximum(j, 0)]) & ((lts < rend[np.maximum(j, 0)]) | (lts == lend))
        out.append(pl.DataFrame({"root": r["idx"].to_numpy()[j[ok]], "k_idx": lt["k_idx"].to_numpy()[ok]}))
    return pl.concat(out) if out else pl.DataFrame(schema={"root": pl.Int64, "k_idx": pl.Int64})


def _linked_depths(v: hv.View, cpu: pl.DataFrame) -> pl.DataFrame:
    """HTA's depths: with exactly one "main" thread (it has ProfilerStep#) and one "bwd" thread (it has
    autograd:: ops), the bwd thread's top-level calls inside a main-thread "## backward ##" annotation (else
    ProfilerStep#) move under it, their subtrees one level below it (hta/common/trace_call_graph.py:
    _infer_stack_label, _link_main_and_bwd_stacks; trace_call_stack.py:432 update_parent_of_first_layer_nodes)."""
    step = v.name_ids("step#", lambda n: n.startswith("ProfilerStep#"))
    grad = v.name_ids("autograd::", lambda n: "autograd::" in n)
    lab = cpu.group_by("thread").agg(pl.col("nid").is_in(step).any().alias("main"),
                                     pl.col("nid").is_in(grad).any().alias("ag"))
    main, bwd = lab.filter("main")["thread"], lab.filter(~pl.col("main") & pl.col("ag"))["thread"]
    if len(main) != 1 or len(bwd) != 1:
        return cpu
    m = cpu.filter(pl.col("thread") == main[0])
    parents = m.filter(pl.col("nid").is_in(v.name_ids("## backward ##", lambda n: n.startswith("## backward ##"))))
    parents = parents if parents.height else m.filter(pl.col("nid").is_in(step))
    b = cpu.filter(pl.col("thread") == bwd[0])
    top = b.filter(pl.col("depth") == 0).sort("ts")
    tts, tend = top["ts"].to_numpy(), top["end"].to_numpy()
    shift = np.full(top.height, -1, np.int64)
    for pts, pend, pdepth in parents.select("ts", "end", "depth").iter_rows():  # annotations: a few per step
        shift[(shift < 0) & (tts >= pts) & (tend <= pend)] = pdepth + 1
    bts = b["ts"].to_numpy()
    j = np.clip(np.searchsorted(tts, bts, side="right") - 1, 0, max(top.height - 1, 0))
    add = np.where(len(tts) > 0, np.maximum(shift[j] if len(tts) else 0, 0), 0)
    full = np.zeros(cpu.height, np.int64)  # b's rows are the bwd thread's rows of cpu, in cpu's order
    full[(cpu["thread"] == bwd[0]).to_numpy()] = add
    return cpu.with_columns(depth=pl.col("depth").cast(pl.Int64) + pl.Series(full))


def sequences(v: hv.View, min_stream: int, hta: bool = False) -> pl.DataFrame:
    """Per operator name and pattern: count, kernel time, operator time (ns); ``hta``: HTA's depths."""
    return named(sequence_codes(v, min_stream, hta), v.names)


def sequence_codes(v: hv.View, min_stream: int, hta: bool = False) -> pl.DataFrame:
    """``sequences`` with the operator and its kernels as name codes (``nid``, list ``seq``)."""
    f = v.frame
    cpu = _cpu_threads(f)
    if hta:  # HTA nests every CPU event of a thread (runtime calls too), then links the autograd thread
        cpu = _linked_depths(v, cpu.with_columns(depth=pl.Series(nesting_depth(
            cpu["thread"].to_numpy(), cpu["ts"].to_numpy(), cpu["dur"].to_numpy(), np.ones(cpu.height, bool)))))
    host = [v.cat_id(c) for c in HOST_CATS]  # operators and annotations nest; a runtime call (one
    # cudaGraphLaunch runs a whole graph) owns the kernels it launched itself
    roots = cpu.filter(pl.col("depth") == pl.col("depth").min().over("nid"))
    k = f.select(pl.col("idx").alias("k_idx"), pl.col("nid").alias("k_nid"), pl.col("ts").alias("k_ts"),
                 pl.col("dur").alias("k_dur"), pl.col("index_correlation").alias("idx"), "stream").filter(
        (pl.col("stream") >= min_stream) & (pl.col("idx") > 0)).drop("stream")  # a filter copies all it is given
    launches = cpu.select("idx", "thread", "ts", "end").join(k, on="idx")
    del cpu  # the pass's peak is here: drop each frame as soon as it is used (issue 26)
    own = k.select(pl.col("idx").alias("root"), "k_idx").join(
        roots.select(pl.col("idx").alias("root"), "cid").filter(~pl.col("cid").is_in(host)).drop("cid"), on="root")
    nesting = roots.select("idx", "ts", "end", "depth", "thread", "cid").filter(pl.col("cid").is_in(host))
    roots = roots.select(pl.col("idx").alias("root"), "nid", "dur")  # all that is read of them from here on
    pairs = pl.concat([_pairs(nesting, launches), own])
    del launches, own, nesting
    pairs = pairs.join(k.drop("idx"), on="k_idx")
    del k
    # roots with enough kernels, each root's kernels in start order: sorted in numpy and only the columns the
    # patterns need gathered (a filter and a sort of the frame held two more copies of it at the part's peak)
    root, k_ts, k_idx = (pairs[c].to_numpy() for c in ("root", "k_ts", "k_idx"))
    o = np.lexsort((k_idx, k_ts, root))
    r = root[o]
    run = np.cumsum(np.r_[True, r[1:] != r[:-1]] if len(r) else np.zeros(0, bool)) - 1
    o = o[np.bincount(run)[run] >= MIN_PATTERN_LEN]
    per = pl.DataFrame({"root": root[o], "k_nid": pairs["k_nid"].to_numpy()[o], "k_dur": pairs["k_dur"].to_numpy()[o]})
    del pairs, root, k_ts, k_idx, o, r, run
    # patterns as lists of name codes; names are joined only once per distinct pattern
    per = per.group_by("root", maintain_order=True).agg(pl.col("k_nid").alias("seq"),
                                                        pl.col("k_dur").sum().alias("gpu"))
    per = per.join(roots, on="root")
    return per.group_by("nid", "seq").agg(pl.len().alias("count"), pl.col("gpu").sum(), pl.col("dur").sum().alias("cpu"))


def named(codes: pl.DataFrame, names: Sequence[str] | dict[int, str],
          made: dict[tuple[int, tuple[int, ...]], pl.Series] | None = None) -> pl.DataFrame:
    """``sequence_codes`` with ``operator`` and ``pattern`` ("operator|kernel|kernel|...") for the codes. A
    pattern can be ~200 KB of text: each is made once, as a chunk of its own, and shared by the tables that
    name the same codes through ``made`` (issue 26: the two tables held the same text twice)."""
    made = {} if made is None else made
    chunks = []
    for n, s in codes.select("nid", "seq").iter_rows():
        key = (n, tuple(s))
        if key not in made:
            made[key] = pl.Series("pattern", [names[n] + "|" + "|".join([names[k] for k in s])], dtype=pl.Utf8)
        chunks.append(made[key])
    pattern = pl.concat(chunks, rechunk=False) if chunks else pl.Series("pattern", [], dtype=pl.Utf8)
    return codes.with_columns(operator=pl.Series([names[n] for n in codes["nid"].to_list()], dtype=pl.Utf8),
                              pattern=pattern).drop("nid", "seq")


def _used_names(names: list[str], *codes: pl.DataFrame) -> dict[int, str]:
    """The names the codes use: a part keeps these, not its patterns' strings (one pattern of a step's
    kernels is ~200 KB of text; they are joined in ``combine``, after the rank's tables are freed: issue 26)."""
    used = set()
    for c in codes:
        used.update(c["nid"].to_list())
        used.update(c["seq"].explode().drop_nulls().unique().to_list())
    return {i: names[i] for i in sorted(used)}


@guarded
def rank_part(d: RankData) -> dict[str, Any] | None:
    v = hv.view(d)
    hta, own = sequence_codes(v, 1, hta=True), sequence_codes(v, 0)
    if not hta.height and not own.height:
        return None
    return {"hta": hta, "own": own, "names": _used_names(v.names, hta, own)}


def run_kernel_sequences(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [(r, p) for r, p in parts if p is not None]
    if not got:
        why = f"no operator launched {MIN_PATTERN_LEN} or more kernels in any rank"
        return with_problems(problems, Result("kernel_sequences", skipped=why))
    got.sort(key=lambda rp: rp[0])  # each rank's rows in the table's order, ranks ascending: the patterns'
    # text is made in its final order (sorting the named table would copy it: issue 26)
    made: dict[int, dict[Any, pl.Series]] = {r: {} for r, _ in got}  # a rank's patterns, shared by both tables
    hta = pl.concat([named(_ordered(p["hta"], p["names"], "operator"), p["names"], made[r]).with_columns(
        rank=pl.lit(r)) for r, p in got]).select(
        "rank", "operator", "pattern", "count", hv.to_us(pl.col("gpu")).alias("GPU kernel duration (us)"),
        hv.to_us(pl.col("cpu")).alias("CPU op duration (us)"))
    own = pl.concat([named(_ordered(p["own"], p["names"], "gpu"), p["names"], made[r]).with_columns(
        rank=pl.lit(r)) for r, p in got]).select(
        "rank", "operator", "pattern", "count", pl.col("gpu").alias("kernel_time"), pl.col("cpu").alias("operator_time"))
    return with_problems(problems, Result("kernel_sequences", tables={"kernel_sequences": own,
                                                                      "hta_kernel_sequences": hta}))


def _ordered(codes: pl.DataFrame, names: Sequence[str] | dict[int, str], by: str) -> pl.DataFrame:
    """One rank's codes in its table's order: by operator name, then count descending ("operator"), or by count,
    then kernel time, descending ("gpu")."""
    if by == "operator":
        op = pl.Series([names[n] for n in codes["nid"].to_list()], dtype=pl.Utf8)
        return codes[op.to_frame("o").with_columns(codes["count"]).with_row_index("_i").sort(
            ["o", "count"], descending=[False, True])["_i"]]
    return codes.sort(["count", "gpu"], descending=[True, True])


ANALYSIS = Analysis(
    name="kernel_sequences",
    description="frequent kernel sequences launched per operator (HTA parity)",
    run=run_kernel_sequences,
    needs=("kernels",),
    rank_part=rank_part, combine=combine, rank_reads=(hv.KEY,),
    view=View("Frequent kernel sequences per operator", tables=(
        TableView("kernel_sequences", "per operator and kernel sequence", (
            Col("rank", "rank", "count"), Col("operator", "operator"), Col("count", "calls", "count"),
            Col("kernel_time", "kernel time", NS), Col("operator_time", "operator time", NS), Col("pattern", "sequence"))),),
        empty="no operator launched 3 or more kernels", optional=True),
)
