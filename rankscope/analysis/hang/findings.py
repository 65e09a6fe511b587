"""What the hang analysis concludes, as plain data: problems (root causes first, each consequence marked
with the root it follows from), the groups and where every rank is."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# kinds of problem: a hang or desync first, then what only warns
HANG_KINDS = ("deadlock", "not_joined", "mismatch", "unmatched_send", "unmatched_recv", "p2p_mismatch")
WARN_KINDS = ("behind", "pg_inconsistent")


@dataclass
class Problem:
    """One thing wrong in one group (or one point-to-point pair).

    ``culprits``: the ranks whose missing or different call explains it; ``waiting``: the ranks stuck in it.
    ``root``: nothing else explains it; otherwise ``consequence_of`` is the index (in ``Verdict.problems``)
    of the root cause it follows from. ``detail`` holds what only this kind has (joined / missing, the
    expected and odd calls, the pair's counts, ...)."""

    kind: str
    group: str
    desc: str
    seq: int | None
    op: str
    culprits: list[int]
    waiting: list[int]
    detail: dict[str, Any] = field(default_factory=dict)
    root: bool = True
    consequence_of: int | None = None
    step: int | None = None  # the training step the waiting ranks are in, where the recorder knows
    stack: str = ""  # where the waiting ranks issued the call (innermost frame of user code)
    pending: dict[int, dict[str, float]] = field(default_factory=dict)  # waiting rank -> pending_s, timeout_s
    created_ns: int = 0  # the earliest creation of the call on a waiting rank (wall clock; 0: unknown)
    entries: dict[int, Any] = field(default_factory=dict, repr=False)  # waiting rank -> its FrEntry (not exported)

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "group": self.group, "desc": self.desc, "seq": self.seq, "op": self.op,
               "culprits": self.culprits, "waiting": self.waiting, "root": self.root,
               "consequence_of": self.consequence_of, "step": self.step, "stack": self.stack,
               "pending": {str(r): v for r, v in self.pending.items()}}
        out.update({k: v for k, v in self.detail.items() if k not in out})
        return out


@dataclass
class Where:
    """Where one rank is, as its dump shows it."""

    rank: int
    state: str  # waiting | outside | exited | no_dump
    group: str = ""
    seq: int | None = None
    op: str = ""
    step: int | None = None
    frame: str = ""  # waiting: where it issued the call; outside: its main thread's innermost user frame
    pending_s: float | None = None
    timeout_s: float | None = None


@dataclass
class Verdict:
    headline: str
    problems: list[Problem] = field(default_factory=list)  # root causes first, each followed by its consequences
    groups: list[dict[str, Any]] = field(default_factory=list)  # per group: members, last seq per rank
    ranks: list[int] = field(default_factory=list)
    no_dump: list[int] = field(default_factory=list)
    where: dict[int, Where] = field(default_factory=dict)

    @property
    def roots(self) -> list[Problem]:
        return [p for p in self.problems if p.root]

    def to_dict(self) -> dict[str, Any]:
        return {"headline": self.headline, "problems": [p.to_dict() for p in self.problems], "groups": self.groups,
                "ranks": self.ranks, "no_dump": self.no_dump,
                "where": {str(r): vars(w) for r, w in sorted(self.where.items())}}
