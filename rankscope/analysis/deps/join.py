"""The ranks of one step joined: a max-plus graph over the anchors of every rank.

Pattern: each rank brings its anchors (step start, each call's arrival and end, step end) and the
longest local paths between them (``local.AnchorMatrix``). A call matched across ranks (same key:
group and sequence, or a p2p pair) gets a node X: every member's arrival -> X (weight 0; the time a
member waits is the gap between its arrival and the last one), X -> every member's end (weight the
transfer: the shortest span over the members, the one of the member that did not wait). A p2p pair
is such a meeting of two: neither end comes before both were posted. A device send (NCCL) returns only
once its receiver took the data, and so does a host send (gloo completes a send once the receiver posted
its receive: tests/e2e/test_p2p_wait.py); a gloo send's span closes at a wait deferred to later
(``torch.distributed.pipelining`` waits a microbatch's sends after its next forward), so the rank graph keeps
the work inside it (``timed._Builder.send_ends``). A p2p pair's transfer is its fastest message in the step
(``_fastest_pairs``). The
longest path of this DAG is the step's critical path at anchor level; it needs no clock alignment,
as every weight is a duration measured on one rank.

Algorithm: topological levels once per step (relaxation rounds over the edge arrays), then one
vectorized relaxation per level for every set of weights (the what-if reuses the levels).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rankscope.analysis.deps.local import NEG

LOCAL, WAIT, XFER, OWN = 0, 1, 2, 3  # anchor edge kinds: local path, arrival -> X, X -> end, unmatched call


@dataclass
class RankStep:
    """What one rank brings to the join for one step (built by ``analysis.rank_part``)."""

    rank: int
    d: np.ndarray  # AnchorMatrix.d
    keys: list  # per call: matching key or None
    span: np.ndarray  # per call: its own span on this rank (end - arrival), ns
    sig: tuple  # per call (op, kind): ranks with the same signature are compared in the what-if
    host_send: np.ndarray | None = None  # per call: a host p2p send (gloo), whose span the rank graph did not cut


@dataclass
class Joined:
    """The anchor DAG of one step."""

    n: int
    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray
    kind: np.ndarray
    ref: np.ndarray  # LOCAL: (rank index, source row, target col); X edges: (rank index, call, -1)
    x_key: list  # key of each X node (index = node - x_base)
    x_base: int
    rank_base: np.ndarray  # first anchor node of each rank
    ranks: list[RankStep]
    level_order: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    level_bounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    group_first: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def anchor_ids(k: int) -> tuple[int, np.ndarray, np.ndarray, int]:
    """Local anchor numbering of a rank with k calls: START, arrivals, ends, SINK."""
    return 0, 1 + np.arange(k), 1 + k + np.arange(k), 1 + 2 * k


class _Edges:
    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, int, np.ndarray]] = []

    def add(self, src: np.ndarray, dst: np.ndarray, w: np.ndarray, kind: int, ref: np.ndarray) -> None:
        self.parts.append((np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(w, np.int64), kind,
                           np.asarray(ref, np.int64).reshape(-1, 3)))

    def cat(self, i: int) -> np.ndarray:
        if not self.parts:
            return np.zeros((0, 3) if i == 4 else 0, np.int64)
        if i == 3:
            return np.concatenate([np.full(len(p[0]), p[3], np.int8) for p in self.parts])
        return np.concatenate([p[i] for p in self.parts])


class CycleError(RuntimeError):
    """The calls of one step wait for each other in a ring: no order satisfies every meeting."""


def join_step(ranks: list[RankStep]) -> Joined:
    """``join``; where sends that meet their receivers close a ring (two ranks that each send before they
    receive, as ``batch_isend_irecv`` posts them, or a trace that pairs such sends), every send is joined as eager
    instead: the data cannot say which waited. Raises ``CycleError`` if a ring remains."""
    try:
        return join(ranks)
    except CycleError:
        return join(ranks, eager_sends=True)


def join(ranks: list[RankStep], eager_sends: bool = False) -> Joined:
    """The anchor DAG of one step over the given ranks; ``eager_sends``: every p2p send's end waits for nothing of
    its receiver's (a device send, whose span the rank graph cut, then keeps its own span)."""
    base = np.cumsum([0] + [2 + 2 * len(r.keys) for r in ranks])
    nb = int(base[-1])
    ed = _Edges()
    members: dict = {}
    for ri, r in enumerate(ranks):
        k = len(r.keys)
        start, arr, end, sink = anchor_ids(k)
        s, t = np.nonzero(r.d > NEG)
        ed.add(np.r_[start, end][s] + base[ri], np.r_[arr, sink][t] + base[ri], r.d[s, t], LOCAL,
               np.stack([np.full(len(s), ri), s, t], axis=1))
        for i, key in enumerate(r.keys):
            if key is not None:
                members.setdefault(key, []).append((ri, i))
        own = np.array([i for i, key in enumerate(r.keys) if key is None], np.int64)
        if len(own):  # a call no other rank meets here: its own span
            ed.add(arr[own] + base[ri], end[own] + base[ri], np.maximum(r.span[own], 0), OWN,
                   np.stack([np.full(len(own), ri), own, -np.ones(len(own), np.int64)], axis=1))
    x_keys = list(members)
    fastest = _fastest_pairs(ranks, members)
    for xi, key in enumerate(x_keys):
        mem = members[key]
        x = nb + xi
        # every member's end hangs on the meeting: a send too (NCCL's and gloo's complete once the receiver posted
        # its receive), unless a ring made the sends eager
        got = [(ri, i) for ri, i in mem if not _eager(ranks[ri], i, eager_sends)] or mem
        late = [(ri, i) for ri, i in mem if (ri, i) not in got and not _uncut(ranks[ri], i)]
        if late:  # a cut device send made eager: its own span (a host send kept its span: ``timed.rank_graph``)
            ed.add(np.array([base[ri] + 1 + i for ri, i in late]),
                   np.array([base[ri] + 1 + len(ranks[ri].keys) + i for ri, i in late]),
                   np.array([max(int(ranks[ri].span[i]), 0) for ri, i in late]), OWN,
                   np.array([[ri, i, -1] for ri, i in late]))
        t_ = max(0, min(int(ranks[ri].span[i]) for ri, i in mem))  # the member that did not wait
        t_ = min(t_, fastest.get(_pair(key), t_))
        a = np.array([base[ri] + 1 + i for ri, i in mem])
        e = np.array([base[ri] + 1 + len(ranks[ri].keys) + i for ri, i in got])
        ed.add(a, np.full(len(a), x), np.zeros(len(a)), WAIT, np.array([[ri, i, -1] for ri, i in mem]))
        ed.add(np.full(len(e), x), e, np.full(len(e), t_), XFER, np.array([[ri, i, -1] for ri, i in got]))
    j = Joined(nb + len(x_keys), ed.cat(0), ed.cat(1), ed.cat(2), ed.cat(3), ed.cat(4), x_keys, nb,
               base[:-1].astype(np.int64), ranks)
    _levels(j)
    return j


def _eager(r: RankStep, i: int, sends: bool) -> bool:
    """Whether call ``i`` of ``r`` is a send whose end waits for nothing of its receiver's (``sends``: a ring)."""
    return sends and tuple(r.sig[i]) == ("send", "p2p")


def _uncut(r: RankStep, i: int) -> bool:
    """Whether call ``i`` of ``r`` is a host send, whose span the rank graph kept (``timed.rank_graph``)."""
    return bool(r.host_send is not None and r.host_send[i])


def _pair(key: object) -> str | None:
    """"p2p:1->3" for a p2p key "p2p:1->3#5"; None for a collective's."""
    k = str(key)
    return k.split("#", 1)[0] if k.startswith("p2p:") else None


def _fastest_pairs(ranks: list[RankStep], members: dict) -> dict[str | None, int]:
    """Per p2p pair (sender -> receiver), the shortest span of any member of any of its messages in the step: the
    transfer of one message. A pipeline's two spans of one message may both hold waits for something else: gloo's
    send span closes at its deferred wait, a receive's span opens where the receive was posted. Measured
    (bench/workloads.py seed 3015, GPipe at 4 ranks): a message's shorter span was up to 39 ms, while the same pair's
    fastest was under 0.1 ms; the path ran 1.68x the step."""
    out: dict[str | None, int] = {}
    for key, mem in members.items():
        pair = _pair(key)
        if pair is not None:
            t = min(int(ranks[ri].span[i]) for ri, i in mem)
            out[pair] = min(out.get(pair, t), max(t, 0))
    return out


def _levels(j: Joined) -> None:
    """Topological levels (longest hop count from a source); edges sorted by their target's level."""
    level = np.zeros(j.n, np.int64)
    for _ in range(j.n + 1):
        new = level.copy()
        if len(j.src):
            np.maximum.at(new, j.dst, level[j.src] + 1)
        if np.array_equal(new, level):
            break
        level = new
    else:
        raise CycleError("the joined step graph has a cycle")
    o = np.lexsort((j.dst, level[j.dst]))  # by level, then by target within a level
    j.level_order = o
    lv, d = level[j.dst][o], j.dst[o]
    j.level_bounds = np.r_[0, np.flatnonzero(lv[1:] != lv[:-1]) + 1, len(o)]
    j.group_first = np.flatnonzero(np.r_[True, (lv[1:] != lv[:-1]) | (d[1:] != d[:-1])])


def longest(j: Joined, w: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Distances into every anchor (sources at 0) and the path's end anchor. ``w`` may hold several
    weight sets as columns (edges x sets): then distances are (anchors x sets), all solved at once."""
    w = j.w if w is None else w
    dist = np.zeros((j.n,) + w.shape[1:], np.int64)
    o, b, gf = j.level_order, j.level_bounds, j.group_first
    src, dst = j.src[o], j.dst[o]
    wo = w[o]
    g_lo = np.searchsorted(gf, b[:-1])
    g_hi = np.searchsorted(gf, b[1:])
    for lo, hi, a, z in zip(b[:-1].tolist(), b[1:].tolist(), g_lo.tolist(), g_hi.tolist()):  # one step per level
        val = dist[src[lo:hi]] + wo[lo:hi]
        firsts = gf[a:z]
        best = np.maximum.reduceat(val, firsts - lo, axis=0)
        t = dst[firsts]
        dist[t] = np.maximum(dist[t], best)
    return dist, int(np.argmax(dist if dist.ndim == 1 else dist[:, 0])) if j.n else -1


def path_edges(j: Joined, dist: np.ndarray, end: int, w: np.ndarray | None = None) -> list[int]:
    """Anchor edges of the longest path ending at ``end``, source first (ties: first edge)."""
    w = j.w if w is None else w
    val = dist[j.src] + w
    into: dict[int, list[int]] = {}
    for e in np.flatnonzero(val == dist[j.dst]).tolist():
        into.setdefault(int(j.dst[e]), []).append(e)
    out, v = [], end
    for _ in range(j.n):
        es = into.get(v)
        if not es:
            break
        e = es[0]
        out.append(e)
        v = int(j.src[e])
    return out[::-1]
