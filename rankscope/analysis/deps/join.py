"""The ranks of one step joined: a max-plus graph over the anchors of every rank.

Pattern: each rank brings its anchors (step start, each call's arrival and end, step end) and the
longest local paths between them (``local.AnchorMatrix``). A call matched across ranks (same key:
group and sequence, or a p2p pair) gets a node X: every member's arrival -> X (weight 0; the time a
member waits is the gap between its arrival and the last one), X -> every member's end (weight the
transfer: the shortest span over the members, the one of the member that did not wait). The
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


def anchor_ids(k: int) -> tuple[int, np.ndarray, np.ndarray, int]:
    """Local anchor numbering of a rank with k calls: START, arrivals, ends, SINK."""
    return 0, 1 + np.arange(k), 1 + k + np.arange(k), 1 + 2 * k


def join(ranks: list[RankStep]) -> Joined:
    """The anchor DAG of one step over the given ranks."""
    base, nb = [], 0
    for r in ranks:
        base.append(nb)
        nb += 2 + 2 * len(r.keys)
    src, dst, w, kind, ref = [], [], [], [], []
    members: dict = {}
    for ri, r in enumerate(ranks):
        k = len(r.keys)
        start, arr, end, sink = anchor_ids(k)
        rows = np.r_[start, end] + base[ri]
        cols = np.r_[arr, sink] + base[ri]
        s, t = np.nonzero(r.d > NEG)
        src.append(rows[s]), dst.append(cols[t]), w.append(r.d[s, t]), kind.append(np.full(len(s), LOCAL))
        ref.append(np.stack([np.full(len(s), ri), s, t], axis=1))
        for i, key in enumerate(r.keys):
            members.setdefault(key, []).append((ri, i)) if key is not None else None
        own = [i for i, key in enumerate(r.keys) if key is None]
        if own:
            o = np.array(own)
            src.append(arr[o] + base[ri]), dst.append(end[o] + base[ri]), w.append(np.maximum(r.span[o], 0))
            kind.append(np.full(len(o), OWN)), ref.append(np.stack([np.full(len(o), ri), o, -np.ones(len(o), int)], 1))
    x_keys = list(members)
    for xi, key in enumerate(x_keys):
        mem = members[key]
        x = nb + xi
        t = max(0, min(int(ranks[ri].span[i]) for ri, i in mem))
        k_of = [len(ranks[ri].keys) for ri, _ in mem]
        a = np.array([base[ri] + 1 + i for ri, i in mem])
        e = np.array([base[ri] + 1 + k + i for (ri, i), k in zip(mem, k_of)])
        src.append(a), dst.append(np.full(len(a), x)), w.append(np.zeros(len(a), np.int64)), kind.append(np.full(len(a), WAIT))
        src.append(np.full(len(e), x)), dst.append(e), w.append(np.full(len(e), t)), kind.append(np.full(len(e), XFER))
        r_ = np.array([[ri, i, -1] for ri, i in mem])
        ref.append(r_), ref.append(r_)
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    j = Joined(nb + len(x_keys), cat(src, np.int64), cat(dst, np.int64), cat(w, np.int64), cat(kind, np.int8),
               np.concatenate(ref).astype(np.int64) if ref else np.zeros((0, 3), np.int64), x_keys, nb,
               np.array(base, np.int64), ranks)
    _levels(j)
    return j


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
        raise RuntimeError("the joined step graph has a cycle")
    o = np.argsort(level[j.dst], kind="stable")
    j.level_order = o
    lv = level[j.dst][o]
    j.level_bounds = np.r_[0, np.flatnonzero(lv[1:] != lv[:-1]) + 1, len(o)]


def longest(j: Joined, w: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Distances into every anchor (sources at 0) and the path's end anchor."""
    w = j.w if w is None else w
    dist = np.zeros(j.n, np.int64)
    o, b = j.level_order, j.level_bounds
    for lo, hi in zip(b[:-1].tolist(), b[1:].tolist()):  # one relaxation per level
        e = o[lo:hi]
        np.maximum.at(dist, j.dst[e], dist[j.src[e]] + w[e])
    return dist, int(np.argmax(dist)) if j.n else -1


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
