"""One rank's events as Holistic Trace Analysis 0.5.0 loads them: the input of every ``hta_*`` table.

Pattern: HTA's ``TraceAnalysis`` load replayed on rankscope's cached columns (numpy / polars on name
and category codes, strings only per distinct name), so that HTA's analyses can be recomputed
exactly (file:line of hta 0.5.0 as installed):

1. events of category "Trace" are dropped (common/trace_parser.py:254);
2. ns-resolution traces: start rounded up, end rounded down to whole µs (trace_parser.py:319-336);
3. ``index_correlation``: each CPU event with a correlation points at the GPU event of the same
   correlation and back, the last pair winning (common/trace.py:62-131);
4. GPU events are ``stream >= 0 and correlation >= 0`` or named Event/Context Sync
   (common/trace_filter.py:320-333); with two or more ProfilerStep names, CPU events from the start
   of the last step on are dropped and GPU events kept once per surviving CPU event of their
   correlation (trace.py:705-731); the frame is then those GPU events followed by the CPU events;
5. times are aligned to the earliest event of all ranks (trace.py:696): ``ts`` here is relative to the
   rank's earliest event, ``tmin`` (raw trace clock) lets ``combine`` steps align across ranks and
   ``base`` (baseTimeNanoseconds) gives back rankscope's clock: ts + tmin + base.

Times are int64 ns on HTA's (rounded) µs grid; HTA's values are these / 1000.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import polars as pl

from rankscope.analysis.rankdata import MAKERS, Maker

if TYPE_CHECKING:
    from rankscope.analysis.rankdata import RankData

SYNC_NAMES = ("Event Sync", "Context Sync")
# hta/utils/utils.py:56, 72, 88: kernel types by name (re.match: anchored at the start)
_COMM = re.compile(r"^nccl.*Kernel")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
COMPUTATION, COMMUNICATION, MEMORY, OTHER = "COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"


def kernel_type(name: str) -> str:
    """HTA's kernel type of a name (utils.py:109 ``get_kernel_type``)."""
    if _COMM.match(name):
        return COMMUNICATION
    if _MEMORY.match(name):
        return MEMORY
    return OTHER if _NOT_COMPUTE.match(name) else COMPUTATION


def memory_kind(name: str) -> str:
    """HTA's memory-copy type of a name (utils.py:120 ``get_memory_kernel_type``)."""
    if name[:6] == "Memset":
        return "Memset"
    return name[:11] if name[:6] == "Memcpy" else "Memcpy Unknown"


@dataclass
class View:
    """The frame (columns idx, nid, cid, ts, dur, end, pid, tid, stream, correlation, depth (rankscope's
    nesting on the thread), gpu, index_correlation) with its name and category dictionaries (``nid`` /
    ``cid`` index them)."""

    frame: pl.DataFrame
    names: list[str]
    cats: list[str]
    tmin: int
    base: int
    _memo: dict[Any, Any] = field(default_factory=dict)

    def name_ids(self, key: str, pred: Callable[[str], bool]) -> list[int]:
        """Codes of the names for which ``pred`` holds (computed once per distinct name)."""
        if key not in self._memo:
            self._memo[key] = [i for i, n in enumerate(self.names) if pred(n)]
        return self._memo[key]

    def name_map(self, key: str, fn: Callable[[str], str]) -> pl.DataFrame:
        """(nid, value) for every name: a join table for per-name derived strings."""
        if key not in self._memo:
            self._memo[key] = pl.DataFrame({"nid": np.arange(len(self.names), dtype=np.int32),
                                            key: [fn(n) for n in self.names]})
        return self._memo[key]

    def text_ids(self) -> np.ndarray:
        """Per name code, the first code of the same text (a missing name is "", which may be a name too)."""
        if "_text" not in self._memo:
            first: dict[str, int] = {}
            self._memo["_text"] = np.array([first.setdefault(n, i) for i, n in enumerate(self.names)], dtype=np.int32)
        return self._memo["_text"]

    def cat_id(self, cat: str) -> int:
        return self.cats.index(cat) if cat in self.cats else -1

    def with_names(self, df: pl.DataFrame, col: str = "name") -> pl.DataFrame:
        """``nid`` as a string column ``col``."""
        return df.join(self.name_map("_name", lambda n: n).rename({"_name": col}), on="nid", how="left",
                       maintain_order="left")

    def kernel_types(self, df: pl.DataFrame) -> pl.DataFrame:
        return df.join(self.name_map("kernel_type", kernel_type), on="nid", how="left", maintain_order="left")


def codes(col: Any) -> tuple[np.ndarray, list[str]]:
    """A dictionary column as (codes, strings); a missing value gets the code of a last "" entry."""
    a = col.combine_chunks() if hasattr(col, "combine_chunks") else col
    idx = a.indices.fill_null(len(a.dictionary)).to_numpy(zero_copy_only=False).astype(np.int32)
    return idx, [str(s) for s in a.dictionary.to_pylist()] + [""]


def _rounded(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) in ns on HTA's grid: whole µs where the trace has fractions (trace_parser.py:330-336)."""
    if not ((ts % 1000).any() or (dur % 1000).any()):
        return ts, ts + dur
    # HTA adds the float µs start and duration, then ceils the start and floors the end
    ts_f = (ts // 1000).astype(np.float64) + (ts % 1000) / 1000.0
    end_f = ts_f + dur / 1000.0
    return np.ceil(ts_f).astype(np.int64) * 1000, np.floor(end_f).astype(np.int64) * 1000


def _index_correlation(idx: np.ndarray, corr: np.ndarray, gpu: np.ndarray) -> np.ndarray:
    """trace.py:62: 0 = has a correlation, nothing linked; -1 = none; else the linked event's idx."""
    out = np.minimum(corr, 0)
    has = corr != -1
    c = pl.DataFrame({"i": np.flatnonzero(has), "idx": idx[has], "correlation": corr[has], "gpu": gpu[has]})
    pairs = c.filter(~pl.col("gpu")).join(c.filter(pl.col("gpu")), on="correlation", suffix="_g")
    if pairs.height:  # df.loc[index_x] = index_y: with several pairs the last assignment stands
        for a, b in (("i", "idx_g"), ("i_g", "idx")):
            last = pairs.group_by(a).agg(pl.col(b).last())
            out[last[a].to_numpy()] = last[b].to_numpy()
    return out


def build(d: "RankData") -> View:
    """The rank's frame as HTA loads it, ordered as HTA's, with its earliest start ``tmin``. ``idx`` is the
    event's row in the rank's events table + 1 (file order; bytes and bandwidth stay there: ``column``).
    The rows that stay are chosen on numpy first and each column is gathered once (building the whole
    frame and then filtering it held two frames: the pass's largest table after the events, issue 26)."""
    ev = d.events
    info = d.run.ranks.get(d.rank) if hasattr(d.run.ranks, "get") else None
    base = int(getattr(info, "base_time_ns", 0) or 0)
    nid, names = codes(ev.column("name"))
    cid, cats = codes(ev.column("cat"))
    rows = np.flatnonzero(cid != (cats.index("Trace") if "Trace" in cats else -2))
    nid, cid = nid[rows], cid[rows]
    stream, corr = d.col("stream")[rows], d.col("correlation")[rows]
    gpu = ((stream >= 0) & (corr >= 0)) | np.isin(nid, [i for i, n in enumerate(names) if n in SYNC_NAMES])
    # the links first, beside as few full-length arrays as possible (its join is the build's largest step)
    ic = _index_correlation(rows + 1, corr, gpu)
    ts, end = _rounded(d.col("ts")[rows] - base, d.col("dur")[rows])
    tmin = int(ts.min()) if len(ts) else 0
    keep = _kept(gpu, corr, ts - tmin, nid, [i for i, n in enumerate(names) if "ProfilerStep" in n])
    # each column is gathered in the frame's order and its full-length array dropped as soon as it is used
    # (a frame's worth of arrays and the frame are never both held)
    series: list[pl.Series] = []

    def add(name: str, a: np.ndarray) -> None:
        series.append(pl.Series(name, a if keep is None else a[keep]))

    add("idx", rows + 1)
    add("nid", nid)
    add("cid", cid)
    del nid, cid
    add("ts", ts - tmin)
    add("dur", end - ts)
    add("end", end - tmin)
    del ts, end
    add("pid", d.col("pid")[rows])
    add("tid", d.col("tid")[rows])
    add("stream", stream)
    add("correlation", corr)
    del stream, corr
    add("depth", d.col("depth")[rows])
    add("gpu", gpu)
    add("index_correlation", ic)
    del rows, gpu, ic
    frame = pl.DataFrame(series)
    return View(frame, names, cats, tmin, base)


def column(d: "RankData", name: str, idx: Any) -> np.ndarray:
    """An events column (``bytes``, ``bandwidth``, ...) at frame rows ``idx``."""
    return d.col(name)[np.asarray(idx) - 1]


def _kept(gpu: np.ndarray, corr: np.ndarray, ts: np.ndarray, nid: np.ndarray, steps: list[int]) -> np.ndarray | None:
    """The rows HTA's load keeps, in its order, where the trace has two or more ProfilerSteps (trace.py:705-731;
    None: all rows as they are): the GPU events, each once per CPU event of its correlation that starts before
    the last step (an inner merge: with none, dropped), then those CPU events."""
    if len(steps) < 2:
        return None
    cpu = np.flatnonzero(~gpu)
    at_step = cpu[np.isin(nid[cpu], steps)]
    cpu = cpu[ts[cpu] < ts[at_step].max()] if len(at_step) else cpu[:0]
    values, counts = np.unique(corr[cpu], return_counts=True)
    g = np.flatnonzero(gpu)
    if not len(values):
        return cpu
    at = np.minimum(np.searchsorted(values, corr[g]), len(values) - 1)
    return np.concatenate([np.repeat(g, np.where(values[at] == corr[g], counts[at], 0)), cpu])


# The view's memo key: an analysis whose rank part reads only the view declares ``rank_reads=(KEY,)`` and
# runs after the rank's events are freed (``registry.rank_parts``).
KEY = "htaview"


def view(d: "RankData") -> View:
    """``build`` once per rank (shared by every GPU analysis of the per-rank pass)."""
    return d.memo(KEY, lambda: build(d))


# the pass builds the view itself before it frees the events (``RankData.prepare``), from these columns
MAKERS[KEY] = Maker(build, ("name", "cat", "ts", "dur", "stream", "correlation", "pid", "tid", "depth"))


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
