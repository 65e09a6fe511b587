"""Point-to-point ops paired per (sender, receiver) in order: the k-th send from a to b is the k-th receive
on b from a (each rank numbers its own p2p ops, so sequence numbers are not compared across ranks). Peers
are named by their rank in the group ("send 0->1"), mapped to global ranks through the group's members.
A send without its receive, a receive without its send, and a send whose size differs from its receive's
buffer (torch: send input = recv output) are reported; pairs where either side's ring dropped its oldest
ops, or where a side sent no dump, are not judged."""
from __future__ import annotations

from collections import defaultdict

from rankscope.analysis.hang import shapes
from rankscope.analysis.comm.p2p import pair_in_order
from rankscope.analysis.hang.findings import Problem
from rankscope.analysis.hang.matching import Group
from rankscope.model.readers.frdump import FrEntry


def pair(g: Group, dumped: set[int], whole_rings: set[int]) -> list[Problem]:
    """The first problem of each (sender, receiver) pair of one group; ``whole_rings``: dumped ranks whose ring
    still holds everything (a rank with no p2p op there posted none)."""
    sends: dict[tuple[int, int], list[FrEntry]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[FrEntry]] = defaultdict(list)
    for r, ents in g.p2p.items():
        for e in ents:
            assert e.peer is not None
            if e.op == "send":
                sends[(r, g.local_to_global(e.peer))].append(e)
            elif e.op == "recv":
                recvs[(g.local_to_global(e.peer), r)].append(e)
    whole = {r for r, ents in g.p2p.items() if ents and min(e.seq for e in ents) <= 1}
    whole |= {r for r in whole_rings if not g.p2p.get(r)}
    out: list[Problem] = []
    for src, dst in sorted(set(sends) | set(recvs)):
        if src not in dumped or dst not in dumped or not {src, dst} <= whole:
            continue  # no dump from one side (said apart), or a side whose oldest ops are gone
        a, b = sends.get((src, dst), []), recvs.get((src, dst), [])
        p = _first_problem(g, src, dst, a, b)
        if p is not None:
            out.append(p)
    return out


def _buffer(e: FrEntry) -> tuple[tuple[int, ...], ...]:
    return e.out_sizes or e.in_sizes


def _differ(s: FrEntry, r: FrEntry) -> bool:
    return s.in_sizes != _buffer(r) or (s.in_sizes == () and (s.sizes, s.dtypes) != (r.sizes, r.dtypes))


def _first_problem(g: Group, src: int, dst: int, a: list[FrEntry], b: list[FrEntry]) -> Problem | None:
    """The first k (the pairing of ``p2p_pairs.pair_in_order``, shared with the trace's pairs) whose send
    and receive differ in size, else the first send or receive without its other side."""
    base = {"src": src, "dst": dst, "sent": len(a), "received": len(b)}
    for _, _, k, s, r in pair_in_order({(src, dst): a}, {(src, dst): b}):
        if s is not None and r is not None and _differ(s, r):
            return Problem("p2p_mismatch", g.key, g.desc, s.seq, "send/recv", [src, dst], [src, dst],
                           {**base, "n": k + 1, "expected": f"{s.sizes} {s.dtypes}", "got": f"{r.sizes} {r.dtypes}",
                            "sent_call": shapes.entry(s), "received_call": shapes.entry(r)}, created_ns=s.created_ns)
        if r is None and s is not None:
            return Problem("unmatched_send", g.key, g.desc, s.seq, "send", [dst], [src],
                           {**base, "n": k + 1, "call": shapes.entry(s)}, created_ns=s.created_ns)
        if s is None and r is not None:
            return Problem("unmatched_recv", g.key, g.desc, r.seq, "recv", [src], [dst],
                           {**base, "n": k + 1, "call": shapes.entry(r)}, created_ns=r.created_ns)
    return None
