"""Root cause first: which problem explains the others (the wavefront of a hang).

Each problem has culprits (ranks whose missing or different call explains it) and waiting ranks (ranks
stuck in it). A problem whose culprit waits in another problem follows from that one: an edge P -> Q.
Problems with no edge out are root causes: their culprits are stuck outside every problem (in Python,
in another kind of work, gone, or silent); every other problem is a consequence of the root its edges
lead to. This orders the groups' chains the way NVRx's ``fr_attribution`` does (the earliest process
group on the path, whose missing ranks explain the later ones), from who waits where instead of from
process-group descriptions.

Edges can form a cycle: rank a waits in P where b is missing while b waits in Q where a is missing. Either
one of them skipped a call (it went on to a later one), or they issued their calls in another order (a
deadlock). The program order of P and Q decides: from a rank that recorded both calls, else from the
ranks' earlier steps (each group's calls fall at a steady place among the other group's, step after
step). An edge from P to a call that comes after P is dropped: its culprit skipped P and went on. A
cycle that stays is a deadlock, the root of its members.
"""
from __future__ import annotations

from collections import defaultdict

from rankscope.analysis.hang.findings import HANG_KINDS, Problem
from rankscope.analysis.hang.matching import Group


def order(problems: list[Problem], groups: list[Group]) -> list[Problem]:
    """The problems, roots first, each followed by its consequences; ``root`` and ``consequence_of`` set."""
    hang = [p for p in problems if p.kind in HANG_KINDS or p.kind == "behind"]
    other = [p for p in problems if p not in hang]
    edges = _edges(hang)
    by_key = {g.key: g for g in groups}
    for comp in _cycles(len(hang), edges):
        for i in comp:
            for j in list(edges[i]):
                if j in comp and _before(hang[i], hang[j], by_key) == -1:
                    edges[i].discard(j)  # i's culprit skipped hang[i] and went on to the later hang[j]
    for comp in _cycles(len(hang), edges):
        hang.append(_deadlock([hang[i] for i in sorted(comp)]))
        edges.append(set())
        for i in comp:
            edges[i] = {len(hang) - 1}
    roots = [i for i in range(len(hang)) if not edges[i]]
    of = {i: _nearest_root(i, edges, roots, hang) for i in range(len(hang))}
    ranked = sorted(roots, key=lambda i: _rank(hang[i]))
    out: list[Problem] = []
    for r in ranked:
        hang[r].root, hang[r].consequence_of = True, None
        idx = len(out)
        out.append(hang[r])
        for i in sorted((i for i in range(len(hang)) if of[i] == r and i != r), key=lambda i: _rank(hang[i])):
            hang[i].root, hang[i].consequence_of = False, idx
            out.append(hang[i])
    for p in sorted(other, key=_rank):
        p.root, p.consequence_of = True, None
        out.append(p)
    return out


def _edges(ps: list[Problem]) -> list[set[int]]:
    waits: dict[int, set[int]] = defaultdict(set)
    for j, q in enumerate(ps):
        for r in q.waiting:
            waits[r].add(j)
    return [{j for c in p.culprits for j in waits.get(c, ()) if j != i} for i, p in enumerate(ps)]


def _cycles(n: int, edges: list[set[int]]) -> list[set[int]]:
    """Strongly connected components with more than one problem (Tarjan, iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    out: list[set[int]] = []
    counter = 0
    for start in range(n):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.add(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
            elif w not in index:
                index[w] = low[w] = counter
                counter += 1
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(edges[w]))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def _before(p: Problem, q: Problem, groups: dict[str, Group]) -> int:
    """-1: p's call comes before q's in the program; 1: after; 0: unknown."""
    both = set(p.entries) & set(q.entries)  # a rank that recorded both calls
    votes = [(-1 if p.entries[r].record_id < q.entries[r].record_id else 1) for r in both
             if p.entries[r].record_id >= 0 and q.entries[r].record_id >= 0]
    if not votes and p.seq is not None and q.seq is not None and p.group in groups and q.group in groups \
            and p.group != q.group and not p.kind.startswith(("unmatched", "p2p")):
        votes = _from_history(groups[p.group], p.seq, groups[q.group], q.seq)
    if votes and all(v == votes[0] for v in votes):
        return votes[0]
    return 0


def _from_history(g1: Group, s1: int, g2: Group, s2: int) -> list[int]:
    """Per rank that has calls in both groups: where g1's call s1 falls among g2's calls, predicted from
    the same rank's earlier g1 calls (a steady period), compared with s2."""
    votes = []
    for r in sorted(set(g1.calls) & set(g2.calls)):
        merged = sorted([(c.head.record_id, 1, c.seq) for c in g1.calls[r] if c.part == 0] +
                        [(c.head.record_id, 2, c.seq) for c in g2.calls[r] if c.part == 0])
        if any(rid < 0 for rid, _, _ in merged):
            continue
        last2: int | None = None
        placed: dict[int, int | None] = {}  # g1 seq -> the last g2 seq issued before it
        for _, which, seq in merged:
            if which == 2:
                last2 = seq
            elif seq < s1:
                placed[seq] = last2
        guess = _extrapolate(placed, s1)
        if guess is not None:
            votes.append(-1 if guess < s2 else 1)
    return votes


def _extrapolate(placed: dict[int, int | None], s1: int) -> int | None:
    for period in range(1, 9):
        diffs = {placed[s] - placed[s - period] for s in placed if s - period in placed  # type: ignore[operator]
                 and placed[s] is not None and placed[s - period] is not None}
        pairs = sum(1 for s in placed if s - period in placed)
        base = placed.get(s1 - period)
        if len(diffs) == 1 and pairs >= 2 and base is not None:
            return base + next(iter(diffs))
    return None


def _deadlock(members: list[Problem]) -> Problem:
    waiting = sorted({r for p in members for r in p.waiting})
    groups = sorted({p.group for p in members})
    first = min(members, key=_rank)
    return Problem("deadlock", ",".join(groups), first.desc if len(groups) == 1 else "", None, "",
                   sorted({r for p in members for r in p.culprits}), waiting,
                   {"cycle": [{"kind": p.kind, "group": p.group, "seq": p.seq, "op": p.op, "waiting": p.waiting,
                               "culprits": p.culprits} for p in sorted(members, key=_rank)]},
                   step=first.step, created_ns=first.created_ns)


def _nearest_root(i: int, edges: list[set[int]], roots: list[int], ps: list[Problem]) -> int | None:
    seen, frontier = {i}, [i]
    while frontier:
        hit = [j for j in frontier if j in roots]
        if hit:
            return min(hit, key=lambda j: _rank(ps[j]))
        frontier = sorted({k for j in frontier for k in edges[j]} - seen)
        seen.update(frontier)
    return None


_KIND_RANK = {k: n for n, k in enumerate(("deadlock", "not_joined", "mismatch", "unmatched_recv", "unmatched_send",
                                           "p2p_mismatch", "behind", "pg_inconsistent"))}


def _rank(p: Problem) -> tuple[int, int, int, str, int]:
    """Hangs before warnings; then the order the job reached them (the earliest call first)."""
    warn = 1 if p.kind in ("behind", "pg_inconsistent") else 0
    return (warn, p.created_ns or (1 << 62), _KIND_RANK.get(p.kind, 99), p.group, p.seq if p.seq is not None else -1)
