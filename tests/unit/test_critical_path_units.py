"""Unit tests of the critical path's parts on small hand-built inputs.

Oracles: networkx's ``dag_longest_path`` / ``dag_longest_path_length`` (what HTA 0.5.0 calls) for the
chain solver and the anchor matrix, numpy's ``nanmedian`` for the leave-one-out medians, and HTA's
``compare_events`` rules (hta/common/call_stack.py, written out in the test) for the call stack.
"""
from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
import pytest

from rankscope.analysis.deps import adapter, cpu, events, join, local, path, whatif
from rankscope.analysis.deps.graph import RankGraph
from tests.helpers import require

nx = require("networkx", "networkx>=3")  # the oracle (torch depends on it): missing fails, never skips


def random_chains(seed: int, chains: int = 4, length: int = 12, cross: int = 20) -> RankGraph:
    """Chains of nodes with increasing times and cross edges going forward in time (a DAG)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 10_000, (chains, length)), axis=1)
    node_ts = ts.ravel()
    n = node_ts.size
    src, dst = [], []
    link = np.full(n, -1, np.int64)
    for c in range(chains):
        for i in range(1, length):
            link[c * length + i] = len(src)
            src.append(c * length + i - 1), dst.append(c * length + i)
    for _ in range(cross):
        a, b = rng.integers(0, n, 2)
        if node_ts[a] < node_ts[b] and (a // length) != (b // length):
            src.append(a), dst.append(b)
    src, dst = np.array(src), np.array(dst)
    w = np.maximum(node_ts[dst] - node_ts[src], 0) + rng.integers(0, 50, len(src))
    return RankGraph(np.arange(n), np.ones(n, bool), node_ts, src, dst, w, w, np.zeros(len(src), np.int8),
                     np.full(len(src), -1), np.arange(len(src)), np.arange(n), link)


def cut(g: RankGraph, end: np.ndarray) -> RankGraph:
    """``g`` without the edges into ``end`` (a call's end takes its time from the other ranks)."""
    keep = np.flatnonzero(~np.isin(g.dst, end))
    remap = np.full(len(g.src), -1)
    remap[keep] = np.arange(len(keep))
    link = np.where(g.link >= 0, remap[np.maximum(g.link, 0)], -1)
    return RankGraph(g.node_ev, g.node_start, g.node_ts, g.src[keep], g.dst[keep], g.w[keep], g.w_raw[keep],
                     g.typ[keep], g.attr[keep], g.seq[keep], g.order, link)


def to_nx(g: RankGraph) -> "nx.DiGraph":
    G = nx.DiGraph()
    G.add_nodes_from(range(g.n))
    for s, d, w in zip(g.src.tolist(), g.dst.tolist(), g.w.tolist()):
        G.add_edge(s, d, weight=w)
    return G


@pytest.mark.parametrize("seed", range(8))
def test_longest_path_equals_networkx(seed):
    g = random_chains(seed)
    G = to_nx(g)
    p = path.longest_path(g)
    assert p.length == nx.dag_longest_path_length(G, weight="weight")
    assert list(p.nodes) == nx.dag_longest_path(G, weight="weight")
    assert int(g.w[p.edges].sum()) == p.length


@pytest.mark.parametrize("seed", range(6))
def test_anchor_matrix_equals_pairwise_longest_paths(seed):
    """Longest local paths from each source to each target, with the sources' in-edges cut."""
    g = random_chains(seed, chains=3, length=15, cross=25)
    rng = np.random.default_rng(seed)
    picked = rng.choice(g.n, 6, replace=False)
    arrival, end = picked[:3], picked[3:]  # three calls: where each arrives, where each ends
    g = cut(g, end)
    loc = local.Local(g, arrival, end)
    m = loc.matrix()
    G = to_nx(g)
    sources = [list(loc.sources)] + [[e] for e in end.tolist()]
    for row, srcs in enumerate(sources):
        for col, t in enumerate(list(arrival) + [None]):
            best = local.NEG
            for s in srcs:
                reach = nx.descendants(G, s) | {s}
                lengths = _longest_from(G, s)
                if t is None:
                    best = max(best, max(lengths[v] for v in reach))
                elif t in reach:
                    best = max(best, lengths[t])
            assert m.d[row, col] == best, (row, col)


def _longest_from(G: "nx.DiGraph", s: int) -> dict[int, int]:
    dist = {s: 0}
    for v in nx.topological_sort(G):
        if v in dist:
            for _, u, data in G.out_edges(v, data=True):
                dist[u] = max(dist.get(u, -1), dist[v] + data["weight"])
    return dist


def test_windowed_solver_equals_one_window(monkeypatch):
    arrival, end = np.array([10, 900, 1700]), np.array([420, 1300, 2000])
    g = cut(random_chains(3, chains=6, length=400, cross=600), end)
    one = local.Local(g, arrival, end).matrix().d
    monkeypatch.setattr(local, "WINDOW", 64)
    assert np.array_equal(local.Local(g, arrival, end).matrix().d, one)


def _events(rows: list[tuple[str, int, int, int]]) -> events.RankEvents:
    """(name, ts, dur, tid) host operators."""
    t = pa.table({"name": pa.array([r[0] for r in rows]).dictionary_encode(),
                  "kind": pa.array(["cpu_op"] * len(rows)).dictionary_encode(),
                  "ts": [r[1] for r in rows], "dur": [r[2] for r in rows], "tid": [r[3] for r in rows],
                  "stream": [-1] * len(rows), "correlation": [-1] * len(rows), "is_comm": [False] * len(rows),
                  "input_dims": pa.array([""] * len(rows)).dictionary_encode()})
    return events.from_table(t)


def test_call_stack_follows_hta_compare_events():
    """HTA's rules: at one time ends before starts, longer starts first, shorter ends first; an end
    pops the top of the stack."""
    ev = _events([("A", 0, 100, 1), ("B", 0, 40, 1), ("C", 40, 60, 1), ("D", 100, 10, 1), ("E", 5, 10, 2)])
    walk, start, tid, parent, own = cpu.parents_and_walk(ev, np.arange(ev.n))
    assert parent.tolist() == [-1, 0, 0, -1, -1]
    seq = [(ev.name_of(int(e)), bool(s)) for e, s, t in zip(walk, start, tid) if t == 1]
    assert seq == [("A", True), ("B", True), ("B", False), ("C", True), ("C", False), ("A", False),
                   ("D", True), ("D", False)]


def test_fix_nesting_moves_a_one_ns_overlap():
    # a parent ends 1 ns after the next operator started (µs rounding): the next one is its sibling
    ev = _events([("A", 0, 101, 1), ("A1", 10, 50, 1), ("B", 100, 500, 1), ("B1", 200, 100, 1)])
    fixed = cpu.fix_nesting(ev)
    assert fixed.dur.tolist() == [100, 50, 500, 100]
    parent = cpu.parents_and_walk(fixed, np.arange(fixed.n))[3]
    assert parent.tolist() == [-1, 0, -1, 2]


def test_leave_one_out_medians_equal_nanmedian():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 100, (9, 4, 5)).astype(float)
    x[rng.random(x.shape) < 0.25] = np.nan
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices
        want = np.stack([np.nanmedian(np.delete(x, i, 0), axis=0) for i in range(len(x))])
    assert np.allclose(whatif._leave_one_out_medians(x), want, equal_nan=True)


def test_two_ranks_join_at_the_last_arrival():
    """Rank 1 arrives 30 late at the only collective: the path is rank 1's 40 then the transfer 5,
    then rank 0's tail of 7; at rank 0's speed rank 1 would arrive at 10 (what-if: 22 instead of 52)."""
    neg = local.NEG
    # rows [START, end of call 0], cols [arrival 0, SINK]
    r0 = join.RankStep(0, np.array([[10, 10], [neg, 7]]), ["g#0"], np.array([35]), (("all_reduce", "collective"),))
    r1 = join.RankStep(1, np.array([[40, 40], [neg, 2]]), ["g#0"], np.array([5]), (("all_reduce", "collective"),))
    j = join.join([r0, r1])
    dist, end = join.longest(j)
    assert dist[end] == 40 + 5 + 7
    kinds = [int(j.kind[e]) for e in join.path_edges(j, dist, end)]
    owners = [j.ranks[int(j.ref[e, 0])].rank for e in join.path_edges(j, dist, end)]
    assert kinds == [join.LOCAL, join.WAIT, join.XFER, join.LOCAL] and owners == [1, 1, 0, 0]
    wi = {w.rank: w for w in whatif.what_if(j, int(dist[end]))}
    assert wi[1].path_if_median_ns == 10 + 5 + 7 and wi[1].saving_ns == 30
    assert wi[0].path_if_median_ns == 40 + 5 + 2  # rank 0 at rank 1's speed: its tail 7 -> 2


def test_keys_and_joinable_calls():
    t = pa.table({"op": pa.array(["all_reduce", "send", "all_reduce"]).dictionary_encode(),
                  "name": pa.array(["x"] * 3).dictionary_encode(), "ts": [10, 20, 30], "dur": [5, 5, 5],
                  "dev_ts": [-1] * 3, "dev_dur": [-1] * 3, "pg_name": pa.array(["0"] * 3).dictionary_encode(),
                  "pg_ranks": pa.array(["0,1"] * 3).dictionary_encode(), "group_size": pa.array([2] * 3, pa.int32()),
                  "seq": [-1] * 3, "peer": [-1, 1, -1]})
    df = adapter.calls(t, 0)
    keys = df["key"].to_list()
    assert keys == ["0|0,1#0", "p2p:0->1#0", "0|0,1#1"] and df["kind"].to_list() == ["collective", "p2p", "collective"]
    assert adapter.joinable(np.array(keys, object), 0, {0, 1}).tolist() == [True, True, True]
    assert adapter.joinable(np.array(keys, object), 0, {0}).tolist() == [False, False, False]


def test_banded_anchor_matrix_equals_the_full_one_within_its_band(monkeypatch):
    """Many calls per step: each source solved for the next 2 * BAND arrivals only, the step's end
    from a backward pass; inside the band the values are the full solve's."""
    rng = np.random.default_rng(11)
    g0 = random_chains(4, chains=3, length=120, cross=150)
    calls = np.sort(rng.choice(g0.n, 24, replace=False))
    arrival, end = calls[0::2], calls[1::2]
    g = cut(g0, end)
    full = local.Local(g, arrival, end).matrix().d
    monkeypatch.setattr(local, "BAND", 2)
    loc = local.Local(g, arrival, end)
    banded = loc.matrix().d
    k = len(arrival)
    assert np.array_equal(banded[:, k], full[:, k])  # to the step's end: exact
    for r in range(k + 1):
        for c in range(k):
            if c - (r // 2 * 2 - 1) < 4 and c >= r // 2 * 2 - 1:  # inside this row's band
                assert banded[r, c] == full[r, c], (r, c)
            else:
                assert banded[r, c] in (full[r, c], local.NEG)


def test_a_rank_whose_what_if_saves_nothing_bounds_the_step_by_nothing():
    """bench/workloads.py seed 2821 run 14 (GPipe, 4 stages): rank 1 bounded 1 of 6 steps, and its median what-if
    saving over the steps was -4.0 ms (its calls ran faster than rank 2's, the only other rank with the same calls).
    The summary said it bounds the step by -4.0 ms, with a step "if median" longer than the step."""
    import polars as pl

    from rankscope.analysis.deps.report import _run_bounding

    per_step = [{"bounding_rank": 1 if i == 0 else 0, "cost_ms": 1.0, "step_ms": 146.0, "step": i, "chain": [],
                 "description": f"step {i}"} for i in range(6)]
    per_step[1]["bounding_rank"] = 1
    wi = pl.DataFrame({"rank": [1] * 6 + [0] * 6, "saving_ns": [-4e6] * 6 + [2e6] * 6})
    b = _run_bounding(per_step, wi)
    assert b is not None and b["rank"] == 0 and b["cost_ms"] == 2.0  # the rank that bounds most steps
    per_step = [{**s, "bounding_rank": 1} for s in per_step]
    b = _run_bounding(per_step, wi)
    assert b is not None and b["rank"] == 1 and b["cost_ms"] == 0.0 and b["step_ms_if_median"] == b["step_ms"]


def _spans(rows: list[tuple[str, int, int, str, bool]]) -> events.RankEvents:
    """(name, ts, dur, kind, is_comm) host events of one thread."""
    n = len(rows)
    t = pa.table({"name": pa.array([r[0] for r in rows]).dictionary_encode(),
                  "kind": pa.array([r[3] for r in rows]).dictionary_encode(),
                  "ts": [r[1] for r in rows], "dur": [r[2] for r in rows], "tid": [1] * n, "stream": [-1] * n,
                  "correlation": [-1] * n, "is_comm": [r[4] for r in rows],
                  "input_dims": pa.array([""] * n).dictionary_encode()})
    return events.from_table(t)


def test_calls_whose_span_end_fix_nesting_moved_are_still_located():
    """torch.distributed.pipelining on gloo (bench/workloads.py seed 3014, ppdp-data, rank 1's step 1, times in µs from
    its first send): ``gloo:send`` opens inside ``c10d::send`` and closes after the next ``c10d::recv_``, whose
    ``gloo:recv`` opens at its end. ``fix_nesting`` moves the send span's end to the receive's; the call's recorded end
    is the old one. Located by (start, end), the send was lost to the path (7 of 8 sends a step on that rank)."""
    from rankscope.analysis.deps import timed

    rows = [("c10d::send", 9115, 75, "cpu_op", False), ("gloo:send", 9187, 7629, "user_annotation", True),
            ("c10d::recv_", 9204, 7590, "cpu_op", False), ("gloo:recv", 16786, 53, "user_annotation", True)]
    raw = _spans(rows)
    ev = cpu.fix_nesting(raw)
    assert ev.end[1] != raw.end[1]  # the send span's end was moved
    calls = adapter.Calls(key=np.array(["p2p:1->3#0", "p2p:3->1#0"], object), op=np.array(["send", "recv"], object),
                          kind=np.array(["p2p", "p2p"], object), ts=raw.ts[[1, 3]], end=raw.end[[1, 3]],
                          dev_ts=np.full(2, -1), dev_end=np.full(2, -1), issue_ts=np.full(2, -1),
                          pg=np.array(["0", "0"], object), seq=np.array([0, 0]))
    arr, end = timed.locate(ev, np.ones(ev.n, bool), calls)
    assert arr.tolist() == end.tolist() == [1, 3]


def test_a_p2p_send_meets_its_receiver_and_a_pair_s_transfer_is_its_fastest_message():
    """Rank 0 sends rank 1 two messages. gloo completes a send once its receiver posted the receive
    (tests/e2e/test_p2p_wait.py measures it): both ends hang on the meeting. The transfer is the pair's fastest span
    in the step (2, message 1's send), not message 0's shorter span (25: rank 1 posted the receive early and waited).
    Where sends close a ring they are joined as eager; a host send, whose span the rank graph kept, then gets no
    span of its own on top (a device send, which was cut, does)."""
    neg = local.NEG
    # rows [START, end 0, end 1], cols [arrival 0, arrival 1, SINK]
    d0 = np.array([[5, 10, 12], [neg, neg, neg], [neg, neg, neg]])
    d1 = np.array([[0, 0, 3], [neg, 0, 3], [neg, neg, 3]])
    sig = (("send", "p2p"), ("send", "p2p"))
    r0 = join.RankStep(0, d0, ["p2p:0->1#0", "p2p:0->1#1"], np.array([30, 2]), sig, np.array([True, True]))
    r1 = join.RankStep(1, d1, ["p2p:0->1#0", "p2p:0->1#1"], np.array([25, 40]), (("recv", "p2p"), ("recv", "p2p")))
    j = join.join([r0, r1])
    xfer = np.flatnonzero(j.kind == join.XFER)
    assert sorted(j.ranks[int(j.ref[e, 0])].rank for e in xfer) == [0, 0, 1, 1]  # the sends' ends too
    assert j.w[xfer].tolist() == [2, 2, 2, 2]
    dist, end = join.longest(j)
    assert dist[end] == 10 + 2 + 3  # rank 0's send of message 1 at 10, its transfer, rank 1's tail
    eager = join.join([r0, r1], eager_sends=True)
    assert sorted(eager.ranks[int(eager.ref[e, 0])].rank for e in np.flatnonzero(eager.kind == join.XFER)) == [1, 1]
    assert np.count_nonzero(eager.kind == join.OWN) == 0  # host sends: their local path already spans them
    r0.host_send = None  # device sends (NCCL): cut by the rank graph, so an eager one keeps its own span
    assert np.count_nonzero(join.join([r0, r1], eager_sends=True).kind == join.OWN) == 2


def test_a_host_send_keeps_the_work_inside_its_span_and_its_last_stretch_waits():
    """pipelining on gloo (bench/workloads.py ppdp-data, rank 1): ``gloo:send`` spans from the send to its deferred
    wait, with the next microbatch's forward inside, then 33 ms of waiting for the receiver's receive. The forward
    keeps its weight; the stretch after it weighs nothing (the join hangs the send's end on the meeting)."""
    from rankscope.analysis.deps import timed
    from rankscope.analysis.deps.gpu import E

    rows = [("ProfilerStep#1", 0, 40000, "user_annotation", False), ("c10d::send", 100, 50, "cpu_op", False),
            ("gloo:send", 140, 35000, "user_annotation", True), ("aten::mm", 300, 1500, "cpu_op", False),
            ("aten::add", 35300, 200, "cpu_op", False)]
    ev = cpu.fix_nesting(_spans(rows))
    calls = adapter.Calls(key=np.array(["p2p:1->3#0"], object), op=np.array(["send"], object),
                          kind=np.array(["p2p"], object), ts=np.array([140]), end=np.array([35140]),
                          dev_ts=np.full(1, -1), dev_end=np.full(1, -1), issue_ts=np.full(1, -1),
                          pg=np.array(["0"], object), seq=np.array([0]))
    g, anc = timed.rank_graph(ev, np.ones(ev.n, bool), calls)
    mm_end = g.node(np.array([3]), False)[0]
    into_end = np.flatnonzero(g.dst == anc.end[0])
    assert g.typ[into_end].tolist() == [E.WAIT] and g.w[into_end].tolist() == [0]
    assert g.src[into_end].tolist() == [mm_end]  # from the forward's end: the forward itself kept its weight
    mm = np.flatnonzero((g.dst == mm_end))
    assert g.w[mm].sum() == 1500


def test_a_receive_waits_from_the_start_of_its_c10d_operator():
    """pipelining on gloo (seed 3014, ppdp-data): ``gloo:recv`` opens at the end of its ``c10d::recv_``, which held
    the wait for the other stage's send (10.3 ms of 10.3). The call's wait starts with the operator."""
    from rankscope.analysis.deps import timed

    rows = [("ProfilerStep#1", 0, 20000, "user_annotation", False), ("c10d::recv_", 0, 10316, "cpu_op", False),
            ("gloo:recv", 10311, 46, "user_annotation", True), ("aten::mm", 10400, 500, "cpu_op", False)]
    ev = cpu.fix_nesting(_spans(rows))
    calls = adapter.Calls(key=np.array(["p2p:3->1#0"], object), op=np.array(["recv"], object),
                          kind=np.array(["p2p"], object), ts=np.array([10311]), end=np.array([10357]),
                          dev_ts=np.full(1, -1), dev_end=np.full(1, -1), issue_ts=np.full(1, -1),
                          pg=np.array(["0"], object), seq=np.array([0]))
    sel = np.ones(ev.n, bool)
    arr, _ = timed.locate(ev, sel, calls)
    assert arr.tolist() == [2]
    assert timed.waited_from(ev, sel, arr, calls, np.zeros(0, np.int64)).tolist() == [1]
    g, anc = timed.rank_graph(ev, sel, calls)
    assert anc.span_start is not None
    assert g.node_ts[anc.arrival].tolist() == [0] and g.node_ts[anc.span_start].tolist() == [10311]
