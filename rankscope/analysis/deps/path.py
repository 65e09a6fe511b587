"""Longest path of a DAG made of chains and cross edges, as networkx's ``dag_longest_path`` finds it.

Pattern: along a chain, ``d[i] = max(d[i-1] + w[i], in[i])`` where ``in[i]`` is the best cross edge
into node i; with C the cumulative weight of the chain its closed form is
``d = C + cummax(in - C)``, one vectorized pass per chain set. Cross edges are relaxed from the
last pass until no distance changes (Bellman-Ford, each round a full chain pass), so the number of
rounds is the number of cross edges on the longest chain of dependencies, not of nodes.

Ties follow ``nx.dag_longest_path`` (HTA 0.5.0 uses it): a node keeps the first of its best
predecessors in edge insertion order (``seq``); the path ends at the first node of largest
distance in topological order (fewest hops from a source, then earliest); sources have distance 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class Chains(Protocol):
    """What the longest path needs of a graph (``graph.RankGraph`` and the joined graph have it)."""

    src: np.ndarray
    dst: np.ndarray
    w: np.ndarray
    seq: np.ndarray
    order: np.ndarray
    link: np.ndarray
    node_ts: np.ndarray


@dataclass
class Path:
    nodes: np.ndarray  # node ids, source first
    edges: np.ndarray  # edge ids between consecutive nodes
    length: int  # sum of the weights
    dist: np.ndarray  # longest distance into every node
    rounds: int  # relaxation rounds until stable


class _Solver:
    """The chain layout of a graph, prepared once; ``run(w)`` solves for any weights."""

    def __init__(self, g: Chains) -> None:
        self.g = g
        n = len(g.order)
        self.n = n
        self.start = g.link < 0
        self.seg = np.cumsum(self.start) - 1
        self.seg_first = np.flatnonzero(self.start)
        is_link = np.zeros(len(g.src), bool)
        is_link[g.link[~self.start]] = True
        self.cross = np.flatnonzero(~is_link)
        pos = np.empty(n, np.int64)
        pos[g.order] = np.arange(n)
        self.pos = pos
        self.x_dst = pos[g.dst[self.cross]]
        self.x_src = g.src[self.cross]
        has = np.zeros(n, bool)
        has[self.x_dst] = True
        self.has_cross = has

    def chain_weights(self, w: np.ndarray) -> np.ndarray:
        lw = np.zeros(self.n, np.int64)
        lw[~self.start] = w[self.g.link[~self.start]]
        return lw

    def best_cross(self, dist: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per chain position: the best value over cross edges into it, and that edge (-1: none)."""
        b = np.zeros(self.n, np.int64)
        e = np.full(self.n, -1, np.int64)
        if not len(self.cross):
            return b, e
        val = dist[self.x_src] + w[self.cross]
        o = np.lexsort((self.g.seq[self.cross], -val, self.x_dst))
        d = self.x_dst[o]
        first = np.r_[True, d[1:] != d[:-1]]
        b[d[first]] = val[o][first]
        e[d[first]] = self.cross[o][first]
        return b, e

    def scan(self, b: np.ndarray, lw: np.ndarray) -> np.ndarray:
        """Chain pass: d[i] = max(d[i-1] + lw[i], b[i]) within each chain (positions)."""
        c = np.cumsum(lw)
        c = c - c[self.seg_first][self.seg]  # cumulative weight from the chain's start
        x = b - c
        lo = np.minimum.reduceat(x, self.seg_first)
        hi = np.maximum.reduceat(x, self.seg_first)
        span = hi - lo + 1
        off = np.cumsum(span) - span - lo  # each chain's values above every earlier chain's
        y = np.maximum.accumulate(x + off[self.seg]) - off[self.seg]
        return c + y

    def run(self, w: np.ndarray, max_rounds: int = 100_000) -> tuple[np.ndarray, int]:
        lw = self.chain_weights(w)
        dist = np.zeros(self.n, np.int64)  # indexed by node id
        for rounds in range(1, max_rounds + 1):
            b, _ = self.best_cross(dist, w)
            new = np.empty(self.n, np.int64)
            new[self.g.order] = self.scan(b, lw)
            if np.array_equal(new, dist):
                return dist, rounds
            dist = new
        raise RuntimeError("longest path did not converge (the graph has a cycle)")

    def preds(self, dist: np.ndarray, w: np.ndarray) -> np.ndarray:
        """The edge each node takes its distance from (-1 for a source), with networkx's ties."""
        g = self.g
        b, e = self.best_cross(dist, w)
        lw = self.chain_weights(w)
        d = dist[g.order]
        chain_val = np.where(self.start, -1, np.r_[0, d[:-1]] + lw)
        link = np.where(self.start, -1, g.link)
        cross_ok = self.has_cross
        take_chain = ~self.start & (~cross_ok | (chain_val > b)
                                    | ((chain_val == b) & (g.seq[np.maximum(link, 0)] < g.seq[np.maximum(e, 0)])))
        pred = np.where(take_chain, link, np.where(cross_ok, e, -1))
        out = np.empty(self.n, np.int64)
        out[g.order] = pred
        return out


def longest_path(g: Chains, w: np.ndarray | None = None, hops: bool = True) -> Path:
    """The longest path of ``g`` (weights ``w``, default ``g.w``)."""
    solver = _Solver(g)
    return solve(solver, g.w if w is None else w, hops)


def solve(solver: _Solver, w: np.ndarray, hops: bool = True) -> Path:
    dist, rounds = solver.run(w)
    if not len(dist):
        return Path(np.zeros(0, np.int64), np.zeros(0, np.int64), 0, dist, rounds)
    best = dist.max()
    cand = np.flatnonzero(dist == best)
    if hops and len(cand) > 1:  # first in topological order: fewest hops from a source, then earliest
        gen, _ = solver.run(np.ones(len(w), np.int64))
        cand = cand[np.lexsort((cand, solver.g.node_ts[cand], gen[cand]))]
    v = int(cand[0])
    pred = solver.preds(dist, w)
    nodes, edges = [v], []
    while pred[v] >= 0:  # one step per node of the path
        e = int(pred[v])
        edges.append(e)
        v = int(solver.g.src[e])
        nodes.append(v)
    return Path(np.array(nodes[::-1], np.int64), np.array(edges[::-1], np.int64), int(best), dist, rounds)
