"""The shape of a pipeline: its stages, the number of microbatches and the schedule.

Pattern: in each step, activations flow downstream before any gradient flows back, so between two ranks
that exchange point-to-point messages, the one whose first call to the other is a send is upstream (each
rank decides on its own clock; a vote over the steps and both sides). The upstream edges form a chain
(or several equal chains under data parallelism): a rank's stage is its depth in the chain. A ring (the
last rank sends back to the first) is a looped, interleaved schedule; its first stage is the rank that
starts a step with a send. Without point-to-point calls, ``layout={"pp": P}`` (run.json) gives P stages of
contiguous ranks (pp outermost, as torch's DeviceMesh ("pp", "dp") and Megatron place them).

The schedule comes from its spans where the schedule writes them (torch's GPipe: "Forward i" /
"Backward i"; the runtime schedules: "PP:<stage><F|B|I|W><mb>"), else from the order of the messages: the
forward messages a stage handles before its first backward one are all m of them under GPipe, at most
p - stage under 1F1B. Microbatches: distinct forward spans per step, else forward messages per step.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from statistics import median
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rankscope.analysis.diagnosis.pipeline_waits import RankWaits, StepWaits


@dataclass
class Stages:
    stage_of: dict[int, int]  # rank -> stage
    ranks_of: list[list[int]]  # stage -> its ranks
    source: str  # "layout", "p2p" or "layout+p2p"
    looped: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.ranks_of)

    def up(self, rank: int, peer: int) -> bool | None:
        """Whether ``peer`` is upstream of ``rank`` (None: not a neighbour in the stage order)."""
        a, b = self.stage_of.get(rank), self.stage_of.get(peer)
        if a is None or b is None or a == b:
            return None
        p = self.count
        if self.looped:
            return (a - b) % p == 1 if (a - b) % p in (1, p - 1) else None
        return b < a


def upstream_votes(parts: list[tuple[int, "RankWaits"]]) -> Counter[tuple[int, int]]:
    """Votes for (upstream, downstream) rank pairs: per rank and step, the first call to each peer."""
    votes: Counter[tuple[int, int]] = Counter()
    for rank, p in parts:
        for sw in p.steps:
            seen: set[int] = set()
            for op, peer, _ in sw.messages:
                if peer in seen:
                    continue
                seen.add(peer)
                votes[(rank, peer) if op == "send" else (peer, rank)] += 1
    return votes


def from_p2p(parts: list[tuple[int, "RankWaits"]]) -> Stages | None:
    """Stages from the direction of the first messages (see the module docstring); None: no pipeline."""
    votes = upstream_votes(parts)
    edges = {(a, b) for (a, b), n in votes.items() if n > votes.get((b, a), 0)}
    if not edges:
        return None
    nodes = sorted({x for e in edges for x in e})
    succ: dict[int, list[int]] = {n: [] for n in nodes}
    indeg = Counter(b for _, b in edges)
    for a, b in sorted(edges):
        succ[a].append(b)
    depth = {n: 0 for n in nodes}
    todo = [n for n in nodes if indeg[n] == 0]
    left = dict(indeg)
    done = 0
    while todo:
        n = todo.pop()
        done += 1
        for m in succ[n]:
            depth[m] = max(depth[m], depth[n] + 1)
            left[m] -= 1
            if left[m] == 0:
                todo.append(m)
    if done < len(nodes):
        return _ring(parts, nodes, succ, indeg)
    p = max(depth.values()) + 1
    ranks_of = [sorted(n for n in nodes if depth[n] == s) for s in range(p)]
    notes = []
    if len({len(r) for r in ranks_of}) > 1:
        notes.append("the stages hold different numbers of ranks: " + ", ".join(
            f"stage {s}: {len(r)}" for s, r in enumerate(ranks_of)))
    return Stages(dict(depth), ranks_of, "p2p", notes=notes)


def _ring(parts: list[tuple[int, "RankWaits"]], nodes: list[int], succ: dict[int, list[int]],
          indeg: Counter[int]) -> Stages | None:
    """A single directed ring (each rank one successor, one predecessor): a looped schedule."""
    if any(len(succ[n]) != 1 or indeg[n] != 1 for n in nodes):
        return None
    first_send = Counter(r for r, p in parts for sw in p.steps if sw.messages and sw.messages[0][0] == "send")
    start = first_send.most_common(1)[0][0] if first_send else nodes[0]
    order, n = [start], succ[start][0]
    while n != start and len(order) <= len(nodes):
        order.append(n)
        n = succ[n][0]
    if len(order) != len(nodes):
        return None
    return Stages({r: s for s, r in enumerate(order)}, [[r] for r in order], "p2p", looped=True)


def from_layout(layout: dict[str, Any] | None, ranks: list[int], world: int) -> Stages | None:
    """``pp`` stages of contiguous ranks (pp outermost); None without a pp of 2 or more."""
    try:
        pp = int((layout or {}).get("pp") or 0)
    except (TypeError, ValueError):
        return None
    if pp < 2 or world % pp:
        return None
    per = world // pp
    stage_of = {r: r // per for r in ranks}
    return Stages(stage_of, [sorted(r for r in ranks if r // per == s) for s in range(pp)], "layout")


def stages(parts: list[tuple[int, "RankWaits"]], layout: dict[str, Any] | None, ranks: list[int],
           world: int) -> Stages | None:
    """The topology's stages, checked against the layout's pp; the layout's when there is no topology."""
    topo, lay = from_p2p(parts), from_layout(layout, ranks, world)
    if topo is None:
        return lay
    if lay is None:
        return topo
    if lay.count == topo.count and all(lay.stage_of.get(r) == s for r, s in topo.stage_of.items()):
        topo.source = "layout+p2p"
    else:
        topo.notes.append(f"the layout says pp={lay.count} in contiguous ranks; the point-to-point traffic says "
                          f"{topo.count} stages ({_order(topo)}): the traffic is used")
    return topo


def _order(s: Stages) -> str:
    return " -> ".join("/".join(map(str, r)) for r in s.ranks_of)


def direction(st: Stages, rank: int, op: str, peer: int) -> str:
    """"forward" (activations: receive from upstream, send downstream), "backward" or "other"."""
    up = st.up(rank, peer)
    if up is None:
        return "other"
    return "forward" if (op == "recv") == up else "backward"


def stages_per_rank(parts: list[tuple[int, "RankWaits"]]) -> int:
    """The stages one rank holds (the runtime schedules' spans "PP:<stage>F<mb>" name them; interleaved: 2 or
    more), the most seen in a step; 1 without such spans."""
    held = [len({stage for a, stage, _ in sw.spans if a == "F" and stage >= 0}) for _, p in parts for sw in p.steps]
    return max(held, default=0) or 1


def microbatches(parts: list[tuple[int, "RankWaits"]], st: Stages) -> int | None:
    """Microbatches per step: distinct forward spans' microbatch numbers (a rank holding two stages under
    interleaved 1F1B runs "PP:0F3" and "PP:4F3" for microbatch 3), else forward messages (median over ranks and
    steps)."""
    per: list[int] = []
    for rank, p in parts:
        for sw in p.steps:
            fwd = {mb for a, _, mb in sw.spans if a == "F"}
            if fwd:
                per.append(len(fwd))
                continue
            msgs = [m for m in sw.messages if direction(st, rank, m[0], m[1]) == "forward"]
            kinds = {m[0] for m in msgs}
            if msgs:  # a middle stage receives and sends each microbatch: count one side
                per.append(sum(1 for m in msgs if m[0] == min(kinds)))
    return int(median(per)) if per else None


def schedule(parts: list[tuple[int, "RankWaits"]], st: Stages, m: int | None) -> tuple[str, str]:
    """(schedule, how it was told): from the spans when there are, else from the messages' order."""
    spans = [sw.spans for _, p in parts for sw in p.steps if sw.spans]
    if spans:
        acts = {a for s in spans for a, _, _ in s}
        stages_per_rank = max(len({stg for _, stg, _ in s}) for s in spans)
        if acts & {"I", "W"}:
            return "zero bubble", "spans"
        if stages_per_rank > 1 or st.looped:
            return "interleaved 1F1B", "spans"
        return ("GPipe" if all(_all_forward_first([a for a, _, _ in s]) for s in spans) else "1F1B"), "spans"
    if st.looped:
        return "interleaved", "pattern"
    return _from_order(parts, st, m), "pattern"


def _all_forward_first(acts: list[str]) -> bool:
    first_b = next((i for i, a in enumerate(acts) if a != "F"), len(acts))
    return all(a != "F" for a in acts[first_b:])


def _from_order(parts: list[tuple[int, "RankWaits"]], st: Stages, m: int | None) -> str:
    """GPipe when every stage handles all m forward messages before its first backward one; 1F1B when
    stage s handles at most p - s (warm-up) of them."""
    if not m:
        return "unknown"
    p, ahead = st.count, []
    for rank, part in parts:
        s = st.stage_of.get(rank)
        if s is None:
            continue
        for sw in part.steps:
            dirs = [direction(st, rank, op, peer) for op, peer, _ in sw.messages]
            side = "recv" if s > 0 else "send"  # count one side of a middle stage's forward traffic
            fwd = [d == "forward" and op == side for d, (op, _, _) in zip(dirs, sw.messages)]
            first_b = next((i for i, d in enumerate(dirs) if d == "backward"), None)
            if first_b is not None:
                ahead.append((s, sum(fwd[:first_b])))
    if not ahead:
        return "unknown"
    if m <= p and all(n >= min(m, p - s) for s, n in ahead):
        return "GPipe or 1F1B (as many stages as microbatches: the same order)"
    if sum(n >= m for _, n in ahead) >= 0.8 * len(ahead):
        return "GPipe"
    if sum(n <= p - s for s, n in ahead) >= 0.8 * len(ahead):
        return "1F1B"
    return "unknown"


def expected_bubble(p: int, m: int | None, schedule_name: str, virtual: int = 1) -> float | None:
    """The idle share of a balanced pipeline's step: (p - 1) / (v·m + p - 1) (GPipe, 1F1B; v stages per
    rank when interleaved); None when m is unknown or the schedule's bubble is not this one (zero bubble)."""
    if not m or p < 2 or schedule_name == "zero bubble":
        return None
    return (p - 1) / (virtual * m + p - 1)


def bubble_formula(virtual: int) -> str:
    """"(p-1)/(m+p-1)", or "(p-1)/(2m+p-1)" with 2 stages per rank."""
    return "(p-1)/(m+p-1)" if virtual <= 1 else f"(p-1)/({virtual}m+p-1)"


def wait_kinds(st: Stages, rank: int, sw: "StepWaits") -> dict[str, int]:
    """A step's waits on one rank by what it waited for: activations (from upstream), gradients (from
    downstream), a neighbour to take a send, other point-to-point traffic."""
    out = {"fwd_wait_ns": 0, "bwd_wait_ns": 0, "send_wait_ns": 0, "other_wait_ns": 0}
    for (op, peer), ns in sw.wait_ns.items():
        d = direction(st, rank, op, peer)
        key = "other_wait_ns" if d == "other" else "send_wait_ns" if op == "send" else \
            "fwd_wait_ns" if d == "forward" else "bwd_wait_ns"
        out[key] += ns
    return out
