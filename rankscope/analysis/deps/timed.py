"""One rank's graph for the cross-rank path: HTA's graph, with weights that add up to the step time.

Pattern: start from HTA's graph (``graph.build``) with the communication spans as nodes too, then
- the time between top-level operators of a thread is the rank's own time (host work outside any
  operator: Python, data loading), except on executor threads (gloo runs collectives on its own
  threads: their gaps are waiting for work);
- a device op launched after the previous op of its stream ended hangs on its launch, not on that op
  (the stream's idle gap weighs nothing);
- a call's own span is cut: its end node gets its time from the other ranks (``join``), so the
  wait inside it weighs nothing here;
- a wait weighs nothing and the edge from what it waited for carries the wake-up time: a thread
  idle (between operators, inside a ``wait``, or inside a framework's communication span such as
  ``FSDP::all_gather``) until a collective on another thread of the rank ended (within ``WAKE_NS``, or
  ``RESUME_NS`` where it resumed by closing such a span: a woken thread waits for a CPU on a loaded host), or
  resumed while that collective's span was open and it closed soon after (``LATE_END_NS``: gloo closes the
  span after waking the waiter, late when its worker thread waits for a CPU); a blocking runtime call
  (``cudaMemcpy``, syncs) whose own device operation ended before it returned; a device operation that
  started right when an operation on another stream ended (NCCL stream <-> compute stream,
  ``GPU_WAKE_NS``), where the trace has no CUDA sync events to say so;
- a collective run by an executor thread depends on the operator that issued it (``c10d::*``), paired
  per op in order when the data carries no issue time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankscope.analysis.deps import taskqueue
from rankscope.analysis.deps.adapter import Calls
from rankscope.analysis.deps.events import K, RankEvents
from rankscope.analysis.deps.gpu import E
from rankscope.analysis.deps.graph import RankGraph, build

WAKE_NS = 2_000_000  # a thread that resumes this soon after a completion was waiting for it
# gloo closes a collective's span on its worker thread after it woke the waiter: a waiter resumed up to this long
# before the span's end (40 of 95 waits over 5 ms, by 1.4-12.6 ms, 4 ranks on 2 cores: bench/gloo_wake_lateness.py)
LATE_END_NS = 20_000_000
# a thread that closes a wait or a communication span (FSDP::all_gather, wait_tensor, c10d::*) resumed from a wait
# for a collective that ended this long before: on a loaded host the woken thread waits for a CPU. Measured (4 ranks
# on 2 cores, FSDP2 and TP x FSDP2 of bench/workloads.py seed 2741, 1,156 such waits over 5 ms): 7 % resumed over
# 2 ms late, 1 % over 5 ms, at most 12.7 ms. Not for a gap that ends where an operator starts (DDP's untraced
# Work.wait()): there the thread may have run Python of its own, and ``WAKE_NS`` holds.
RESUME_NS = 20_000_000
GPU_WAKE_NS = 20_000  # a device op that starts this soon after another stream's op ended waited for it
ROUND_NS = 1_000  # times written in µs with 3 decimals: an end this much after a start may be before it
WAIT_NAMES = ("wait", "synchroniz", "barrier")
_HOST = (K.CPU_OP, K.RUNTIME, K.ANNOTATION)


@dataclass
class Anchors:
    """Where each communication call of the window sits in the graph."""

    arrival: np.ndarray  # node id of the call's arrival (span or first kernel start), -1: not found
    end: np.ndarray  # node id of its end
    key: list  # matching key per call (None: unmatched)
    info: Calls  # the calls
    span_start: np.ndarray | None = None  # node id where its own span starts, where not its arrival (``waited_from``)


def comm_spans(ev: RankEvents) -> np.ndarray:
    return ev.is_comm & (ev.stream == -1) & np.isin(ev.kind, _HOST)


def executor_threads(ev: RankEvents, sel: np.ndarray, call_ev: np.ndarray) -> np.ndarray:
    """Host threads that run collectives for others (gloo's worker threads): those holding a call's
    span, other than a thread with the step's own span (a training thread waits in its own p2p spans)."""
    ev_ = call_ev[call_ev >= 0]
    tids = np.unique(ev.tid[ev_[ev.stream[ev_] < 0]])
    steps = np.unique(ev.tid[sel & (ev.stream == -1) & ev.name_has(("profilerstep#",))])
    return np.setdiff1d(tids, steps)


def issued(ev: RankEvents) -> np.ndarray:
    """Host spans inside which a communication span starts on the same thread (they issued a
    collective and may wait for it in their own time), memoized per rank."""
    if "issued" not in ev.memo:
        out = np.zeros(ev.n, bool)
        host = (ev.stream == -1) & (ev.dur > 0)
        for t in np.unique(ev.tid[host & ev.is_comm]):
            mine = np.flatnonzero(host & (ev.tid == t))
            cs = np.sort(ev.ts[mine[ev.is_comm[mine]]])
            inside = np.searchsorted(cs, ev.end[mine], side="left") - np.searchsorted(cs, ev.ts[mine], side="left")
            out[mine] = (inside > 0) & ~ev.is_comm[mine]
        ev.memo["issued"] = out
    return ev.memo["issued"]


def locate(ev: RankEvents, sel: np.ndarray, calls: Calls) -> tuple[np.ndarray, np.ndarray]:
    """Arrival and end event of each call (-1 when its events are not in the window)."""
    n = len(calls)
    arr, end = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    if not n:
        return arr, end
    dev_ts, dev_end, ts, te = calls.dev_ts, calls.dev_end, calls.ts, calls.end
    d = np.flatnonzero(sel & ev.is_comm & (ev.stream >= 0))
    h = np.flatnonzero(sel & comm_spans(ev))
    on_dev = dev_ts >= 0
    arr[on_dev] = _find(ev.ts[d], d, dev_ts[on_dev])
    end[on_dev] = _find(ev.end[d], d, dev_end[on_dev])
    arr[~on_dev] = _by_start(ev, h, ts[~on_dev], te[~on_dev])
    end[~on_dev] = arr[~on_dev]
    bad = (arr < 0) | (end < 0)
    arr[bad], end[bad] = -1, -1
    return arr, end


def _by_start(ev: RankEvents, h: np.ndarray, ts: np.ndarray, te: np.ndarray) -> np.ndarray:
    """The host span of each call: the one starting at the call's start, of those the one ending nearest its end (-1:
    none). By start, not by (start, end): ``cpu.fix_nesting`` moves the end of a span that overlaps its neighbours.
    Measured (bench/workloads.py seed 3014, ppdp-data at 4 ranks, 1F1B on gloo): each ``gloo:send`` opens inside its
    ``c10d::send`` and closes after the next ``c10d::recv_``, so 7 of a stage's 8 sends per step had their ends moved
    by 20-80 µs and were lost to the path; its waits inside ``c10d::recv_`` then weighed as the rank's own compute."""
    o = h[np.argsort(ev.ts[h], kind="stable")]
    starts = ev.ts[o]
    lo, hi = np.searchsorted(starts, ts, "left"), np.searchsorted(starts, ts, "right")
    out = np.full(len(ts), -1, np.int64)
    for i in np.flatnonzero(hi > lo):  # a few calls per step
        cand = o[lo[i]:hi[i]]
        out[i] = cand[np.argmin(np.abs(ev.end[cand] - te[i]))]
    return out


def _find(keys: np.ndarray, rows: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The row whose key equals ``want`` (the first in event order when several do)."""
    o = np.argsort(keys, kind="stable")
    k = keys[o]
    j = np.searchsorted(k, want)
    ok = j < len(k)
    ok[ok] = k[j[ok]] == want[ok]
    return np.where(ok, rows[o][np.minimum(j, len(k) - 1)], -1)


def issuers(ev: RankEvents, sel: np.ndarray, arr: np.ndarray, calls: Calls, execs: np.ndarray) -> np.ndarray:
    """The operator that issued each call run by an executor thread (-1: none)."""
    from rankscope.model.schema import normalize_op

    out = np.full(len(arr), -1, np.int64)
    on_exec = (arr >= 0) & np.isin(ev.tid[np.maximum(arr, 0)], execs)
    if not on_exec.any():
        return out
    cand = np.flatnonzero(sel & comm_spans(ev) & ~np.isin(ev.tid, execs) & (ev.kind == K.CPU_OP))
    issue_ts = calls.issue_ts
    by_ts = _find(ev.ts[cand], cand, issue_ts)
    out[on_exec & (issue_ts >= 0)] = by_ts[on_exec & (issue_ts >= 0)]
    todo = np.flatnonzero(on_exec & (issue_ts < 0))
    if not len(todo) or not len(cand):
        return out
    cand = cand[np.argsort(ev.ts[cand], kind="stable")]
    c_op = np.array([normalize_op(ev.name_of(int(i))) for i in cand])
    cand, c_op = cand[c_op != "other"], c_op[c_op != "other"]
    ops = calls.op
    for op in set(ops[todo].tolist()):  # the k-th issue of an op runs as its k-th call
        mine = todo[ops[todo] == op]
        mine = mine[np.argsort(ev.ts[arr[mine]], kind="stable")]
        theirs = cand[c_op == op]
        m = min(len(mine), len(theirs))
        ok = ev.ts[theirs[:m]] <= ev.ts[arr[mine[:m]]]
        out[mine[:m][ok]] = theirs[:m][ok]
    return out


def rank_graph(ev: RankEvents, sel: np.ndarray, calls: Calls, joinable: np.ndarray | None = None) -> tuple[RankGraph, Anchors]:
    """The time-faithful graph of one rank in a window, and its calls' anchors. Only ``joinable``
    calls (another member is in the run) are cut and anchored; the others keep their own span."""
    # annotations are nodes too: the step's own start (ProfilerStep#N), data loading, framework spans
    g = build(ev, sel, extra_nodes=comm_spans(ev) | ((ev.stream == -1) & (ev.kind == K.ANNOTATION)))
    arr_ev, end_ev = locate(ev, sel, calls)
    execs = executor_threads(ev, sel, arr_ev)
    iss = issuers(ev, sel, arr_ev, calls, execs)
    found = arr_ev >= 0
    arr_n = np.where(found, g.node(np.maximum(arr_ev, 0), True), -1)
    end_n = np.where(found, g.node(np.maximum(end_ev, 0), False), -1)
    has = found & (np.ones(len(found), bool) if joinable is None else joinable)
    wait_ev = waited_from(ev, sel, arr_ev, calls, execs)
    wait_n = np.where(found, g.node(np.maximum(wait_ev, 0), True), -1)
    sends = (calls.kind == "p2p") & (calls.op == "send") & (calls.dev_ts < 0)  # host sends (``join.join``)
    b = _Builder(g, ev)
    b.own_gaps(execs)
    b.queue()
    b.cut(wait_n[has & ~sends], end_n[has & ~sends])
    b.send_ends(end_n[has & sends])  # a host send keeps the work inside its span; its end meets the receiver (``join``)
    b.issue(iss[found & (iss >= 0)], arr_n[found & (iss >= 0)])
    b.blocking_syncs()
    on_exec = found & np.isin(ev.tid[np.maximum(end_ev, 0)], execs) & (ev.stream[np.maximum(end_ev, 0)] < 0)
    b.wakes(end_n[on_exec], arr_n[on_exec], execs)
    b.stream_waits()
    b.late_launches()
    span_n = np.where(has, arr_n, -1)
    arr_n, end_n = np.where(has, wait_n, -1), np.where(has, end_n, -1)
    return b.done(), Anchors(arr_n, end_n, [k if h else None for k, h in zip(calls.key.tolist(), has)], calls, span_n)


def waited_from(ev: RankEvents, sel: np.ndarray, arr: np.ndarray, calls: Calls, execs: np.ndarray) -> np.ndarray:
    """Where each call's rank began to wait for it: its span's start, or for a p2p receive on the rank's own thread
    the start of the ``c10d::recv*`` operator around that span. Measured (bench/workloads.py seed 3014, ppdp-data, 1F1B
    on gloo): ``gloo:recv`` opens at the end of its ``c10d::recv_``, 50 µs of a 10.3 ms operator that waited for the
    other stage's send; from the span's start, that wait weighed as the rank's own time."""
    out = arr.copy()
    recv = np.flatnonzero((arr >= 0) & (calls.kind == "p2p") & (calls.op == "recv"))
    recv = recv[~np.isin(ev.tid[arr[recv]], execs)]
    if not len(recv):
        return out
    ops = np.flatnonzero(sel & (ev.kind == K.CPU_OP) & (ev.stream == -1) & ev.name_has(("c10d::recv",)))
    for i in recv.tolist():  # a few per step
        a = int(arr[i])
        around = ops[(ev.tid[ops] == ev.tid[a]) & (ev.ts[ops] <= ev.ts[a]) & (ev.end[ops] >= ev.ts[a])]
        if len(around):
            out[i] = around[np.argmax(ev.ts[around])]
    return out


class _Builder:
    """Reweights a copy of HTA's graph and adds the inferred edges."""

    def __init__(self, g: RankGraph, ev: RankEvents) -> None:
        self.g, self.ev = g, ev
        self.w = g.w.copy()
        self.typ = g.typ.copy()
        self.link = g.link.copy()
        self.extra: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]] = []
        self.dead = np.zeros(len(g.src), bool)
        pos = np.empty(g.n, np.int64)
        pos[g.order] = np.arange(g.n)
        self.pos = pos
        self.waited = np.zeros(0, np.int64)  # device ops found waiting for another stream (stream_waits)

    def own_gaps(self, execs: np.ndarray) -> None:
        """Dependency edges weigh the gap (the rank's own time), zero on executor threads."""
        g, ev = self.g, self.ev
        dep = np.flatnonzero(g.typ == E.DEPENDENCY)
        on_exec = np.isin(ev.tid[g.node_ev[g.dst[dep]]], execs)
        self.w[dep] = np.where(on_exec, 0, np.maximum(g.node_ts[g.dst[dep]] - g.node_ts[g.src[dep]], 0))
        sync = np.flatnonzero(g.typ == E.SYNC)
        self.w[sync] = np.maximum(g.node_ts[g.dst[sync]] - g.node_ts[g.src[sync]], 0)

    def queue(self) -> None:
        """torch_npu's task queue: an Enqueue -> its Dequeue; an idle dequeuing thread's gap before it waited for the
        work (``taskqueue.edges``)."""
        g = self.g
        in_graph = np.zeros(self.ev.n, bool)
        in_graph[g.node_ev] = True
        enq, deq, w, idle = taskqueue.edges(self.ev, in_graph)
        if not len(enq):
            return
        self.add(g.node(enq, True), g.node(deq, True), w, E.LAUNCH)
        gap = self.link[self.pos[g.node(deq[idle], True)]]
        gap = gap[gap >= 0]
        gap = gap[self.typ[gap] == E.DEPENDENCY]
        self.w[gap], self.typ[gap] = 0, E.WAIT
        src, op, w = taskqueue.submissions(self.ev, in_graph)
        self.add(g.node(src, True), g.node(op, True), w, E.LAUNCH)

    def late_launches(self) -> None:
        """A device op launched only after the previous op of its stream ended waited for its launch, not
        for that op: the lane's gap weighs nothing and the launch edge carries the time (HTA keeps a
        kernel-kernel edge when other ops were queued behind it: seen on real CUDA traces, where the
        stream idled 65 ms while the host thread that launched the next copy waited for a collective)."""
        g, ev = self.g, self.ev
        kk = np.flatnonzero((g.typ == E.KERNEL_KERNEL) & ~self.dead)
        kk = kk[~np.isin(g.dst[kk], self.waited)]  # it waited for another stream's op (stream_waits)
        op = g.node_ev[g.dst[kk]]
        rt = ev.partner[op]
        ok = (rt >= 0) & (ev.stream[np.maximum(rt, 0)] < 0)
        ok[ok] = np.isin(rt[ok], g.node_ev) & (taskqueue.launched_by(ev, rt[ok], op[ok]) >= g.node_ts[g.src[kk[ok]]])
        kk, op, rt = kk[ok], op[ok], rt[ok]
        self.w[kk], self.typ[kk] = 0, E.WAIT
        self.add(g.node(rt, True), g.dst[kk], np.maximum(ev.ts[op] - ev.ts[rt], 0), E.LAUNCH)

    def cut(self, arr: np.ndarray, end: np.ndarray) -> None:
        """Inside a call (arrival .. end on its chain) nothing weighs; its end takes no local edge."""
        for a, e in zip(self.pos[arr].tolist(), self.pos[end].tolist()):  # one slice per call
            inner = self.link[a + 1:e + 1]
            inner = inner[inner >= 0]
            self.w[inner], self.typ[inner] = 0, E.WAIT
        self.link[self.pos[end]] = -1
        self.dead |= np.isin(self.g.dst, end)

    def send_ends(self, end: np.ndarray) -> None:
        """A host p2p send (gloo): its span runs from the send to the return of its deferred wait, and may hold the
        rank's next work (``torch.distributed.pipelining`` waits a microbatch's sends after its next forward), so it
        is not cut. gloo completes a send only once the receiver posted its receive (measured: bench/RESULTS.md,
        "gloo sends wait for their receiver"): the span's last stretch, after the last point inside it, waited for
        that meeting (``join`` hangs the end on it), not the rank's own time."""
        last = self.link[self.pos[end]]
        last = last[last >= 0]
        self.w[last], self.typ[last] = 0, E.WAIT

    def add(self, src: np.ndarray, dst: np.ndarray, w: np.ndarray, typ: int) -> None:
        self.extra.append((np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(w, np.int64), typ))

    def issue(self, issuer_ev: np.ndarray, arr: np.ndarray) -> None:
        g = self.g
        src = g.node(issuer_ev, True)
        self.add(src, arr, np.maximum(g.node_ts[arr] - g.node_ts[src], 0), E.LAUNCH)

    def blocking_syncs(self) -> None:
        """A blocking runtime call returns after its own device op: device end -> call end."""
        from rankscope.analysis.deps.gpu import is_blocking

        g, ev = self.g, self.ev
        calls = np.unique(g.node_ev[(g.node_start == False) & is_blocking(ev)[g.node_ev]])  # noqa: E712
        dev = ev.partner[calls]
        ok = (dev >= 0) & (ev.stream[np.maximum(dev, 0)] >= 0)
        calls, dev = calls[ok], dev[ok]
        ok = np.isin(dev, g.node_ev) & (ev.end[dev] <= ev.end[calls] + GPU_WAKE_NS)
        calls, dev = calls[ok], dev[ok]
        more_calls, more_dev = self._whole_device_syncs()
        calls, dev = np.r_[calls, more_calls], np.r_[dev, more_dev]
        has_sync = np.isin(g.node(calls, False), g.dst[g.typ == E.SYNC])
        calls, dev = calls[~has_sync], dev[~has_sync]
        self.add(g.node(dev, False), g.node(calls, False), np.maximum(ev.end[calls] - ev.end[dev], 0), E.SYNC)

    def _whole_device_syncs(self) -> tuple[np.ndarray, np.ndarray]:
        """Ascend's syncs (``events.ASCEND_BLOCKING``), and the device op each waited for: the last of the graph's to
        end while the call was blocked (none: it did not wait)."""
        from rankscope.analysis.deps.events import ASCEND_BLOCKING

        g, ev = self.g, self.ev
        calls = np.unique(g.node_ev[~g.node_start & ev.name_in(set(ASCEND_BLOCKING))[g.node_ev]])
        dev_end = np.flatnonzero(~g.node_start & (ev.stream[g.node_ev] >= 0))
        if not len(calls) or not len(dev_end):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        o = dev_end[np.argsort(g.node_ts[dev_end], kind="stable")]
        j = np.searchsorted(g.node_ts[o], ev.end[calls] + ROUND_NS, side="right") - 1
        found = g.node_ev[o[np.maximum(j, 0)]]
        ok = (j >= 0) & (ev.end[found] >= ev.ts[calls])
        return calls[ok], found[ok]

    def wakes(self, completions: np.ndarray, starts: np.ndarray, execs: np.ndarray) -> None:
        """Host threads idle until a collective of an executor thread ended: the wait weighs 0. The
        collective's end is the last one before the thread resumed (within ``WAKE_NS``; ``RESUME_NS`` where it
        resumed by closing a wait or a communication span), else the first
        one after it, when that collective's span was open at the resumption and closed within
        ``LATE_END_NS`` and within the idle time (gloo's worker thread closes the span after waking the
        waiter: a short gap that a running collective outlives by more is not a wait for it)."""
        g, ev = self.g, self.ev
        if not len(completions):
            return
        o = np.argsort(g.node_ts[completions], kind="stable")
        c_sorted, ct, cs = completions[o], g.node_ts[completions][o], g.node_ts[starts][o]
        links = self.link[self.link >= 0]
        links = links[self.typ[links] != E.WAIT]
        u, v = g.src[links], g.dst[links]
        host = (ev.stream[g.node_ev[v]] < 0) & ~np.isin(ev.tid[g.node_ev[v]], execs)
        # the end of a wait, of a framework's communication span (FSDP::all_gather, functional
        # collectives), or of an operator that issued a collective (an autograd Function around
        # all_to_all_single waits in an untraced Work.wait()): the thread sits there until the
        # collective it runs elsewhere is done
        closing = (ev.name_has(WAIT_NAMES) | ev.is_comm)[g.node_ev[v]] & ~g.node_start[v]
        waity = closing | (issued(ev)[g.node_ev[v]] & ~g.node_start[v])
        cand = host & (g.node_start[v] | waity)
        tu, tv = g.node_ts[u], g.node_ts[v]
        j = np.searchsorted(ct, tv + ROUND_NS, side="right") - 1
        jj = np.maximum(j, 0)
        before = cand & (j >= 0) & (ct[jj] > tu) & (tv - ct[jj] <= np.where(closing, RESUME_NS, WAKE_NS))
        k = np.minimum(j + 1, len(ct) - 1)
        late = ct[k] - tv
        after = cand & ~before & (j + 1 < len(ct)) & (cs[k] < tv) & (late <= LATE_END_NS) & (late <= tv - tu)
        ok = before | after
        pick = np.where(before, jj, k)[ok]
        self.w[links[ok]], self.typ[links[ok]] = 0, E.WAIT
        self.add(c_sorted[pick], v[ok], np.maximum(tv[ok] - ct[pick], 0), E.SYNC)

    def stream_waits(self) -> None:
        """A device op that started right as another stream's op ended, after it was ready (or with no edge in)."""
        g, ev = self.g, self.ev
        starts = np.flatnonzero(g.node_start & (ev.stream[g.node_ev] >= 0))
        ends = np.flatnonzero(~g.node_start & (ev.stream[g.node_ev] >= 0))
        if not len(starts) or not len(ends):
            return
        ready = np.full(g.n, -1, np.int64)  # when the op's last known predecessor happened
        live = np.flatnonzero(~self.dead)
        np.maximum.at(ready, g.dst[live], g.node_ts[g.src[live]])
        o = np.argsort(g.node_ts[ends], kind="stable")
        e_ts, e_n = g.node_ts[ends][o], ends[o]
        t, r = g.node_ts[starts], ready[starts]
        j = np.searchsorted(e_ts, t + ROUND_NS, side="right") - 1
        jj = np.maximum(j, 0)
        gap = np.maximum(t - e_ts[jj], 0)
        # an op with no edge in (no launch edge: HTA gives one only to a launch into an empty queue; Ascend's HCCL ops
        # have no launch in the trace) has nothing else to have waited for
        ready_before = (r < 0) | ((e_ts[jj] > r) & (t - r > 2 * gap + ROUND_NS))
        ok = (j >= 0) & ready_before & (gap <= GPU_WAKE_NS)
        ok &= ev.stream[g.node_ev[e_n[jj]]] != ev.stream[g.node_ev[starts]]
        s = starts[ok]
        self.waited = s
        zero = np.isin(g.dst, s) & ~self.dead
        self.w[zero], self.typ[zero] = 0, np.where(self.typ[zero] == E.OPERATOR, E.OPERATOR, E.WAIT)
        self.add(e_n[jj[ok]], s, gap[ok], E.SYNC)

    def done(self) -> RankGraph:
        g = self.g
        keep = np.flatnonzero(~self.dead | np.isin(np.arange(len(g.src)), self.link[self.link >= 0]))
        remap = np.full(len(g.src), -1, np.int64)
        remap[keep] = np.arange(len(keep))
        ex = self.extra
        src = np.concatenate([g.src[keep]] + [e[0] for e in ex])
        dst = np.concatenate([g.dst[keep]] + [e[1] for e in ex])
        w = np.concatenate([self.w[keep]] + [e[2] for e in ex])
        typ = np.concatenate([self.typ[keep]] + [np.full(len(e[0]), e[3], np.int8) for e in ex])
        n_ex = sum(len(e[0]) for e in ex)
        attr = np.concatenate([g.attr[keep], np.full(n_ex, -1, np.int64)])
        seq = np.concatenate([g.seq[keep], g.seq.max(initial=0) + 1 + np.arange(n_ex)])
        link = np.where(self.link >= 0, remap[np.maximum(self.link, 0)], -1)
        return RankGraph(g.node_ev, g.node_start, g.node_ts, src, dst, np.maximum(w, 0), w, typ, attr, seq,
                         g.order, link)
