"""Every rank's entries arranged per process group: who the members are and each member's calls in order.

Members come from the dumps' ``pg_config`` (torch's and rankscope's recorders write it; gloo's own
recorder leaves it empty): then a member that recorded nothing in a group is seen. Without it, the
members are the ranks that recorded anything in the group (and every rank, for the default group when
the world size is known). A group is keyed by its name; where ranks give one name different members
(``split_group`` reuses names), by name and members, as torch's analyzer does (name + hash of the ranks).

A call is one entry, or a coalesced block: consecutive entries of one group sharing a sequence number
(torch records each op of a coalesced group with the group's number, then an end marker such as
``coalesced``), matched across ranks as one collective instead of overwriting each other. Where one
rank's block is the start of another's (torch's own tests reuse a number for separate calls), the
longer block is split there, as torch's analyzer pairs the first op alone.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from rankscope.intlist import format_int_list
from rankscope.model.readers.frdump import FrDump, FrEntry

END_MARKERS = frozenset({"coalesced", "ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced"})


@dataclass(eq=False, slots=True)
class Call:
    """One collective call of one rank in one group: one entry, or a coalesced block."""

    rank: int
    seq: int
    part: int  # 0; 1 for the rest of a block split where another rank's block ended
    entries: tuple[FrEntry, ...]

    @property
    def head(self) -> FrEntry:
        return self.entries[0]

    @property
    def key(self) -> tuple[int, int]:
        return (self.seq, self.part)

    @property
    def fingerprint(self) -> object:
        """What must agree across ranks (op, sizes, dtypes of each entry), as one hashable value."""
        es = self.entries
        if all(e.kind >= 0 for e in es):
            return es[0].kind if len(es) == 1 else tuple(e.kind for e in es)
        return tuple((e.name or e.op, e.in_sizes, e.out_sizes, e.in_dtypes, e.out_dtypes) for e in es)


@dataclass
class Group:
    key: str  # the name, or "name:ranks" where ranks give one name different members
    name: str
    desc: str
    members: tuple[int, ...]
    known: bool  # members from pg_config; False: inferred from who recorded anything in the group
    calls: dict[int, list[Call]] = field(default_factory=dict)  # rank -> its collective calls, in order
    p2p: dict[int, list[FrEntry]] = field(default_factory=dict)  # rank -> its point-to-point ops, in order
    unknown: set[int] = field(default_factory=set)  # members whose records cannot say what they joined

    def local_to_global(self, local: int) -> int:
        """A rank in the group (as "send 0->1" names peers) as a global rank; unknown members: as is."""
        return self.members[local] if self.known and 0 <= local < len(self.members) else local


def arrange(dumps: list[FrDump], world_size: int | None = None) -> list[Group]:
    """The groups of a job's dumps, sorted by key (see the module docstring)."""
    views: dict[str, set[tuple[int, ...]]] = defaultdict(set)
    for d in dumps:
        for name, (_, ranks) in d.groups.items():
            views[name].add(ranks)
    groups: dict[str, Group] = {}
    entries: dict[str, dict[int, list[FrEntry]]] = defaultdict(dict)
    for d in dumps:
        by_pg: dict[str, list[FrEntry]] = defaultdict(list)
        for e in d.entries:
            by_pg[e.pg].append(e)
        for pg, es in by_pg.items():
            key, members, desc = _identity(pg, d, views)
            if key not in groups:
                groups[key] = Group(key, pg, desc or es[0].pg_desc, members or (), members is not None)
            entries[key][d.rank] = es
    for d in dumps:  # members that recorded nothing in a group they belong to
        for name, (desc, ranks) in d.groups.items():
            key = name if len(views[name]) == 1 else f"{name}:{format_int_list(ranks)}"
            if key not in groups and d.rank in ranks:
                groups[key] = Group(key, name, desc, ranks, True)
    dumped = {d.rank: d for d in dumps}
    for key, g in groups.items():
        _fill(g, entries[key], dumped, world_size)
    return [groups[k] for k in sorted(groups, key=_natural)]


def _identity(pg: str, d: FrDump, views: dict[str, set[tuple[int, ...]]]) -> tuple[str, tuple[int, ...] | None, str]:
    """(group key, members or None when unknown, description from pg_config) of a group name on a rank."""
    seen = views.get(pg, set())
    ranks: tuple[int, ...]
    if pg in d.groups:
        desc, ranks = d.groups[pg]
    elif len(seen) == 1:
        desc, ranks = "", next(iter(seen))
    else:
        return pg, None, ""
    return (pg if len(seen) <= 1 else f"{pg}:{format_int_list(ranks)}"), ranks, desc


def _fill(g: Group, per_rank: dict[int, list[FrEntry]], dumped: dict[int, FrDump], world_size: int | None) -> None:
    if not g.known:
        inferred = set(per_rank)
        if (g.desc == "default_pg" or g.name == "0") and world_size:
            inferred |= set(range(world_size))
        g.members = tuple(sorted(inferred))
    blocks: dict[int, list[list[FrEntry]]] = {}
    for r, es in per_rank.items():
        g.p2p[r] = [e for e in es if e.p2p and e.peer is not None]
        blocks[r] = _blocks([e for e in es if not e.p2p])
    g.calls = _split_where_others_end(blocks)
    for r in g.members:
        d = dumped.get(r)
        if d is None or (r not in per_rank and d.ring_full):
            g.unknown.add(r)


def _blocks(es: list[FrEntry]) -> list[list[FrEntry]]:
    """Consecutive entries sharing a sequence number; an end marker closes a block."""
    out: list[list[FrEntry]] = []
    last: list[FrEntry] = []
    for e in es:
        if last and last[0].seq == e.seq and last[-1].name not in END_MARKERS:
            last.append(e)
        else:
            last = [e]
            out.append(last)
    return out


def _split_where_others_end(blocks: dict[int, list[list[FrEntry]]]) -> dict[int, list[Call]]:
    """Blocks as calls; a block another rank's shorter block (not closed by an end marker) is the start of
    is split after that start."""
    longer = {b[0].seq for bs in blocks.values() for b in bs if len(b) > 1}  # only these can be split
    shortest: dict[int, list[FrEntry]] = {}
    for bs in blocks.values():
        for b in bs:
            if b[0].seq in longer and (b[0].seq not in shortest or len(b) < len(shortest[b[0].seq])):
                shortest[b[0].seq] = b
    out: dict[int, list[Call]] = {}
    for r, bs in blocks.items():
        calls: list[Call] = []
        for b in bs:
            s = shortest.get(b[0].seq)
            n = len(s) if s else 0
            if s and n < len(b) and s[-1].name not in END_MARKERS and [e.name for e in b[:n]] == [e.name for e in s]:
                calls += [Call(r, b[0].seq, 0, tuple(b[:n])), Call(r, b[0].seq, 1, tuple(b[n:]))]
            else:
                calls.append(Call(r, b[0].seq, 0, tuple(b)))
        out[r] = calls
    return out


def _natural(key: str) -> tuple[int, str]:
    head = key.split(":", 1)[0]
    return (int(head), key) if head.isdigit() else (1 << 60, key)
