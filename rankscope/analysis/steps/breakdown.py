"""Per-rank × per-step time breakdown that sums to each step's wall time.

Pattern: every step window is split into elementary segments, each attributed to exactly one
class by priority: compute > exposed communication > data wait > idle (free). Communication
that runs under compute is "overlapped".

- GPU traces: compute = non-communication kernels, memcpy and memset; communication = NCCL /
  RCCL / HCCL kernels (by name, or linked to a communication CPU op: see ``classify``); data
  wait = host data-loading spans (``DEFAULT_DATA_SPANS``) while the device does neither.
- CPU-only traces (gloo): each instant of a thread that runs the steps takes the class of its innermost
  span (``innermost``): compute = host operators, communication = ``gloo:*`` / collective spans on any
  thread and the waits inside a framework's spans (FSDP, pipeline stages, an autograd Function around
  all_to_all), data wait = data-loading spans and the operators inside them (decode, collate, augmentation).
- A rank without ``ProfilerStep#N`` markers gets one step spanning its whole window (step -1);
  ``Result.summary["whole_window_ranks"]`` says which ranks these are.

Extra columns (ns): ``comm_exposed_no_recv`` (exposed communication that is not a receive),
``bubble`` (receive time, Ascend's pipeline bubble), ``preparing`` (step start -> first compute or
communication), ``host_idle`` (time the step's host thread runs no operator), and the MindInsight
iteration trajectory: ``iteration_gap`` (step start -> first compute), ``fwd_bwd`` (first -> last
compute) and ``iteration_tail`` (last compute -> step end). ``ascend_table`` converts to the
Ascend ``step_trace_time`` columns in µs. Needs one rank's events at a time.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pyarrow as pa

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.classify import DEVICE_KINDS, HOST_KINDS, col, dict_test, is_recv
from rankscope.analysis.intervals import Intervals, coverage, merge, per_window
from rankscope.analysis.steps.innermost import COMM, COMPUTE, DATA, innermost
from rankscope.analysis.rankdata import RankData, data_of
from rankscope.model.run import Run

COLUMNS = ["rank", "step", "ts", "end", "wall", "computing", "communication", "overlapped",
           "comm_exposed", "data_wait", "free", "complete", "source"]
EXTRA = ["comm_exposed_no_recv", "bubble", "preparing", "host_idle", "iteration_gap", "fwd_bwd",
         "iteration_tail"]
ASCEND = ["Step", "Type", "Index", "Computing", "Communication(Not Overlapped)", "Overlapped",
          "Communication", "Free", "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)",
          "Preparing", "Data Wait", "Host Idle"]


# Spans that mark data loading: DataLoader's own (``enumerate(DataLoader)#_SingleProcessDataLoaderIter
# .__next__``) and user annotations named like data loading (``record_function("data")``, "get_batch",
# "load_batch", "next_batch", "fetch_batch", "prefetch", "input_pipeline", "data_loading", ...), as words
# (so "metadata" or "update" do not match). ``RANKSCOPE_DATA_SPANS`` (a regular expression, searched in
# the name, case-insensitive) replaces the default; the breakdown's summary names the one used.
DEFAULT_DATA_SPANS = (r"DataLoader|(^|[^a-z0-9])(data|dataloader|data_?load(ing|er)?|(get|load|next|fetch|read)_?batch"
                      r"|prefetch|input_?pipeline)([^a-z0-9]|$)")


def data_spans_pattern() -> str:
    """The data-loading span pattern in force (see DEFAULT_DATA_SPANS)."""
    return os.environ.get("RANKSCOPE_DATA_SPANS") or DEFAULT_DATA_SPANS


def _is_data(names: np.ndarray) -> np.ndarray:
    rx = re.compile(data_spans_pattern(), re.IGNORECASE)
    return np.fromiter((rx.search(n) is not None for n in names.astype(str)), bool, len(names))


def _inside(ts: np.ndarray, end: np.ndarray, iv: Intervals) -> np.ndarray:
    """Rows whose [ts, end] lies within one of the (merged) intervals ``iv``."""
    s, e = merge(*iv)
    if len(s) == 0:
        return np.zeros(len(ts), bool)
    j = np.searchsorted(s, ts, side="right") - 1
    return (j >= 0) & (end <= e[np.clip(j, 0, None)])


def _is_step(names: np.ndarray) -> np.ndarray:
    return np.char.startswith(names.astype(str), "ProfilerStep#")


def interval_sets(ev: pa.Table, step_tids: np.ndarray, rd: RankData | None = None
                  ) -> tuple[dict[str, Intervals], str]:
    """Compute / comm / recv / data / host interval sets of one rank and which side they come from."""
    d = rd or _Adhoc(ev)
    ts, dur = d.col("ts"), d.col("dur")
    end = ts + dur
    comm = d.comm()
    host = d.kind_in(HOST_KINDS)
    # annotations and Python functions only: an operator named like data ("aten::set_data") is compute
    data = d.kind_in(("user_annotation", "python_function")) & d.memo("is_data", lambda: dict_test(ev, "name", _is_data))
    device = d.kind_in(DEVICE_KINDS)
    on_step = np.isin(d.col("tid"), step_tids) if len(step_tids) else np.ones(len(ts), bool)
    is_step = d.memo("is_step", lambda: dict_test(ev, "name", _is_step))
    host_busy = host & on_step & ~is_step
    recv = comm & dict_test(ev, "name", is_recv)
    if device.any():
        sets = {"compute": device & ~comm, "comm": device & comm, "data": data, "recv": device & recv}
        out = {k: (ts[m], end[m]) for k, m in sets.items()}
        source = "device"
    else:
        out = {k: (ts[m], end[m]) for k, m in {"comm": host & comm, "data": data, "recv": host & recv}.items()}
        # each instant of a step thread takes the class of its innermost span (innermost.py): a wait inside a
        # framework's span (FSDP::pre_forward > FSDP::all_gather) is communication, not compute; operators run
        # inside a data-loading span (decode, collate, augmentation) are data loading
        in_data = host_busy & _inside(ts, end, (ts[data], end[data])) if data.any() else data
        cls = np.where(comm, COMM, np.where(data | in_data, DATA, COMPUTE))
        off = host & comm & ~on_step
        by = innermost(ts[host_busy], end[host_busy], d.col("depth")[host_busy], d.col("tid")[host_busy],
                       cls[host_busy], (ts[off], end[off]))
        out["compute"] = by[COMPUTE]
        out["comm"] = (np.concatenate([out["comm"][0], by[COMM][0]]), np.concatenate([out["comm"][1], by[COMM][1]]))
        source = "host"
    out["host"] = (ts[host_busy], end[host_busy])
    return out, source


class _Adhoc(RankData):
    """RankData over an events table given directly (``interval_sets`` called without a rank)."""

    def __init__(self, ev: pa.Table) -> None:
        self._tables, self._memo = {"events": ev}, {}


def _first_last(iv: Intervals, ws: np.ndarray, we: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First start and last end of merged intervals clipped to each window (ws/we when none)."""
    s, e = merge(*iv)
    if len(s) == 0:
        return ws.copy(), ws.copy()
    j = np.clip(np.searchsorted(e, ws, side="right"), 0, len(s) - 1)
    first = np.clip(np.maximum(s[j], ws), None, we)
    first = np.where(e[j] > ws, first, we)
    k = np.clip(np.searchsorted(s, we, side="left") - 1, 0, len(s) - 1)
    last = np.clip(np.minimum(e[k], we), ws, None)
    last = np.where(s[k] < we, last, ws)
    none = first >= we
    return np.where(none, ws, first), np.where(none, ws, np.maximum(last, first))


def _windows(d: RankData) -> tuple[pa.Table, bool]:
    steps, ev = d.table("steps"), d.events
    if steps.num_rows or ev.num_rows == 0:
        return steps, False
    ts, end = d.col("ts"), d.col("ts") + d.col("dur")
    lo, hi = int(ts.min()), int(end.max())
    return pa.table({"step": [-1], "ts": [lo], "end": [hi], "host_end": [hi], "complete": [True]}), True


def rank_breakdown(run: Run, rank: int, data: RankData | None = None) -> tuple[pa.Table | None, bool]:
    """The breakdown rows of one rank, and whether its whole window was used as one step."""
    rd = data_of(run, rank, data)
    ev = rd.events
    steps, whole = _windows(rd)
    if steps.num_rows == 0:
        return None, False
    is_step = rd.memo("is_step", lambda: dict_test(ev, "name", _is_step))
    step_tids = np.unique(rd.col("tid")[is_step])
    sets, source = interval_sets(ev, step_tids, rd)
    ws, we = col(steps, "ts").astype(np.int64), col(steps, "end").astype(np.int64)
    n = len(ws)
    w, length, cov = coverage(sets, ws, we)
    c, m, d, rv, h = cov["compute"], cov["comm"], cov["data"], cov["recv"], cov["host"]

    def pw(mask: np.ndarray) -> np.ndarray:
        return per_window(w, length, mask, n)

    computing, exposed, data_wait = pw(c), pw(m & ~c), pw(d & ~c & ~m)
    wall = we - ws
    busy = (np.concatenate([sets["compute"][0], sets["comm"][0]]),
            np.concatenate([sets["compute"][1], sets["comm"][1]]))
    first_busy, _ = _first_last(busy, ws, we)
    first_c, last_c = _first_last(sets["compute"], ws, we)
    return pa.table({
        "rank": np.full(n, rank, dtype=np.int64), "step": col(steps, "step").astype(np.int64),
        "ts": ws, "end": we, "wall": wall, "computing": computing, "communication": pw(m),
        "overlapped": pw(m & c), "comm_exposed": exposed, "data_wait": data_wait,
        "free": wall - computing - exposed - data_wait, "complete": col(steps, "complete").astype(bool),
        "source": [source] * n,
        "comm_exposed_no_recv": pw(m & ~c & ~rv), "bubble": pw(rv), "preparing": first_busy - ws,
        "host_idle": wall - pw(h), "iteration_gap": first_c - ws, "fwd_bwd": last_c - first_c,
        "iteration_tail": we - last_c,
    }), whole


def stage_groups(run: Run) -> list[list[int]] | None:
    """Ranks of each pipeline stage when the run's layout names ``pp`` > 1 (run.json or a rank's
    meta.json ``layout``). Stage k holds ranks [k·W/pp, (k+1)·W/pp): pipeline parallelism as the
    outermost dimension of the rank order (Megatron's default)."""
    metas = [run.manifest] + [i.meta for i in run.ranks.values()]
    layout = next((m["layout"] for m in metas if isinstance(m.get("layout"), dict)), None)
    try:
        pp = int((layout or {}).get("pp") or 0)
    except (TypeError, ValueError):
        return None
    world = run.world_size or (max(run.rank_ids) + 1 if run.rank_ids else 0)
    if pp <= 1 or world % pp:
        return None
    per = world // pp
    return [list(range(k * per, (k + 1) * per)) for k in range(pp)]


def _stage_rows(t: pa.Table, stages: list[list[int]]) -> pa.Table:
    """msprof-analyze's "stage" rows: per (step, stage), the maximum of every column over the
    stage's rank rows; Index is the stage's ranks as "(0,1,2,3)"."""
    rank, step = col(t, "Index"), col(t, "Step")
    stage_of = np.full(int(rank.max()) + 1, -1)
    for k, g in enumerate(stages):
        stage_of[[r for r in g if r <= rank.max()]] = k
    k = stage_of[rank]
    keep = k >= 0
    key = np.unique(np.stack([step[keep], k[keep]], axis=1), axis=0, return_inverse=True)
    (pairs, inv) = key[0], key[1].reshape(-1)
    nums = {c: np.full(len(pairs), -np.inf) for c in ASCEND[3:]}
    for c in nums:
        np.maximum.at(nums[c], inv, col(t, c)[keep])
    label = ["(" + ",".join(map(str, stages[s])) + ")" for s in pairs[:, 1]]
    return pa.table({"Step": pairs[:, 0], "Type": ["stage"] * len(pairs), "Index": label, **nums})


def ascend_table(bd: pa.Table, stages: list[list[int]] | None = None) -> pa.Table:
    """Ascend ``step_trace_time`` columns (µs) from the breakdown; Free includes data wait.

    With ``stages`` (``stage_groups``) "stage" rows follow the "rank" rows and Index becomes a
    string column ("3" for a rank, "(0,1,2,3)" for a stage), as in cluster_step_trace_time.csv."""
    t = _rank_rows(bd)
    if not stages or t.num_rows == 0:
        return t
    st = _stage_rows(t, stages)
    t = t.set_column(2, "Index", pa.array([str(i) for i in col(t, "Index")]))
    return pa.concat_tables([t, st.select(t.column_names).cast(t.schema)])


def _rank_rows(bd: pa.Table) -> pa.Table:
    def us(name: str) -> np.ndarray:
        return col(bd, name).astype(np.float64) / 1000.0

    free = us("free") + us("data_wait")
    return pa.table({
        "Step": col(bd, "step"), "Type": ["rank"] * bd.num_rows, "Index": col(bd, "rank"),
        "Computing": us("computing"), "Communication(Not Overlapped)": us("comm_exposed"),
        "Overlapped": us("overlapped"), "Communication": us("communication"), "Free": free,
        "Stage": us("wall") - us("bubble"), "Bubble": us("bubble"),
        "Communication(Not Overlapped and Exclude Receive)": us("comm_exposed_no_recv"),
        "Preparing": us("preparing"), "Data Wait": us("data_wait"), "Host Idle": us("host_idle"),
    })


def rank_part(d: RankData) -> tuple[pa.Table | None, bool]:
    """Per-rank step of the shared pass (``registry.per_rank_pass``)."""
    return rank_breakdown(d.run, d.rank, d)


def run_breakdown(run: Run, results: dict[str, Result]) -> Result:
    """Breakdown of every rank (one rank's events in memory at a time)."""
    return combine(run, [(r, rank_breakdown(run, r)) for r in run.rank_ids], results)


def combine(run: Run, per_rank: list[tuple[int, tuple[pa.Table | None, bool]]], results: dict[str, Result]) -> Result:
    """The ``breakdown`` result from the per-rank parts."""
    parts, whole = [], []
    for r, (t, w) in per_rank:
        if t is not None:
            parts.append(t)
        if w:
            whole.append(r)
    if not parts:
        return Result("breakdown", skipped="no events in any rank")
    table = pa.concat_tables(parts)
    have = set(table.column("rank").to_pylist())
    summary: dict = {"ranks_without_steps": whole + [r for r in run.rank_ids if r not in have],
                     "whole_window_ranks": whole}
    if whole:
        summary["note"] = (f"ranks {whole} have no ProfilerStep#N markers: the whole captured window "
                           "is reported as one step (step -1)")
    stages = stage_groups(run)
    if stages:
        summary["pipeline_stages"] = stages
    return Result("breakdown", tables={"breakdown": table, "step_trace_time": ascend_table(table, stages)},
                  summary=summary)


# The breakdown's columns in the order a person reads them (the report, the rank page and the trajectory
# draw these).
SHOWN = (Col("rank", "rank", "count"), Col("step", "step", "count"), Col("wall", "step time", NS),
         Col("computing", "compute", NS), Col("comm_exposed", "exposed communication", NS),
         Col("overlapped", "overlapped communication", NS), Col("data_wait", "data wait", NS),
         Col("free", "idle", NS))

ANALYSIS = Analysis(
    name="breakdown",
    description="per-rank × per-step time breakdown (compute, exposed comm, data, idle)",
    run=run_breakdown,
    needs=("steps",),
    rank_part=rank_part, combine=combine,
    view=View("Step time breakdown (compute, exposed communication, data wait, idle)", (
        Col("whole_window_ranks", "ranks without step markers (their whole capture counts as one step)", "ranks"),),
        (TableView("breakdown", "per rank and step (ms)", SHOWN),),
        "no steps: profile with prof.step() once per training step", place="overview"),
)
