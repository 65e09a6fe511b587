"""Host threads as chains of points: HTA's call-stack edges, vectorized.

Pattern (HTA 0.5.0, ``CallStackGraph._construct_call_stack_graph`` and
``CPGraph._construct_graph_from_call_stack``): the events of a thread are split into start and end
points, sorted by HTA's ``compare_events`` (time; at one time ends before starts, longer starts
first, shorter ends first), and pushed / popped on a stack, where an end pops whatever is on top.
A depth-first walk of the resulting tree visits the points in that sorted order, each end standing
for the event it popped. Consecutive points of operator / runtime events are joined: inside a
top-level operator by an edge weighted with the time between them (an OPERATOR_KERNEL edge,
zero for the exit of a blocking call), between top-level operators by a DEPENDENCY edge.

Algorithm: the stack is simulated without a loop. The element at stack position p is always the
last start pushed at position p, so the parent of a start pushed at p, and the event an end pops
from p, are found by a search over (thread, position, sequence) keys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankscope.analysis.deps.events import RankEvents


@dataclass
class Points:
    """The node points of all host threads, thread after thread, in walk order."""

    ev: np.ndarray  # event of each point
    start: np.ndarray  # bool: start (True) or end point
    first: np.ndarray  # bool: the first point of its thread (no edge into it from the thread)
    dep: np.ndarray  # bool: the edge into it is a DEPENDENCY (between top-level operators)
    parent: np.ndarray  # call-stack parent of the point's event (-1: none), for attribution


def parents_and_walk(ev: RankEvents, members: np.ndarray) -> tuple[np.ndarray, ...]:
    """Call-stack walk of the ``members`` events (indices, all with dur > 0).

    Returns (point event, is start, thread id, parent of each member event as a full-size array,
    the event each point belongs to before an end is read as the event it popped)."""
    n = len(members)
    parent = np.full(ev.n, -1, dtype=np.int64)
    if n == 0:
        e = np.zeros(0, np.int64)
        return e, np.zeros(0, bool), e, parent, e
    idx = np.concatenate([members, members])
    is_start = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    dur = ev.dur[idx]
    time = np.where(is_start, ev.ts[idx], ev.ts[idx] + dur)
    k2 = np.where(is_start, -dur, dur)
    k3 = np.where(is_start, idx, -idx)
    tid = ev.tid[idx]
    order = np.lexsort((k3, k2, is_start, time, tid))  # compare_events, thread by thread
    p_ev, p_start, p_tid = idx[order], is_start[order], tid[order]
    step = np.where(p_start, 1, -1)
    new_thread = np.r_[True, p_tid[1:] != p_tid[:-1]]
    csum = np.cumsum(step)
    base = np.maximum.accumulate(np.where(new_thread, np.arange(len(csum)), 0))
    before = csum - step - (csum[base] - step[base])  # depth before each point, per thread
    pos = np.where(p_start, before, before - 1)
    thread_no = np.cumsum(new_thread) - 1
    seq = np.arange(len(p_ev))
    s = np.flatnonzero(p_start)
    width = int(pos.max()) + 2 if len(pos) else 1
    key_s = (thread_no[s] * width + pos[s]) * (len(seq) + 1) + seq[s]
    ks_order = np.argsort(key_s, kind="stable")
    key_sorted, s_sorted = key_s[ks_order], s[ks_order]

    def last_start(at: np.ndarray, level: np.ndarray) -> np.ndarray:
        """The last start before point ``at`` at stack position ``level`` of its thread (-1: none)."""
        q = (thread_no[at] * width + level) * (len(seq) + 1) + seq[at]
        j = np.searchsorted(key_sorted, q, side="left") - 1
        ok = (j >= 0) & (level >= 0)
        jj = np.maximum(j, 0)
        ok &= (key_sorted[jj] // (len(seq) + 1)) == (thread_no[at] * width + level)
        return np.where(ok, p_ev[s_sorted[jj]], -1)

    parent[p_ev[s]] = last_start(s, pos[s] - 1)
    e = np.flatnonzero(~p_start)
    popped = last_start(e, pos[e])
    walk_ev = p_ev.copy()
    walk_ev[e] = np.where(popped >= 0, popped, p_ev[e])
    return walk_ev, p_start, p_tid, parent, p_ev


def thread_points(ev: RankEvents, members: np.ndarray, is_node: np.ndarray) -> Points:
    """The walk of every thread restricted to node events, with HTA's edge kinds between points."""
    walk_ev, walk_start, walk_tid, parent, _ = parents_and_walk(ev, members)
    keep = is_node[walk_ev]
    p_ev, p_start, p_tid = walk_ev[keep], walk_start[keep], walk_tid[keep]
    first = np.r_[True, p_tid[1:] != p_tid[:-1]] if len(p_ev) else np.zeros(0, bool)
    step = np.where(p_start, 1, -1)
    csum = np.cumsum(step)
    base_idx = np.maximum.accumulate(np.where(first, np.arange(len(csum)), 0)) if len(csum) else csum
    after = csum - (csum[base_idx] - step[base_idx]) if len(csum) else csum  # operator depth after a point
    prev_after = np.r_[0, after[:-1]] if len(after) else after
    dep = ~first & (prev_after == 0)
    return Points(p_ev, p_start, first, dep, parent[p_ev])


def fix_nesting(ev: RankEvents, tol: int = 1_000, rounds: int = 3) -> RankEvents:
    """The events with host spans that overlap by at most ``tol`` ns made to nest (a copy).

    Rounding in the writer leaves a parent ending 1 ns after the next operator started, or a
    child ending just after its parent; on HTA's stack an end then pops the wrong event and an
    operator swallows the time of its neighbour (HTA leaves it so; HTA's own code notes the issue,
    pytorch/pytorch#122425). An end that popped another event is moved: to that event's start when
    it started within ``tol`` of the end, else the other event's end to this one when within ``tol``,
    else (a span opened inside the operator and closed after it) this one's end to the other's."""
    from dataclasses import replace

    dur = ev.dur.copy()
    for _ in range(rounds):
        cur = replace(ev, dur=dur, memo={})
        members = np.flatnonzero((cur.stream == -1) & (dur > 0))
        walk_ev, start, _, _, own = parents_and_walk(cur, members)
        bad = np.flatnonzero(~start & (walk_ev != own))
        x, y = own[bad], walk_ev[bad]
        end_x = cur.ts[x] + dur[x]
        end_y = cur.ts[y] + dur[y]
        early = (cur.ts[y] >= end_x - tol) & (cur.ts[y] <= end_x) & (cur.ts[y] > cur.ts[x])
        late = ~early & (end_y > end_x) & (cur.ts[y] >= cur.ts[x])
        if not (early.any() or late.any()):
            break
        dur[x[early]] = cur.ts[y[early]] - cur.ts[x[early]]
        near = late & (end_y - end_x <= tol)
        dur[y[near]] = end_x[near] - cur.ts[y[near]]
        # a span started inside an operator and ending long after it (gloo's p2p span, opened by
        # ``c10d::recv_`` and closed by the wait): the operator is taken to last until it ends
        far = late & ~near
        dur[x[far]] = np.maximum(dur[x[far]], end_y[far] - cur.ts[x[far]])
    return replace(ev, dur=dur, memo={})
