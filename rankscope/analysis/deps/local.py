"""One rank's step reduced to its anchors: longest local paths between the points where ranks meet.

Pattern: across ranks, a rank's step only touches the others at its communication calls: a call's
end waits for the last member's arrival. So the rank's graph can be summarized, before the ranks
are joined, by the longest local path from each *source* (the step's start, each call's end) to
each *target* (each call's arrival, and the step's end = the farthest node). The joined problem
is then a small max-plus graph over these anchors (``join``).

Algorithm: chains are first contracted to the nodes that matter (chain ends, cross-edge ends,
anchors: distances along a chain only add up between them). Then all sources at once, one column
each: the chain pass of ``path`` on a (nodes x sources) matrix, relaxed over the cross edges until
stable; unreachable stays at ``NEG``. A path between two anchors is recovered by a one-column
solve on the whole graph and backtracking (``local_path``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankscope.analysis.deps.graph import RankGraph

NEG = -(1 << 44)  # unreachable (about 5 hours below any real path)
REACH = NEG // 2


@dataclass
class AnchorMatrix:
    """Longest local paths: rows = sources [START, end of call 0..K-1], cols = [arrival 0..K-1, SINK]."""

    d: np.ndarray  # int64 (K+1, K+1), NEG where unreachable
    sink_node: np.ndarray  # per source: the node where its longest path ends


class _Layout:
    """Chains as position ranges, cross edges grouped by target position, for some kept positions."""

    def __init__(self, g: RankGraph, w: np.ndarray, keep: np.ndarray | None = None) -> None:
        start = g.link < 0
        lw = np.zeros(len(g.order), np.int64)
        lw[~start] = w[g.link[~start]]
        seg = np.cumsum(start) - 1
        c = np.cumsum(lw)
        c = c - c[np.flatnonzero(start)][seg]  # weight from the chain's start
        pos_all = np.arange(len(g.order)) if keep is None else np.flatnonzero(keep)
        self.node = g.order[pos_all]
        first = np.r_[True, seg[pos_all][1:] != seg[pos_all][:-1]] if len(pos_all) else np.zeros(0, bool)
        self.seg = np.cumsum(first) - 1
        self.seg_first = np.flatnonzero(first)
        # weight from the chain's first kept position (its start: starts are always kept)
        self.c = c[pos_all] - c[pos_all][self.seg_first][self.seg] if len(pos_all) else c[:0]
        where = np.full(g.n, -1, np.int64)
        where[self.node] = np.arange(len(self.node))
        self.where = where
        is_link = np.zeros(len(g.src), bool)
        is_link[g.link[~start]] = True
        cross = np.flatnonzero(~is_link)
        xd = where[g.dst[cross]]
        o = np.argsort(xd, kind="stable")
        self.cross, xd = cross[o], xd[o]
        self.xs, self.xw = where[g.src[self.cross]], w[self.cross]
        self.x_first = np.flatnonzero(np.r_[True, xd[1:] != xd[:-1]]) if len(xd) else np.zeros(0, np.int64)
        self.x_targets = xd[self.x_first] if len(xd) else xd

    @property
    def n(self) -> int:
        return len(self.node)


def _solve(lay: _Layout, seed: np.ndarray, max_rounds: int = 100_000) -> tuple[np.ndarray, int]:
    """Distances (positions x columns) from the seeded positions of each column."""
    c = lay.c
    dist = np.full((lay.n, seed.shape[1]), NEG, np.int64)
    for rounds in range(1, max_rounds + 1):
        b = seed.copy()
        if len(lay.xs):
            val = np.maximum(dist[lay.xs] + lay.xw[:, None], NEG)
            b[lay.x_targets] = np.maximum(b[lay.x_targets], np.maximum.reduceat(val, lay.x_first, axis=0))
        x = np.maximum(b - c[:, None], NEG)
        lo = np.minimum.reduceat(x, lay.seg_first, axis=0)
        span = np.maximum.reduceat(x, lay.seg_first, axis=0) - lo + 1
        off = (np.cumsum(span, axis=0) - span - lo)[lay.seg]
        new = np.maximum(c[:, None] + np.maximum.accumulate(x + off, axis=0) - off, NEG)
        new[new < REACH] = NEG
        if np.array_equal(new, dist):
            return dist, rounds
        dist = new
    raise RuntimeError("local longest paths did not converge (the graph has a cycle)")


class Local:
    """The local longest paths of one rank's step graph between its anchors."""

    def __init__(self, g: RankGraph, arrival: np.ndarray, end: np.ndarray) -> None:
        self.g, self.arrival, self.end = g, arrival, end
        start = g.link < 0
        has_in = np.zeros(g.n, bool)
        has_in[g.order[~start]] = True
        is_link = np.zeros(len(g.src), bool)
        is_link[g.link[~start]] = True
        has_in[g.dst[~is_link]] = True
        is_end = np.zeros(g.n, bool)
        is_end[end] = True
        self.sources = np.flatnonzero(~has_in & ~is_end)
        self.rounds = 0
        self._from: dict[int, tuple[np.ndarray, np.ndarray, _Layout]] = {}  # source row -> (dist, seeded, layout)

    def _keep(self) -> np.ndarray:
        """Positions that matter between anchors: chain ends, cross-edge ends, anchors, sources."""
        g = self.g
        pos = np.empty(g.n, np.int64)
        pos[g.order] = np.arange(g.n)
        start = g.link < 0
        keep = start | np.r_[start[1:], True]
        is_link = np.zeros(len(g.src), bool)
        is_link[g.link[~start]] = True
        cross = ~is_link
        keep[pos[g.src[cross]]] = True
        keep[pos[g.dst[cross]]] = True
        keep[pos[np.concatenate([self.arrival, self.end, self.sources])]] = True
        return keep

    def matrix(self) -> AnchorMatrix:
        """Longest local paths from every source to every target (contracted chains)."""
        lay = _Layout(self.g, self.g.w, self._keep())
        cols = [self.sources] + [np.array([e]) for e in self.end.tolist()]
        seed = np.full((lay.n, len(cols)), NEG, np.int64)
        for j, nodes in enumerate(cols):
            seed[lay.where[nodes], j] = 0
        dist, self.rounds = _solve(lay, seed)
        k = len(self.arrival)
        d = np.full((k + 1, k + 1), NEG, np.int64)
        if k:
            d[:, :k] = dist[lay.where[self.arrival]].T
        if lay.n:
            d[:, k] = dist.max(axis=0)
            sink = lay.node[np.argmax(dist, axis=0)]
        else:
            sink = np.zeros(k + 1, np.int64)
        return AnchorMatrix(d, sink)

    def local_path(self, source: int, target: int) -> list[int]:
        """Edge ids of the longest local path from source row ``source`` (0 = START, i+1 = end of
        call i) to node ``target``; [] when unreachable or the same node."""
        if source not in self._from:
            g = self.g
            lay = _Layout(g, g.w)
            nodes = self.sources if source == 0 else np.array([self.end[source - 1]])
            seed = np.full((lay.n, 1), NEG, np.int64)
            seed[lay.where[nodes], 0] = 0
            dist_pos, _ = _solve(lay, seed)
            dist = np.full(g.n, NEG, np.int64)
            dist[lay.node] = dist_pos[:, 0]
            seeded = np.zeros(g.n, bool)
            seeded[nodes] = True
            self._from[source] = (dist, seeded, lay)
        dist, seeded, lay = self._from[source]
        if dist[target] <= REACH:
            return []
        return _backtrack(self.g, lay, dist, seeded, target)


def _backtrack(g: RankGraph, lay: _Layout, dist: np.ndarray, seeded: np.ndarray, target: int) -> list[int]:
    """Follow, from ``target``, an in-edge that gives each node its distance (chain links first)."""
    if not hasattr(lay, "into"):
        into: dict[int, list[int]] = {}
        for e in sorted(lay.cross.tolist(), key=lambda e: g.seq[e]):
            into.setdefault(int(g.dst[e]), []).append(e)
        pos = np.empty(g.n, np.int64)
        pos[g.order] = np.arange(g.n)
        lay.into, lay.pos = into, pos  # type: ignore[attr-defined]
    into, pos = lay.into, lay.pos  # type: ignore[attr-defined]
    edges: list[int] = []
    v = target
    for _ in range(g.n):
        if seeded[v] and dist[v] == 0:
            break
        link = int(g.link[pos[v]])
        cands = ([link] if link >= 0 else []) + into.get(v, [])
        nxt = next((e for e in cands if dist[g.src[e]] > REACH and dist[g.src[e]] + g.w[e] == dist[v]), None)
        if nxt is None:
            break
        edges.append(nxt)
        v = int(g.src[nxt])
    return edges[::-1]
