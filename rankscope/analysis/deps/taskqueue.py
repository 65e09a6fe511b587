"""torch_npu's task queue in the dependency graph: an op's work is launched by the thread that dequeues it.

With ``TASK_QUEUE_ENABLE`` (torch_npu's default), an operator on the training thread only enqueues its work
("Enqueue", nested in the op); a second thread takes it ("Dequeue@<op>") and makes the CANN calls that put its tasks
on a stream. torch_npu's ``torch_to_npu`` flows still link each task to the operator (``model/readers/ascend/flows``),
so read as HTA reads a CUDA trace, a task could start as soon as the operator did, and the time the work waited in
the queue, or for the dequeuing thread, would sit on no thread.

Pattern: the reader gives each Enqueue and its Dequeue one correlation from ``schema.QUEUE_IDS`` up.
- ``relaunch``: a host op whose correlation names a device op, with an Enqueue inside it on its thread whose Dequeue
  is known, hands that correlation to the Dequeue: the Dequeue is the launch (as ``cudaLaunchKernel`` is on CUDA).
  ``queued_from`` keeps each Dequeue's Enqueue. Where ops nested in one another each launched a task around one
  Enqueue, the innermost takes it; the others keep their own launch.
- ``edges``: an edge from each Enqueue's start to its Dequeue's start. Where the dequeuing thread had finished its
  previous Dequeue when the work came, it was waiting for this work: the edge carries the time from the Enqueue to
  the Dequeue, and the thread's gap before the Dequeue weighs nothing. Where it was still busy, the work waited for
  that thread, whose own chain carries the time, and the edge weighs 0 (it still orders the two).
- ``submissions``: every task hangs on its Dequeue's submission, whatever HTA's launch rule kept (below).
- ``launched_by``: when a Dequeue put its task on the stream: the earlier of its end and the task's start (HTA's
  rules take a launch call's start, which for a Dequeue can be a millisecond before the submission). The stream's
  queue lengths (``gpu.queue_lengths``), the launch edges (``gpu.device_edges``) and the late launches
  (``timed._Builder.late_launches``) count from it; for any other launch it is the call's start, as in HTA.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rankscope.model.schema import QUEUE_IDS

if TYPE_CHECKING:
    from rankscope.analysis.deps.events import RankEvents


ENQUEUE, DEQUEUE = "Enqueue", "Dequeue"  # the names' prefixes (torch_npu's "Enqueue", "Dequeue@<op>")


def relaunch(ev: "RankEvents") -> None:
    """Move each launching op's correlation to the Dequeue of the Enqueue inside it; fill ``ev.queued_from``."""
    if not (ev.corr >= QUEUE_IDS).any():
        return
    enq_name = np.array([str(s).startswith(ENQUEUE) for s in ev.names] + [False], bool)
    deq_name = np.array([str(s).startswith(DEQUEUE) for s in ev.names] + [False], bool)
    ev.queued_from = pairs(enq_name[ev.name_idx], deq_name[ev.name_idx], ev.corr)
    partner = ev.partner
    host = np.flatnonzero((partner >= 0) & (ev.stream < 0) & (ev.corr < QUEUE_IDS))
    host = host[ev.stream[partner[host]] >= 0]
    host, d = dequeue_of(ev.queued_from, host, ev.tid, ev.ts, ev.end)
    ev.corr = ev.corr.copy()  # the table's own buffer may be read-only
    ev.corr[d], ev.corr[host] = ev.corr[host], -1
    ev.memo.clear()  # partner, launch: from the new correlations


def pairs(is_enq: np.ndarray, is_deq: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """Per event: for a Dequeue, the row of its Enqueue (exactly one of each with its queue id); else -1."""
    q = np.flatnonzero((corr >= QUEUE_IDS) & (is_enq | is_deq))
    o = np.lexsort((is_deq[q], corr[q]))
    q = q[o]
    c, deq = corr[q], is_deq[q]
    ok = (c[1:] == c[:-1]) & ~deq[:-1] & deq[1:]
    if len(q) > 1:  # and no third event holds the id
        ok &= np.r_[True, c[1:-1] != c[:-2]] & np.r_[c[2:] != c[1:-1], True]
    out = np.full(len(corr), -1, np.int64)
    out[q[1:][ok]] = q[:-1][ok]
    return out


def dequeue_of(queued_from: np.ndarray, host: np.ndarray, tid: np.ndarray, ts: np.ndarray,
               end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(host rows, their Dequeue rows) for the launching ``host`` ops that hold an Enqueue with a known Dequeue (the
    first Enqueue starting inside the op on its thread). Where ops nested in one another share that Enqueue, the
    innermost takes it; the others keep their own launch."""
    deq = np.flatnonzero(queued_from >= 0)
    enq = queued_from[deq]
    inner = _first_inside(tid, ts, end, host, enq)
    deq_of = np.full(len(tid), -1, np.int64)
    deq_of[enq] = deq
    d = np.where(inner >= 0, deq_of[np.maximum(inner, 0)], -1)
    host, d = host[d >= 0], d[d >= 0]
    o = np.lexsort((-ts[host], d))
    host, d = host[o], d[o]
    first = np.r_[True, d[1:] != d[:-1]] if len(d) else np.zeros(0, bool)
    return host[first], d[first]


def _first_inside(tid: np.ndarray, ts: np.ndarray, end: np.ndarray, host: np.ndarray, enq: np.ndarray) -> np.ndarray:
    """For each host op: the first Enqueue that starts inside it on its thread (-1: none)."""
    if not len(host) or not len(enq):
        return np.full(len(host), -1, np.int64)
    _, code = np.unique(np.r_[tid[enq], tid[host]], return_inverse=True)
    t0 = int(min(ts[enq].min(), ts[host].min()))
    width = int(max(end[enq].max(), end[host].max())) - t0 + 1
    key_e = code[:len(enq)] * width + (ts[enq] - t0)
    key_h = code[len(enq):] * width + (ts[host] - t0)
    o = np.argsort(key_e, kind="stable")
    j = np.searchsorted(key_e[o], key_h, side="left")
    e = enq[o[np.minimum(j, len(o) - 1)]]
    ok = (j < len(o)) & (tid[e] == tid[host]) & (ts[e] <= end[host])
    return np.where(ok, e, -1)


def edges(ev: "RankEvents", in_graph: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Enqueue, Dequeue, weight, idle) per pair whose both ends are graph nodes (``in_graph``: event mask): the edge
    Enqueue start -> Dequeue start, and whether the dequeuing thread was idle when the work came."""
    none = np.zeros(0, np.int64)
    qf = ev.queued_from
    if qf is None:
        return none, none, none, np.zeros(0, bool)
    d = np.flatnonzero((qf >= 0) & in_graph)
    d = d[in_graph[qf[d]]]
    d = d[np.lexsort((ev.ts[d], ev.tid[d]))]
    e = qf[d]
    same = np.r_[False, ev.tid[d][1:] == ev.tid[d][:-1]]
    prev_end = np.r_[0, ev.end[d][:-1]]
    idle = ~same | (ev.ts[e] >= prev_end)
    w = np.where(idle, np.maximum(ev.ts[d] - ev.ts[e], 0), 0)
    return e, d, w.astype(np.int64), idle


def submissions(ev: "RankEvents", in_graph: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Dequeue, its device op, the time from the Dequeue's start to its submission) for each pair in the graph: a
    task never starts before its Dequeue submitted it. HTA keeps a launch edge only where the stream was empty at the
    launch, so a rank whose queue thread ran ahead has none, and one whose queue thread held its device has one: the
    ranks' graphs would differ in shape, and the what-if (which compares a rank's paths with the same paths on the
    others) would find nothing to compare the slow rank's dispatch with. This edge holds no wait: only the Dequeue's
    own time up to the submission."""
    qf = ev.queued_from
    none = np.zeros(0, np.int64)
    if qf is None:
        return none, none, none
    deq = np.flatnonzero((qf >= 0) & in_graph)
    op = ev.partner[deq]
    ok = op >= 0
    ok[ok] = (ev.stream[op[ok]] >= 0) & in_graph[op[ok]]
    deq, op = deq[ok], op[ok]
    return deq, op, np.maximum(launched_by(ev, deq, op) - ev.ts[deq], 0).astype(np.int64)


def launched_by(ev: "RankEvents", launch: np.ndarray, op: np.ndarray) -> np.ndarray:
    """The latest time each device op can have been put on its stream by its launch: a runtime call's start (HTA's
    reading: a CUDA launch returns within microseconds), but for a Dequeue, which can run for hundreds of
    microseconds (a CANN call that builds the operator) before its task is submitted, the earlier of its end and the
    op's start. A stream that ran dry before that waited for the Dequeue (``timed._Builder.late_launches``)."""
    qf = ev.queued_from
    if qf is None:
        return ev.ts[launch]
    return submitted(qf[launch] >= 0, ev.ts[launch], ev.end[launch], ev.ts[op])


def submitted(dequeue: np.ndarray, start: np.ndarray, end: np.ndarray, op_ts: np.ndarray) -> np.ndarray:
    """``launched_by`` from columns: each launch call's start, or where it is a Dequeue (``dequeue``), the earlier of
    its end and its device op's start (``op_ts``)."""
    return np.where(dequeue, np.minimum(end, op_ts), start)
