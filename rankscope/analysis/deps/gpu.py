"""Device operations: HTA's kernel rules (launch delay, kernel-kernel delay, CUDA syncs), vectorized.

Pattern (HTA 0.5.0, ``CPGraph._construct_graph_from_kernels``): device operations and sync events
are walked in time order (syncs by their end). A kernel gets a KERNEL_LAUNCH_DELAY edge from its
runtime launch when its stream was empty at the launch (queue length 1 at the launch, 0 after the
kernel, previous kernel already done, its event-wait source done too), else a KERNEL_KERNEL_DELAY
edge from the previous kernel on its stream. "Stream Sync" / "Context Sync" / "Event Sync" add a
GPU -> CPU SYNC edge from the last kernel of the stream (of every stream; of the kernel before the
recorded CUDA event) to the end of the blocking runtime call; "Stream Wait Event" a GPU -> GPU SYNC
edge into the next kernel launched on the waiting stream.

Algorithm: HTA's per-row state (last kernel per stream, queue lengths, pending event waits) is a
function of positions in the walk, so it is computed with sorts, cumulative sums and searches.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankscope.analysis.deps import taskqueue
from rankscope.analysis.deps.events import ASCEND_BLOCKING, BLOCKING, RankEvents, Sync


class E:
    """Edge types (HTA's CPEdgeType), as small ints."""

    OPERATOR = 0  # critical_path_operator: span of an operator / kernel, or time between nested points
    DEPENDENCY = 1  # critical_path_dependency: between top-level operators of a thread
    LAUNCH = 2  # critical_path_kernel_launch_delay
    KERNEL_KERNEL = 3  # critical_path_kernel_kernel_delay
    SYNC = 4  # critical_path_sync_dependency
    COLLECTIVE = 5  # across ranks: last arrival -> end of a collective (or p2p pair)
    WAIT = 6  # across ranks: a member's arrival -> the last arrival (weight 0)

    HTA_NAMES = ("critical_path_operator", "critical_path_dependency", "critical_path_kernel_launch_delay",
                 "critical_path_kernel_kernel_delay", "critical_path_sync_dependency")


@dataclass
class DeviceEdges:
    """Device lanes (one chain of kernels per stream) and the edges between them and the host."""

    lane_ev: np.ndarray  # kernels in walk order, stream after stream
    lane_first: np.ndarray  # bool: no KERNEL_KERNEL edge into this kernel (first of a chain)
    lane_pos: np.ndarray  # position of each lane kernel in the walk (orders edges as HTA adds them)
    src_ev: np.ndarray  # cross edges: source event, whether its start node, destination likewise
    src_start: np.ndarray
    dst_ev: np.ndarray
    dst_start: np.ndarray
    typ: np.ndarray
    zero: np.ndarray  # bool: weight 0 whatever the times (syncs, zero-weight launch edges)
    seq: np.ndarray  # HTA's insertion order (ties between edges into one node go to the first)


def queue_lengths(ev: RankEvents) -> tuple[np.ndarray, np.ndarray]:
    """Queue length per stream after each launch (+1) and each device op (-1), over the whole trace
    (HTA's ``TraceCounters._get_queue_length_time_series_for_rank``); -1 where not defined."""
    q = np.full(ev.n, -1, dtype=np.int64)
    partner = ev.partner
    launch = np.flatnonzero(ev.launch & (partner > 0) & (ev.stream < 0))
    op = partner[launch]
    op = op[ev.stream[op] >= 0]
    launch = partner[op]
    if not len(op):
        return q, q.copy()
    rows = np.concatenate([launch, op])
    at = np.concatenate([taskqueue.launched_by(ev, launch, op), ev.ts[op]])  # a Dequeue counts from its submission
    stream = np.concatenate([ev.stream[op], ev.stream[op]])
    step = np.concatenate([np.ones(len(launch), np.int64), -np.ones(len(op), np.int64)])
    order = np.lexsort((np.arange(len(rows)), at, stream))
    r, s, d = rows[order], stream[order], step[order]
    csum = np.cumsum(d)
    first = np.r_[True, s[1:] != s[:-1]]
    base = np.maximum.accumulate(np.where(first, np.arange(len(csum)), 0))
    q[r] = csum - (csum[base] - d[base])
    return q, q  # one array: the launch's row holds queue_length_runtime, the op's row queue_length


def previous_launch(ev: RankEvents) -> dict[int, int]:
    """cudaEventRecord correlation -> the last launch on the recorded stream before it (HTA's
    ``_get_cuda_event_record_df``: the stream comes from the syncs that wait on that record)."""
    rec = np.flatnonzero(ev.name_in({"cudaEventRecord"}))
    waits = np.flatnonzero(ev.wait_on_stream > -1)
    if not len(rec) or not len(waits):
        return {}
    stream_of = dict(zip(ev.wait_on_corr[waits].tolist(), ev.wait_on_stream[waits].tolist()))
    launches = _launches(ev)
    out: dict[int, int] = {}
    for s in set(stream_of.values()):
        lw = launches[ev.stream[ev.partner[launches]] == s]
        lw = lw[np.argsort(ev.ts[lw], kind="stable")]
        rs = rec[np.array([stream_of.get(int(c), None) == s for c in ev.corr[rec]], bool)]
        j = np.searchsorted(ev.ts[lw], ev.ts[rs], side="right") - 1
        for c, jj in zip(ev.corr[rs].tolist(), j.tolist()):
            out[c] = int(lw[jj]) if jj >= 0 else -1
    return out


def next_launch(ev: RankEvents) -> dict[int, int]:
    """cudaStreamWaitEvent call -> the next launch on the same thread and waiting stream (HTA's
    ``_get_cuda_stream_wait_event_df``)."""
    calls = np.flatnonzero(ev.name_in({"cudaStreamWaitEvent"}) & (ev.partner > 0))
    if not len(calls):
        return {}
    launches = _launches(ev)
    l_stream = ev.stream[ev.partner[launches]]
    c_stream = ev.stream[ev.partner[calls]]
    out: dict[int, int] = {}
    for key in set(zip(ev.tid[calls].tolist(), c_stream.tolist())):
        lw = launches[(ev.tid[launches] == key[0]) & (l_stream == key[1])]
        lw = lw[np.argsort(ev.ts[lw], kind="stable")]
        cs = calls[(ev.tid[calls] == key[0]) & (c_stream == key[1])]
        j = np.searchsorted(ev.ts[lw], ev.ts[cs], side="right")
        for c, jj in zip(cs.tolist(), j.tolist()):
            out[c] = int(lw[jj]) if jj < len(lw) else -1
    return out


def _launches(ev: RankEvents) -> np.ndarray:
    """Launch runtime calls matched to a device op on a stream, in time order."""
    rows = np.flatnonzero(ev.launch & (ev.partner > 0))
    rows = rows[ev.stream[ev.partner[rows]] >= 0]
    return rows[np.argsort(ev.ts[rows], kind="stable")]


def is_blocking(ev: RankEvents) -> np.ndarray:
    return ev.name_in(set(BLOCKING) | set(ASCEND_BLOCKING))


def _walk(ev: RankEvents, sel: np.ndarray) -> np.ndarray:
    """Rows of HTA's kernel loop in its order: device ops by start, sync events by end."""
    rows = np.flatnonzero(sel & ((ev.stream != -1) | np.isin(ev.sync, (Sync.EVENT, Sync.CONTEXT))) & (ev.corr >= 0))
    key = np.where(ev.sync[rows] != Sync.NONE, ev.end[rows], ev.ts[rows])
    return rows[np.lexsort((rows, key))]


def _last_before(k_rows: np.ndarray, k_pos: np.ndarray, streams: np.ndarray, at: np.ndarray,
                 at_stream: np.ndarray) -> np.ndarray:
    """For each query (position ``at`` in the walk, stream), the last kernel row of that stream
    walked before it (-1: none)."""
    order = np.lexsort((k_pos, streams))
    s_sorted, p_sorted, r_sorted = streams[order], k_pos[order], k_rows[order]
    lo = np.searchsorted(s_sorted, at_stream, side="left")
    hi = np.searchsorted(s_sorted, at_stream, side="right")
    out = np.full(len(at), -1, dtype=np.int64)
    for i in range(len(at)):  # one search per sync event (a few per step)
        j = lo[i] + np.searchsorted(p_sorted[lo[i]:hi[i]], at[i]) - 1
        if j >= lo[i]:
            out[i] = r_sorted[j]
    return out


def device_edges(ev: RankEvents, sel: np.ndarray, has_nodes: np.ndarray, zero_weight_launch: bool = False) -> DeviceEdges:
    """Lanes and cross edges of the device operations and syncs selected by ``sel``."""
    walk = _walk(ev, sel)
    pos_of = np.full(ev.n, -1, dtype=np.int64)
    pos_of[walk] = np.arange(len(walk))
    k = walk[ev.sync[walk] == Sync.NONE]
    out = _Edges()
    q, _ = queue_lengths(ev)
    ks = _kernel_syncs(ev, walk, pos_of, has_nodes)
    # previous kernel on the same stream, in walk order
    order = np.lexsort((pos_of[k], ev.stream[k]))
    ko = k[order]
    same = np.r_[False, ev.stream[ko][1:] == ev.stream[ko][:-1]] if len(ko) else np.zeros(0, bool)
    prev = np.full(ev.n, -1, dtype=np.int64)
    prev[ko[same]] = ko[np.flatnonzero(same) - 1]
    p = prev[k]
    rt = ev.partner[k]
    rt_ts = taskqueue.launched_by(ev, np.maximum(rt, 0), k)  # a runtime call's start; for a Dequeue, its submission
    src = ks.get_many(k)
    no_ks = src < 0
    ks_end = ev.end[np.maximum(src, 0)]
    last_end = ev.end[np.maximum(p, 0)]
    launch = ((q[np.maximum(rt, 0)] == 1) & (q[k] == 0) & ((p < 0) | (last_end < rt_ts))
              & (no_ks | (ks_end < rt_ts)) & (rt >= 0) & has_nodes[np.maximum(rt, 0)])
    kk = ~launch & (p >= 0) & (no_ks | (ks_end < last_end))
    base = pos_of[k] * 8
    out.add(src[~no_ks], False, k[~no_ks], True, E.SYNC, True, base[~no_ks] + 1)
    out.add(rt[launch], True, k[launch], True, E.LAUNCH, False, base[launch] + 2)
    if zero_weight_launch:
        z = ~launch & (rt >= 0) & has_nodes[np.maximum(rt, 0)]
        out.add(rt[z], True, k[z], True, E.LAUNCH, True, base[z] + 3)
    _sync_edges(ev, walk, pos_of, k, has_nodes, out)
    first = ~kk
    lane_order = np.lexsort((pos_of[k], ev.stream[k]))
    return out.done(k[lane_order], first[lane_order], pos_of[k[lane_order]])


class _Edges:
    """Cross edges collected in parts."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(self, s: np.ndarray, s_start: bool, d: np.ndarray, d_start: bool, typ: int, zero: bool,
            seq: np.ndarray) -> None:
        n = len(s)
        self.parts.append((np.asarray(s, np.int64), np.full(n, s_start), np.asarray(d, np.int64), np.full(n, d_start),
                           np.full(n, typ, np.int8), np.full(n, zero), np.asarray(seq, np.int64)))

    def done(self, lane_ev: np.ndarray, lane_first: np.ndarray, lane_pos: np.ndarray) -> DeviceEdges:
        cols = [np.concatenate([p[i] for p in self.parts]) if self.parts else np.zeros(0)
                for i in range(7)]
        return DeviceEdges(lane_ev, lane_first, lane_pos, cols[0].astype(np.int64), cols[1].astype(bool),
                           cols[2].astype(np.int64), cols[3].astype(bool), cols[4].astype(np.int8),
                           cols[5].astype(bool), cols[6].astype(np.int64))


class _KernelSyncs:
    """dest kernel -> source kernel of the last "Stream Wait Event" walked before the dest."""

    def __init__(self, dest: np.ndarray, src: np.ndarray, at: np.ndarray, pos_of: np.ndarray) -> None:
        self.map: dict[int, int] = {}
        for d, s, a in zip(dest.tolist(), src.tolist(), at.tolist()):  # walk order: later waits win
            if a < pos_of[d]:
                self.map[d] = s

    def get_many(self, k: np.ndarray) -> np.ndarray:
        return np.array([self.map.get(x, -1) for x in k.tolist()], dtype=np.int64) if self.map \
            else np.full(len(k), -1, dtype=np.int64)


def _kernel_syncs(ev: RankEvents, walk: np.ndarray, pos_of: np.ndarray, has_nodes: np.ndarray) -> _KernelSyncs:
    w = walk[ev.sync[walk] == Sync.WAIT_EVENT]
    if not len(w):
        return _KernelSyncs(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), pos_of)
    prev, nxt = previous_launch(ev), next_launch(ev)
    dest, src, at = [], [], []
    for row in w.tolist():
        pl = prev.get(int(ev.wait_on_corr[row]), -1)
        if pl < 0:
            continue
        dl = nxt.get(int(ev.partner[row]), -1)
        if dl < 0:
            continue
        s, d = int(ev.partner[pl]), int(ev.partner[dl])
        if has_nodes[s]:  # a source out of the window is dropped (HTA: kernel_sync_end is None)
            dest.append(d)
            src.append(s)
            at.append(int(pos_of[row]))
    return _KernelSyncs(np.array(dest, np.int64), np.array(src, np.int64), np.array(at, np.int64), pos_of)


def _sync_edges(ev: RankEvents, walk: np.ndarray, pos_of: np.ndarray, k: np.ndarray, has_nodes: np.ndarray,
                out: _Edges) -> None:
    """GPU -> CPU SYNC edges of Stream / Context / Event Sync rows, into the end of the runtime call."""
    rows = walk[np.isin(ev.sync[walk], (Sync.STREAM, Sync.CONTEXT, Sync.EVENT))]
    rows = rows[(ev.partner[rows] >= 0)]
    if not len(rows):
        return
    rows = rows[has_nodes[ev.partner[rows]]]
    st = rows[ev.sync[rows] == Sync.STREAM]
    last = _last_before(k, pos_of[k], ev.stream[k], pos_of[st], ev.stream[st])
    ok = last >= 0
    out.add(last[ok], False, ev.partner[st[ok]], False, E.SYNC, True, pos_of[st[ok]] * 8)
    ctx = rows[ev.sync[rows] == Sync.CONTEXT]
    if len(ctx):
        first_pos: dict[int, int] = {}
        for s, p in zip(ev.stream[k].tolist(), pos_of[k].tolist()):
            first_pos.setdefault(s, p)
        for j, s in enumerate(sorted(first_pos, key=first_pos.__getitem__)):  # HTA: dict insertion order
            last = _last_before(k, pos_of[k], ev.stream[k], pos_of[ctx], np.full(len(ctx), s))
            ok = last >= 0
            out.add(last[ok], False, ev.partner[ctx[ok]], False, E.SYNC, True, pos_of[ctx[ok]] * 8 + min(j, 7))
    es = rows[ev.sync[rows] == Sync.EVENT]
    if len(es):
        prev = previous_launch(ev)
        pl = np.array([prev.get(int(c), -1) for c in ev.wait_on_corr[es]], dtype=np.int64)
        src = np.where(pl >= 0, ev.partner[np.maximum(pl, 0)], -1)
        ok = (pl >= 0) & (src >= 0)
        ok[ok] = has_nodes[src[ok]]
        out.add(src[ok], False, ev.partner[es[ok]], False, E.SYNC, True, pos_of[es[ok]] * 8)
