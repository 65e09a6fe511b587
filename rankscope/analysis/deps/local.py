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
BAND = 24  # sources per band when a step has many calls (each reaches the next 2 * BAND arrivals)
MARGIN_NS = 10_000  # a band's time window is widened by this (edges back in time: rounding)


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
        cross = cross[(where[g.src[cross]] >= 0) & (where[g.dst[cross]] >= 0)]
        xd = where[g.dst[cross]]
        o = np.argsort(xd, kind="stable")
        self.cross, xd = cross[o], xd[o]
        self.xs, self.xw = where[g.src[self.cross]], w[self.cross]
        self.x_first = np.flatnonzero(np.r_[True, xd[1:] != xd[:-1]]) if len(xd) else np.zeros(0, np.int64)
        self.x_targets = xd[self.x_first] if len(xd) else xd
        self.t = g.node_ts[self.node]

    @property
    def n(self) -> int:
        return len(self.node)


def _jacobi(c: np.ndarray, seg: np.ndarray, seg_first: np.ndarray, xs: np.ndarray, xw: np.ndarray,
            x_first: np.ndarray, x_targets: np.ndarray, base: np.ndarray, max_rounds: int = 100_000) -> tuple[np.ndarray, int]:
    """Chains ``c`` / ``seg`` with fixed inputs ``base`` (positions x columns) and cross edges among
    the same positions, relaxed until stable."""
    dist = np.full(base.shape, NEG, np.int64)
    if not len(c):
        return dist, 0
    for rounds in range(1, max_rounds + 1):
        b = base.copy()
        if len(xs):
            val = np.maximum(dist[xs] + xw[:, None], NEG)
            b[x_targets] = np.maximum(b[x_targets], np.maximum.reduceat(val, x_first, axis=0))
        x = np.maximum(b - c[:, None], NEG)
        lo = np.minimum.reduceat(x, seg_first, axis=0)
        span = np.maximum.reduceat(x, seg_first, axis=0) - lo + 1
        off = (np.cumsum(span, axis=0) - span - lo)[seg]
        new = np.maximum(c[:, None] + np.maximum.accumulate(x + off, axis=0) - off, NEG)
        new[new < REACH] = NEG
        if np.array_equal(new, dist):
            return dist, rounds
        dist = new
    raise RuntimeError("local longest paths did not converge (the graph has a cycle)")


WINDOW = 1024  # positions solved together; later ones wait for earlier ones (edges go forward in time)


def _solve(lay: _Layout, seed: np.ndarray) -> tuple[np.ndarray, int]:
    """Distances (positions x columns) from the seeded positions of each column.

    Relaxation rounds grow with the alternations between chains (a compute stream waiting for a
    communication stream and back, hundreds per step), so the positions are solved in windows of
    time: each window starts from the final values of the earlier ones. A last round over all
    positions catches the edges that go back in time (rounding), from those values as lower bounds."""
    n = lay.n
    if n <= 2 * WINDOW:
        return _jacobi(lay.c, lay.seg, lay.seg_first, lay.xs, lay.xw, lay.x_first, lay.x_targets, seed)
    win = np.empty(n, np.int64)
    win[np.argsort(lay.t, kind="stable")] = np.arange(n) // WINDOW
    prev = np.arange(n) - 1
    prev[lay.seg_first] = -1
    xt = np.repeat(lay.x_targets, np.diff(np.r_[lay.x_first, len(lay.xs)]))
    dist = np.full(seed.shape, NEG, np.int64)
    by_win = np.argsort(win, kind="stable")
    bounds = np.searchsorted(win[by_win], np.arange(win.max() + 2))
    e_order = np.argsort(win[xt], kind="stable")
    e_bounds = np.searchsorted(win[xt][e_order], np.arange(win.max() + 2))
    loc = np.full(n, -1, np.int64)
    rounds = 0
    for wi in range(int(win.max()) + 1):
        idx = by_win[bounds[wi]:bounds[wi + 1]]
        loc[idx] = np.arange(len(idx))
        first = np.r_[True, prev[idx[1:]] != idx[:-1]]
        seg = np.cumsum(first) - 1
        sf = np.flatnonzero(first)
        c = lay.c[idx] - lay.c[idx][sf][seg]
        base = seed[idx].copy()
        q = prev[idx[sf]]
        has = q >= 0
        base[sf[has]] = np.maximum(base[sf[has]], np.maximum(dist[q[has]] + (lay.c[idx[sf[has]]] - lay.c[q[has]])[:, None], NEG))
        e = e_order[e_bounds[wi]:e_bounds[wi + 1]]
        inside = win[lay.xs[e]] == wi
        ext = e[~inside]
        if len(ext):
            np.maximum.at(base, loc[xt[ext]], np.maximum(dist[lay.xs[ext]] + lay.xw[ext][:, None], NEG))
        e = e[inside]
        e = e[np.argsort(loc[xt[e]], kind="stable")]
        tl = loc[xt[e]]
        x_first = np.flatnonzero(np.r_[True, tl[1:] != tl[:-1]]) if len(tl) else np.zeros(0, np.int64)
        d, r = _jacobi(c, seg, sf, loc[lay.xs[e]], lay.xw[e], x_first, tl[x_first] if len(tl) else tl, base)
        dist[idx] = d
        rounds += r
    return _settle(lay, seed, dist, rounds)


def _settle(lay: _Layout, seed: np.ndarray, dist: np.ndarray, rounds: int) -> tuple[np.ndarray, int]:
    """Full rounds from lower bounds ``dist`` until nothing changes (usually one)."""
    c = lay.c
    while True:
        rounds += 1
        b = np.maximum(seed, dist)
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
        """Longest local paths from every source to every target (contracted chains). With many calls
        per step (more than ``2 * BAND``) the sources are solved in bands: each source's paths to the
        next ``2 * BAND`` arrivals, within their time window (a path to a later arrival passes, in
        practice, through the end of a call in between); the step's end from each source comes from
        one backward pass."""
        k = len(self.arrival)
        if k + 1 > 2 * BAND:
            return self._banded()
        lay = _Layout(self.g, self.g.w, self._keep())
        cols = [self.sources] + [np.array([e]) for e in self.end.tolist()]
        seed = np.full((lay.n, len(cols)), NEG, np.int64)
        for j, nodes in enumerate(cols):
            seed[lay.where[nodes], j] = 0
        dist, self.rounds = _solve(lay, seed)
        d = np.full((k + 1, k + 1), NEG, np.int64)
        if k:
            d[:, :k] = dist[lay.where[self.arrival]].T
        if lay.n:
            d[:, k] = dist.max(axis=0)
            sink = lay.node[np.argmax(dist, axis=0)]
        else:
            sink = np.zeros(k + 1, np.int64)
        return AnchorMatrix(d, sink)

    def _banded(self) -> AnchorMatrix:
        g, k = self.g, len(self.arrival)
        d = np.full((k + 1, k + 1), NEG, np.int64)
        tail = self.tails()
        d[0, k] = tail[self.sources].max() if len(self.sources) else NEG
        d[1:, k] = tail[self.end]
        keep0 = self._keep()
        t_pos = g.node_ts[g.order]
        seed_t = np.r_[g.node_ts[self.sources].min() if len(self.sources) else 0, g.node_ts[self.end]]
        for b0 in range(0, k + 1, BAND):
            rows = np.arange(b0, min(k + 1, b0 + BAND))
            targets = np.arange(max(0, b0 - 1), min(k, b0 - 1 + 2 * BAND))
            lo = seed_t[rows].min() - MARGIN_NS
            hi = g.node_ts[self.arrival[targets]].max() + MARGIN_NS if len(targets) else lo
            lay = _Layout(g, g.w, keep0 & (t_pos >= lo) & (t_pos <= hi))
            seed = np.full((lay.n, len(rows)), NEG, np.int64)
            for j, r in enumerate(rows.tolist()):
                nodes = self.sources if r == 0 else self.end[r - 1:r]
                at = lay.where[nodes]
                seed[at[at >= 0], j] = 0
            dist, rounds = _solve(lay, seed)
            self.rounds += rounds
            at = lay.where[self.arrival[targets]]
            ok = at >= 0
            d[np.ix_(rows, targets[ok])] = dist[at[ok]].T
        return AnchorMatrix(d, np.full(k + 1, -1, np.int64))  # -1: found when the path is expanded

    def tails(self) -> np.ndarray:
        """Per node: the longest local path starting at it (one pass over the reversed graph)."""
        g = self.g
        rev = RankGraph(g.node_ev, g.node_start, g.node_ts, g.dst, g.src, g.w, g.w_raw, g.typ, g.attr, g.seq,
                        g.order[::-1], np.r_[g.link[1:], -1][::-1])
        lay = _Layout(rev, g.w)
        dist, _ = _solve(lay, np.zeros((lay.n, 1), np.int64))
        out = np.full(g.n, NEG, np.int64)
        out[lay.node] = dist[:, 0]
        return out

    def farthest(self, source: int) -> int:
        """The node where the longest local path from source row ``source`` ends."""
        dist, _, _ = self._dist_from(source)
        return int(np.argmax(dist))

    def _dist_from(self, source: int) -> tuple[np.ndarray, np.ndarray, _Layout]:
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
        return self._from[source]

    def local_path(self, source: int, target: int) -> list[int]:
        """Edge ids of the longest local path from source row ``source`` (0 = START, i+1 = end of
        call i) to node ``target``; [] when unreachable or the same node."""
        dist, seeded, lay = self._dist_from(source)
        if dist[target] <= REACH:
            return []
        return _backtrack(self.g, lay, dist, seeded, target)


def _backtrack(g: RankGraph, lay: _Layout, dist: np.ndarray, seeded: np.ndarray, target: int) -> list[int]:
    """Follow, from ``target``, the in-edge that gives each node its distance (the chain link first,
    else the first cross edge in insertion order); the choice is made for all nodes at once."""
    if not hasattr(lay, "pred_link"):
        pos = np.empty(g.n, np.int64)
        pos[g.order] = np.arange(g.n)
        o = np.lexsort((g.seq[lay.cross], g.dst[lay.cross]))
        lay.pred_link, lay.x_sorted = g.link[pos], lay.cross[o]  # type: ignore[attr-defined]
    link, xs = lay.pred_link, lay.x_sorted  # type: ignore[attr-defined]
    pred = np.full(g.n, -1, np.int64)
    ok = (link >= 0)
    ok[ok] = (dist[g.src[link[ok]]] > REACH) & (dist[g.src[link[ok]]] + g.w[link[ok]] == dist[np.flatnonzero(ok)])
    pred[ok] = link[ok]
    tight = xs[(dist[g.src[xs]] > REACH) & (dist[g.src[xs]] + g.w[xs] == dist[g.dst[xs]])]
    d = g.dst[tight]
    first = np.r_[True, d[1:] != d[:-1]] if len(d) else np.zeros(0, bool)
    free = pred[d[first]] < 0
    pred[d[first][free]] = tight[first][free]
    pred[seeded & (dist == 0)] = -1
    edges: list[int] = []
    v = target
    for _ in range(g.n):  # one step per node of the path
        e = int(pred[v])
        if e < 0:
            break
        edges.append(e)
        v = int(g.src[e])
    return edges[::-1]
