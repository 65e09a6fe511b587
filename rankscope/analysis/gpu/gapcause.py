"""Why a device stream sat idle, gap by gap, on one rank (vectorized: sorts and searches, no loop per event).

Pattern: per (device, stream), the device events (kernels, memcpy, memset) in start order; a gap runs from
the latest end of the earlier events to the start of the next event K. Its cause, in this order:

1. a dependency on another stream: K had been launched (its runtime call, by correlation, started) before an
   event X on another stream of the device ended, and K started within ``DEP_TOL_NS`` after X's end (a
   ``cudaStreamWaitEvent``): "collective" when X is a communication kernel (``classify.comm_mask``: its end
   is set by its last peer), else "other" (event X). K itself a communication kernel launched in time, with
   no such X: "collective" too;
2. the launch came late (its call started after the stream went idle: HTA's host wait; on Ascend with torch_npu's
   task queue the call is the Dequeue of the operator's Enqueue, ``deps.taskqueue``). What held the
   launching thread last before it, when no other launch of that thread came in between: a sync call that
   returned inside the gap (``*Synchronize``, a blocking ``cudaMemcpy``; ``.item()`` is a copy then a
   ``cudaStreamSynchronize``) → "sync"; a data-loading span (the breakdown's ``DEFAULT_DATA_SPANS``)
   overlapping the gap → "data"; a collective run by the host (gloo's own threads: its annotation span on any
   thread of the rank, or the one the launch came from), in progress as the stream ran dry or over half the
   late part, that ended inside the gap at most ``WAKE_NS`` before the launch, or was still open at the launch
   and closed within ``LATE_END_NS`` (gloo closes its span after waking the waiter) → "collective" (the
   launching thread waited for it, untraced: DDP's backward on CUDA with gloo); the later-ending wins. Else
   "host" (CPU-bound, Python overhead; event: the innermost host span running half-way through the late part);
3. else "other" (launched in time, no dependency seen; event: K).

``device_idle``: the part of the gap when no stream of the device ran. Each such instant is given to the
stream whose event ended it, so the column sums to the device's idle time. Times are int64 ns. Per-thread
and per-device searches use composite keys (group index × width + time) over one sorted array.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.classify import DEVICE_KINDS, HOST_KINDS, dict_test
from rankscope.analysis.deps import taskqueue
# a launch this soon after a host collective ended came from a thread that waited for it: the critical path's
# wake-up bound (tests/fixtures/runs/gpu_gloo_data: 0.2 ms from gloo's all-reduce end to DDP's gradient copy)
from rankscope.analysis.deps.timed import LATE_END_NS, WAKE_NS
from rankscope.analysis.intervals import merge
from rankscope.analysis.rankdata import RankData
from rankscope.model.schema import QUEUE_IDS

CAUSES = ("host", "sync", "collective", "data", "other")
DEP_TOL_NS = 20_000  # cross-stream wait latency bound (end of X → start of K); H100: 1-4 µs (tests/fixtures/gpu)
SYNC_RE = re.compile(r"Synchronize|^(cuda|hip)Memcpy(2D|3D)?$|^cuMemcpy(DtoH|HtoD|DtoD)?(_v2)?$")
_MIN = np.iinfo(np.int64).min


@dataclass
class Keys:
    """Composite keys: group index × width + (t − t0), so one sorted array answers per-group searches."""

    t0: int
    width: int

    def of(self, group: np.ndarray, t: np.ndarray) -> np.ndarray:
        return group.astype(np.int64) * self.width + (t - self.t0)


class Spans:
    """Host spans of a rank by nesting depth: ``at(key)`` is the innermost span containing each key."""

    def __init__(self, rows: np.ndarray, ks: np.ndarray, ke: np.ndarray, depth: np.ndarray) -> None:
        self.levels = []
        for lv in np.unique(depth):
            sel = depth == lv
            o = np.argsort(ks[sel], kind="stable")
            self.levels.append((rows[sel][o], ks[sel][o], ke[sel][o]))

    def at(self, q: np.ndarray, lo: np.ndarray | None = None, hi: np.ndarray | None = None) -> np.ndarray:
        """The innermost span containing each key ``q`` (-1: none); with ``lo`` / ``hi``, the innermost that
        also covers half of [lo, hi) or more (the span that explains that stretch of time)."""
        best = np.full(len(q), -1, np.int64)
        for rows, ks, ke in self.levels:  # one search per depth level (tens), vectorized over the queries
            j = np.searchsorted(ks, q, side="right") - 1
            jj = np.clip(j, 0, None)
            hit = (j >= 0) & (ke[jj] > q)
            if lo is not None and hi is not None:
                hit &= 2 * (np.minimum(ke[jj], hi) - np.maximum(ks[jj], lo)) >= hi - lo
            best = np.where(hit, rows[jj], best)
        return best


def _dense(x: np.ndarray) -> np.ndarray:
    return np.unique(x, return_inverse=True)[1].astype(np.int64)


def launch_rows(d: RankData, dev: np.ndarray) -> np.ndarray:
    """The runtime call (row) of each device row, by correlation (-1: none or not a row)."""
    corr = d.col("correlation")
    dev = np.asarray(dev, np.int64)
    c = np.where(dev >= 0, corr[np.clip(dev, 0, None)], -1)
    rt = np.flatnonzero(d.kind_in(("runtime",)) & (corr >= 0))
    out = np.full(len(dev), -1, np.int64)
    if len(rt):
        o = rt[np.argsort(corr[rt], kind="stable")]
        pos = np.clip(np.searchsorted(corr[o], c), 0, len(o) - 1)
        ok = (corr[o][pos] == c) & (c >= 0) & ~np.isin(dev, o)
        out[ok] = o[pos][ok]
    return _dequeued(d, dev, c, out)


def _named(d: RankData, prefix: str) -> np.ndarray:
    """Per row: its name starts with ``prefix`` (memoized per rank)."""
    return d.memo(("named", prefix), lambda: dict_test(d.events, "name", lambda n: np.char.startswith(n.astype(str),
                                                                                                      prefix)))


def _dequeued(d: RankData, dev: np.ndarray, c: np.ndarray, out: np.ndarray) -> np.ndarray:
    """With torch_npu's task queue, a device row that torch_npu links to an operator was launched by the Dequeue of
    that operator's Enqueue (``deps.taskqueue``): that Dequeue is its launch call."""
    corr = d.col("correlation")
    if not (corr >= QUEUE_IDS).any():
        return out
    qf = taskqueue.pairs(_named(d, taskqueue.ENQUEUE), _named(d, taskqueue.DEQUEUE), corr)
    host = np.flatnonzero((corr >= 0) & (corr < QUEUE_IDS) & (d.col("stream") < 0) & d.kind_in(HOST_KINDS))
    ts = d.col("ts")
    host, deq = taskqueue.dequeue_of(qf, host, d.col("tid"), ts, ts + d.col("dur"))
    o = np.argsort(corr[host], kind="stable")
    hc = corr[host][o]
    pos = np.clip(np.searchsorted(hc, c), 0, max(len(hc) - 1, 0))
    ok = (out < 0) & (c >= 0) & (len(hc) > 0)
    ok[ok] = hc[pos[ok]] == c[ok]
    out[ok] = deq[o][pos[ok]]
    return out


def _stream_gaps(ts: np.ndarray, end: np.ndarray, grp: np.ndarray, keys: Keys) -> tuple[np.ndarray, ...]:
    """(position in the device rows, gap start, gap end) of every positive gap, per stream group."""
    o = np.lexsort((end, ts, grp))
    base = grp[o] * keys.width
    acc = np.maximum.accumulate(base + (end[o] - keys.t0)) - base + keys.t0  # running max end per group
    first = np.r_[True, grp[o][1:] != grp[o][:-1]]
    prev = np.r_[_MIN, acc[:-1]]
    ok = ~first & (ts[o] > prev)
    return o[ok], prev[ok], ts[o][ok]


def _dependency(g0: np.ndarray, g1: np.ndarray, gg: np.ndarray, lts: np.ndarray, end: np.ndarray, grp: np.ndarray,
                dev_of_grp: np.ndarray) -> np.ndarray:
    """For each gap, the device row (position) on another stream of its device whose end released it (-1)."""
    best, best_end = np.full(len(g0), -1, np.int64), np.full(len(g0), _MIN, np.int64)
    for o in range(len(dev_of_grp)):  # one pass per stream (few), vectorized over the gaps
        rows = np.flatnonzero(grp == o)
        q = np.flatnonzero((dev_of_grp[gg] == dev_of_grp[o]) & (gg != o))
        if not len(rows) or not len(q):
            continue
        rows = rows[np.argsort(end[rows], kind="stable")]
        j = np.searchsorted(end[rows], g1[q], side="right") - 1
        x = rows[np.clip(j, 0, None)]
        xe = end[x]
        ok = (j >= 0) & (xe >= g1[q] - DEP_TOL_NS) & (xe > g0[q]) & (xe > lts[q]) & (xe > best_end[q])
        best[q[ok]], best_end[q[ok]] = x[ok], xe[ok]
    return best


def _held(j: np.ndarray, q: np.ndarray, g0k: np.ndarray, bs: np.ndarray, be: np.ndarray,
          launches: np.ndarray) -> np.ndarray:
    """End (key, clipped to the launch key ``q``) of blocking interval ``j`` [bs, be) of the launching thread when
    it held the thread as the stream ran dry: it ends after the gap's start ``g0k``, it had begun by then or
    covers half the late part [g0k, q) or more, and no other launch of the thread came after it. Else _MIN."""
    jj = np.clip(j, 0, None)
    e, b = np.minimum(be[jj], q), bs[jj]
    between = np.searchsorted(launches, q, side="left") - np.searchsorted(launches, e, side="right")
    held = (b <= g0k) | (2 * (e - np.maximum(b, g0k)) >= q - g0k)
    return np.where((j >= 0) & (e > g0k) & held & (between <= 0), e, _MIN)


def sync_rows(d: RankData, dev: np.ndarray, launch: np.ndarray) -> np.ndarray:
    """Runtime calls that block the host: ``SYNC_RE`` names, and copy calls that returned only after their copy
    ended (``cudaMemcpyAsync`` to or from pageable memory: ``.item()``'s device-to-host copy)."""
    named = d.kind_in(("runtime",)) & dict_test(d.events, "name", lambda n: np.array(
        [bool(SYNC_RE.search(x)) for x in n], bool))
    end = d.col("ts") + d.col("dur")
    copy = d.kind_in(("memcpy",))[dev] & (launch >= 0)
    blocking = launch[copy][end[launch[copy]] >= end[dev[copy]]]
    return np.union1d(np.flatnonzero(named), blocking)


def rank_gaps(d: RankData) -> pl.DataFrame | None:
    """One row per gap: device, stream, start, end, cause, device_idle, late, and the rows of K, of the event
    that explains the gap and of its context (the innermost host span around it; -1: none)."""
    dev = np.flatnonzero(d.kind_in(DEVICE_KINDS))
    if not len(dev):
        return None
    ts_all, dur_all = d.col("ts"), d.col("dur")
    end_all = ts_all + dur_all
    keys = Keys(int(ts_all.min()), int(end_all.max() - ts_all.min()) + 2)
    if keys.width * (len(np.unique(d.col("tid"))) + 1) >= 2**62:
        raise ValueError("trace spans too long a time for per-thread keys")
    ts, end = ts_all[dev], end_all[dev]
    pid, stream = d.col("pid")[dev], d.col("stream")[dev]
    pi, si = _dense(pid), _dense(stream)
    grp = _dense(pi * (int(si.max()) + 1) + si)  # one group per (device, stream)
    dev_of_grp = np.zeros(int(grp.max()) + 1, np.int64)
    dev_of_grp[grp] = pi
    pos, g0, g1 = _stream_gaps(ts, end, grp, keys)
    launch = launch_rows(d, dev)
    L = launch[pos]
    Lc = np.clip(L, 0, None)
    # a Dequeue of torch_npu's task queue put its task on the stream when it ended, or when the task began if sooner
    lts = np.where(L >= 0, taskqueue.submitted((L >= 0) & _named(d, taskqueue.DEQUEUE)[Lc], ts_all[Lc], end_all[Lc],
                                               ts[pos]), _MIN)
    comm = d.comm()
    dep = _dependency(g0, g1, grp[pos], lts, end, grp, dev_of_grp)
    cause = np.full(len(pos), CAUSES.index("other"), np.int8)
    event = dev[pos].copy()
    has_dep = dep >= 0
    cause[has_dep] = np.where(comm[dev[np.clip(dep[has_dep], 0, None)]], 2, 4)
    event[has_dep] = dev[dep[has_dep]]
    # late: the launch call had not returned when the stream ran dry (HTA's host wait: had not begun)
    late = (L >= 0) & (np.where(L >= 0, end_all[np.clip(L, 0, None)], _MIN) > g0) & ~has_dep
    cause[~has_dep & ~late & comm[dev[pos]]] = 2
    ctx = np.full(len(pos), -1, np.int64)
    if late.any():
        _host_side(d, keys, np.flatnonzero(late), g0, L, sync_rows(d, dev, launch), launch[launch >= 0], cause,
                   event, ctx)
    idle = _device_idle(keys, ts, end, dev_of_grp[grp], pos, g1)
    return pl.DataFrame({"device": pid[pos], "stream": stream[pos], "start": g0, "end": g1,
                         "cause": cause, "device_idle": idle, "late": np.where(L >= 0, lts - g0, _MIN),
                         "kernel_row": dev[pos], "event_row": event, "context_row": ctx}).with_columns(
        pl.when(pl.col("late") == _MIN).then(None).otherwise(pl.col("late")).alias("late"))


def _host_side(d: RankData, keys: Keys, idx: np.ndarray, g0: np.ndarray, L: np.ndarray, syncs: np.ndarray,
               every: np.ndarray, cause: np.ndarray, event: np.ndarray, ctx: np.ndarray) -> None:
    """Causes of the late launches ``idx`` (sync / data / host), their events and contexts, in place. ``L``: the
    launch row of each gap's event; ``every``: the launch rows of all device events."""
    from rankscope.analysis.steps.breakdown import _is_data

    tid = _dense(d.col("tid"))
    ts, end, depth = d.col("ts"), d.col("ts") + d.col("dur"), d.col("depth")
    k = lambda rows, t: keys.of(tid[rows], t)  # noqa: E731 - the thread's key of a time
    q, g0k = k(L[idx], ts[L[idx]]), k(L[idx], g0[idx])
    launches = np.sort(k(every, ts[every]))
    # a sync: the one the thread was in as the stream ran dry, else the last to end before the launch
    o_s, o_e = np.argsort(k(syncs, ts[syncs]), kind="stable"), np.argsort(k(syncs, end[syncs]), kind="stable")
    ss, se = k(syncs, ts[syncs]), k(syncs, end[syncs])
    j1 = o_s[np.clip(np.searchsorted(ss[o_s], g0k, side="right") - 1, 0, None)] if len(syncs) else None
    j2 = o_e[np.clip(np.searchsorted(se[o_e], q, side="right") - 1, 0, None)] if len(syncs) else None
    s_end, j_sync = np.full(len(idx), _MIN, np.int64), np.zeros(len(idx), np.int64)
    if j1 is not None and j2 is not None:
        ok1 = np.searchsorted(ss[o_s], g0k, side="right") > 0
        ok2 = np.searchsorted(se[o_e], q, side="right") > 0
        e1 = _held(np.where(ok1, j1, -1), q, g0k, ss, se, launches)
        e2 = _held(np.where(ok2, j2, -1), q, g0k, ss, se, launches)
        s_end, j_sync = np.maximum(e1, e2), np.where(e1 >= e2, j1, j2)
    data = np.flatnonzero(d.kind_in(("user_annotation", "python_function"))
                          & d.memo("is_data", lambda: dict_test(d.events, "name", _is_data)))
    ds, de = merge(k(data, ts[data]), k(data, end[data]))
    d_end = _held(np.searchsorted(ds, q, side="right") - 1, q, g0k, ds, de, launches) if len(ds) else s_end * 0 + _MIN
    is_data = (d_end > _MIN) & (d_end >= s_end)
    is_sync = ~is_data & (s_end > _MIN)
    cause[idx] = np.where(is_data, 3, np.where(is_sync, 1, 0)).astype(np.int8)
    # keys back to time (each key is its own thread's), to compare with collectives on other threads
    held_t = np.maximum(np.where(d_end > _MIN, d_end % keys.width, _MIN), np.where(s_end > _MIN, s_end % keys.width, _MIN))
    held_t = np.where(held_t > _MIN, held_t + keys.t0, _MIN)
    c_row = _host_collective(d, g0[idx], L[idx], held_t)
    host = np.flatnonzero(d.kind_in(HOST_KINDS) & (d.col("dur") > 0) & ~dict_test(
        d.events, "name", lambda n: np.char.startswith(n.astype(str), "ProfilerStep#")))
    spans = Spans(host, k(host, ts[host]), k(host, end[host]), depth[host])
    dspans = Spans(data, k(data, ts[data]), k(data, end[data]), depth[data])
    event[idx] = np.where(is_data, dspans.at(np.maximum(d_end - 1, g0k)), spans.at(g0k + (q - g0k) // 2, g0k, q))
    event[idx[q <= g0k]] = L[idx[q <= g0k]]  # the launch call began in time but returned late: it is the event
    sy = syncs[j_sync[is_sync]]
    event[idx[is_sync]] = sy
    ctx[idx] = spans.at(q)  # the host span the late launch came from; a sync's own context
    ctx[idx[is_sync]] = spans.at(k(sy, ts[sy]))
    none = event[idx] < 0  # no host span half-way: the span the launch came from, else the launch call
    event[idx[none]] = np.where(ctx[idx[none]] >= 0, ctx[idx[none]], L[idx[none]])
    coll = c_row >= 0
    cause[idx[coll]], event[idx[coll]] = CAUSES.index("collective"), c_row[coll]


def _host_collective(d: RankData, g0: np.ndarray, L: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Per late gap: the host collective span (row) the launching thread waited for (-1: none), see 2. above:
    one that ended before the launch, or the span the launch came from (gloo's thread copying the result out
    once the peers arrived). ``L``: the launch rows; ``held``: when the sync or data span that held the thread
    ended (_MIN: none); a later collective wins."""
    ts, dur, tid = d.col("ts"), d.col("dur"), d.col("tid")
    # the collective's own span (gloo's "gloo:all_reduce" on its thread), not the operator that issued it
    # (``c10d::allreduce_``, a cpu_op: its time is the issuing, and a launch inside it is not a wait)
    rows = np.flatnonzero(d.comm() & d.kind_in(("user_annotation",)) & (d.col("stream") < 0) & (dur > 0))
    out = np.full(len(g0), -1, np.int64)
    if not len(rows):
        return out
    launch = ts[L]
    for t in np.unique(tid[rows]):  # the launch inside a collective's span on its own thread (a few threads)
        mine = rows[tid[rows] == t]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        q = np.flatnonzero(tid[L] == t)
        j = np.searchsorted(ts[mine], launch[q], side="right") - 1
        r = mine[np.clip(j, 0, None)]
        b = np.maximum(ts[r], g0[q])
        ok = (j >= 0) & (ts[r] + dur[r] >= launch[q]) & (2 * (launch[q] - b) >= launch[q] - g0[q]) & (launch[q] > held[q])
        out[q[ok]] = r[ok]
    end = ts[rows] + dur[rows]
    o = np.argsort(end, kind="stable")
    rows, end = rows[o], end[o]
    j = np.searchsorted(end, launch, side="right") - 1
    jj = np.clip(j, 0, None)
    r, e = rows[jj], end[jj]
    b = ts[r]
    ok = ((j >= 0) & (e > g0) & (launch - e <= WAKE_NS) & (e > held)
          & ((b <= g0) | (2 * (e - np.maximum(b, g0)) >= launch - g0)) & (out < 0))
    out[ok] = r[ok]
    # still open at the launch and closed soon after (gloo closes its span after waking the waiter: the
    # critical path's ``LATE_END_NS``), in progress over half the late part and closing within its length
    k = np.minimum(j + 1, len(end) - 1)
    r, e = rows[k], end[k]
    b = ts[r]
    late = ((j + 1 < len(end)) & (b < launch) & (e - launch <= LATE_END_NS) & (e - launch <= launch - g0)
            & (2 * (launch - np.maximum(b, g0)) >= launch - g0) & (launch > held) & (out < 0))
    out[late] = r[late]
    return out


def _device_idle(keys: Keys, ts: np.ndarray, end: np.ndarray, dev_idx: np.ndarray, pos: np.ndarray,
                 g1: np.ndarray) -> np.ndarray:
    """Per gap, the device-wide idle time it ended (0 unless its event started a busy block of the device)."""
    bs, be = merge(keys.of(dev_idx, ts), keys.of(dev_idx, end))
    q = keys.of(dev_idx[pos], g1)
    i = np.clip(np.searchsorted(bs, q, side="left"), 0, len(bs) - 1)
    starts = (bs[i] == q) & (i >= 1) & (bs[i] // keys.width == be[np.clip(i - 1, 0, None)] // keys.width)
    idle = np.where(starts, bs[i] - be[np.clip(i - 1, 0, None)], 0)
    o = np.lexsort((pos, q))
    dup = np.r_[False, q[o][1:] == q[o][:-1]]  # several events starting the block: the first one takes it
    idle[o[dup]] = 0
    return np.clip(idle, 0, None).astype(np.int64)


def names(d: RankData, rows: np.ndarray) -> list[Any]:
    """The names of event rows (None for -1)."""
    import pyarrow as pa

    ok = rows >= 0
    got = d.events.column("name").take(pa.array(np.where(ok, rows, 0))).cast(pa.string()).to_pylist()
    return [n if k else None for n, k in zip(got, ok.tolist())]
