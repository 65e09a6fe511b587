"""The dependency graph of one rank in a time window: nodes, chains and edges as numpy arrays.

Pattern (HTA 0.5.0, ``CriticalPathAnalysis.critical_path_analysis`` and ``CPGraph``): keep the host
events that start inside the window (and last > 0), and the device operations whose launch does;
every operator, runtime call and device operation gets a start and an end node; host threads and
device streams become chains (``cpu``, ``gpu``), joined by launch and sync edges. Weights are
times between the two nodes (negative ones, from nesting that overlaps, become 0 as HTA's
``_validate_graph`` does); dependency and sync edges weigh 0.

Node ids: the i-th node event (in event order) has start node 2i and end node 2i+1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankscope.analysis.deps.cpu import Points, thread_points
from rankscope.analysis.deps.events import K, RankEvents, Sync
from rankscope.analysis.deps.gpu import E, DeviceEdges, device_edges, is_blocking


@dataclass
class RankGraph:
    """Nodes, the chains through them, and every edge (chain links included)."""

    node_ev: np.ndarray  # event of each node
    node_start: np.ndarray  # bool
    node_ts: np.ndarray  # int64 ns
    src: np.ndarray  # edges
    dst: np.ndarray
    w: np.ndarray  # int64 weight used by the longest path (>= 0)
    w_raw: np.ndarray  # int64 weight as HTA's CPEdge holds it (may be negative)
    typ: np.ndarray  # int8 ``gpu.E``
    attr: np.ndarray  # event the edge is attributed to (-1: none)
    seq: np.ndarray  # insertion order (ties between edges into one node go to the first)
    order: np.ndarray  # node ids, chain after chain
    link: np.ndarray  # per position of ``order``: the edge from the previous position, -1 at a chain start

    @property
    def n(self) -> int:
        return len(self.node_ev)

    def node(self, ev: np.ndarray, start: np.ndarray | bool) -> np.ndarray:
        """Node ids of (event, start?) pairs."""
        return 2 * np.searchsorted(self.node_ev[::2], ev) + np.where(start, 0, 1)


def window(ev: RankEvents, t0: int | None = None, t1: int | None = None) -> np.ndarray:
    """HTA's clipped set: host events starting in [t0, t1] that last > 0, device ops whose launch
    does, and every "Stream Wait Event"; a device op without a launch (Ascend) when it starts in [t0, t1] itself."""
    lo = ev.ts.min() if t0 is None and ev.n else t0
    hi = ev.end.max() if t1 is None and ev.n else t1
    inside = (ev.ts >= lo) & (ev.ts <= hi) & (ev.dur > 0)
    host = (ev.stream == -1) & inside
    p = ev.partner
    launched = (ev.stream != -1) & (p >= 0) & (ev.stream[np.maximum(p, 0)] == -1) & inside[np.maximum(p, 0)]
    out = host | launched | (ev.sync == Sync.WAIT_EVENT)
    own = ev.own_corr  # device ops the trace links to no launch (``events._own_correlations``)
    return out | (own & inside) if own is not None else out


def node_events(ev: RankEvents, sel: np.ndarray, extra: np.ndarray | None = None) -> np.ndarray:
    """Events with nodes: operators and runtime calls on the host, device ops with a correlation."""
    host = (ev.stream == -1) & np.isin(ev.kind, (K.CPU_OP, K.RUNTIME))
    dev = (ev.stream != -1) & (ev.corr >= 0)
    keep = sel & (host | dev)
    return keep | (sel & extra) if extra is not None else keep


def build(ev: RankEvents, sel: np.ndarray, *, zero_weight_launch: bool = False,
          extra_nodes: np.ndarray | None = None) -> RankGraph:
    """The graph of the events selected by ``sel`` (see ``window``), with HTA's rules."""
    is_node = node_events(ev, sel, extra_nodes)
    nodes = np.flatnonzero(is_node)
    members = np.flatnonzero(sel & (ev.stream == -1))
    pts = thread_points(ev, members, is_node)
    dev = device_edges(ev, sel, is_node, zero_weight_launch)
    return assemble(ev, nodes, pts, dev, is_blocking(ev))


def assemble(ev: RankEvents, nodes: np.ndarray, pts: Points, dev: DeviceEdges, blocking: np.ndarray) -> RankGraph:
    """Chains and cross edges -> one ``RankGraph``."""
    node_ev = np.repeat(nodes, 2)
    node_start = np.tile(np.array([True, False]), len(nodes))
    node_ts = np.where(node_start, ev.ts[node_ev], ev.end[node_ev])

    def nid(e: np.ndarray, start: np.ndarray | bool) -> np.ndarray:
        return 2 * np.searchsorted(nodes, e) + np.where(start, 0, 1)

    cpu_ids = nid(pts.ev, pts.start)
    # host chain links: point i-1 -> point i within a thread
    link_pos = np.flatnonzero(~pts.first)
    c_src, c_dst = cpu_ids[link_pos - 1], cpu_ids[link_pos]
    c_typ = np.where(pts.dep[link_pos], E.DEPENDENCY, E.OPERATOR).astype(np.int8)
    c_zero = pts.dep[link_pos] | (~pts.start[link_pos] & blocking[pts.ev[link_pos]])
    prev_start, prev_ev = pts.start[link_pos - 1], pts.ev[link_pos - 1]
    c_attr = np.where(prev_start, prev_ev, np.where(~pts.start[link_pos], pts.ev[link_pos], pts.parent[link_pos - 1]))
    c_attr = np.where(c_typ == E.OPERATOR, c_attr, -1)
    # device lanes: K.s -> K.e always, previous K.e -> K.s where HTA keeps the kernel-kernel edge
    k = dev.lane_ev
    ks, ke = nid(k, True), nid(k, False)
    lane_order = np.empty(2 * len(k), np.int64)
    lane_order[0::2], lane_order[1::2] = ks, ke
    kk = np.flatnonzero(~dev.lane_first)
    x_src, x_dst = nid(dev.src_ev, dev.src_start), nid(dev.dst_ev, dev.dst_start)
    src = np.concatenate([c_src, ks, ke[kk - 1], x_src])
    dst = np.concatenate([c_dst, ke, ks[kk], x_dst])
    typ = np.concatenate([c_typ, np.full(len(k), E.OPERATOR, np.int8), np.full(len(kk), E.KERNEL_KERNEL, np.int8),
                          dev.typ])
    zero = np.concatenate([c_zero, np.zeros(len(k) + len(kk), bool), dev.zero | (dev.typ == E.SYNC)])
    attr = np.concatenate([c_attr, k, k[kk - 1], np.full(len(x_src), -1, np.int64)])
    # insertion order: host edges first; in a lane row the kernel's own edge, then a GPU -> GPU sync
    # edge (dev.seq, +1), then its kernel-kernel edge (+2), as HTA adds them
    seq = np.concatenate([np.arange(len(c_src)) - len(c_src) - 1, dev.lane_pos * 8, dev.lane_pos[kk] * 8 + 2, dev.seq])
    w_raw = np.where(zero, 0, node_ts[dst] - node_ts[src]).astype(np.int64)
    n_c, n_k = len(c_src), len(k)
    # chains: host threads, then lanes, then nodes on no chain (sync events' own nodes)
    cpu_link = np.full(len(cpu_ids), -1, np.int64)
    cpu_link[link_pos] = np.arange(n_c)
    lane_link = np.full(2 * n_k, -1, np.int64)
    lane_link[1::2] = n_c + np.arange(n_k)
    lane_link[2 * kk] = n_c + n_k + np.arange(len(kk))
    seen = np.zeros(2 * len(nodes), bool)
    seen[cpu_ids], seen[lane_order] = True, True
    alone = np.flatnonzero(~seen)
    order = np.concatenate([cpu_ids, lane_order, alone])
    link = np.concatenate([cpu_link, lane_link, np.full(len(alone), -1, np.int64)])
    return RankGraph(node_ev, node_start, node_ts, src, dst, np.maximum(w_raw, 0), w_raw, typ, attr, seq,
                     order, link)

