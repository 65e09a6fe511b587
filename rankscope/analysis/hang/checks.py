"""What must agree across the members of a group at one sequence number, and which ranks are behind."""
from __future__ import annotations

from typing import Any

from rankscope.model.frdump import FrEntry


def _what(e: FrEntry) -> str:
    """What must agree across the members at one sequence number; for point-to-point ops the data (a send
    on one rank and its receive on the other share a sequence number: "send 0->1" / "recv 1<-0")."""
    if e.p2p:
        return f"p2p {e.sizes} {e.dtypes}"
    return f"{e.op} {e.sizes} {e.dtypes}"


_ORDER = {"scheduled": 0, "started": 1, "completed": 2}


def _first_lag(per_rank: dict[int, dict[int, FrEntry]], members: list[int], seqs: list[int]) -> dict[str, Any] | None:
    """The first sequence number that every member recorded with a timed state, but not the same one:
    the ranks in the least advanced state are behind. None when states are unknown (gloo's Flight
    Recorder: all "scheduled") or agree."""
    if not any(e.state in ("started", "completed") for r in members for e in per_rank[r].values()):
        return None
    for s in seqs:
        got = {r: per_rank[r][s] for r in members if s in per_rank[r] and per_rank[r][s].timed}
        if len(got) < len(members) or any(e.state not in _ORDER for e in got.values()):
            continue
        states = {r: e.state for r, e in got.items()}
        if len(set(states.values())) > 1:
            low = min(_ORDER[x] for x in states.values())
            behind = [r for r, x in states.items() if _ORDER[x] == low]
            return {"seq": s, "op": _what(got[behind[0]]), "states": states, "behind": behind,
                    "ahead": [r for r in members if r not in behind]}
    return None
