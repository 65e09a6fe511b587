"""What must agree across the members of a group at one call: torch's Flight Recorder analyzer's rules
(``Op.match`` and ``check_size_alltoall`` of torch 2.13's ``components/types.py`` / ``utils.py``), with the
reference call chosen by majority instead of by whichever rank's dump was read first.

Across ranks: the op; input sizes (not for all_to_all and scatter); output sizes (not for all_to_all and
gather); input and output dtypes (not scatter / broadcast inputs, not gather outputs, and not where a side
has no tensor). On each rank: all_reduce output = input; all_gather output = input x group size;
reduce_scatter input = output x group size (only with the members known from ``pg_config``); input dtype =
output dtype (not scatter, gather, broadcast). all_to_all: uneven sizes are normal (MoE), so only the
totals over the group must agree (every element sent is received). A coalesced block matches element by
element. States: the first call every member recorded with a timed state, in different states.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rankscope.analysis.hang import shapes
from rankscope.analysis.hang.matching import END_MARKERS, Call
from rankscope.model.readers.frdump import FrEntry

A2A = frozenset({"all_to_all", "all_to_all_single", "all_to_all_v_single"})  # sizes differ per rank by design
ALL_REDUCE = frozenset({"all_reduce", "allreduce_coalesced"})
ALL_GATHER = frozenset({"all_gather", "all_gather_base", "all_gather_into_tensor_coalesced"})  # torch's list
REDUCE_SCATTER = frozenset({"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"})
_ORDER = {"scheduled": 0, "started": 1, "completed": 2}


@dataclass
class Disagreement:
    """Members that issued a call at the same sequence number that does not fit the others' (or itself)."""

    what: str  # op | size | dtype
    check: str  # ranks (differs from the others) | syntax (inconsistent in itself) | totals (all_to_all)
    expected: str  # the reference call, as the dump writes it (op, input sizes, dtypes)
    expected_ranks: list[int]
    odd: dict[str, list[int]]  # each other call -> the ranks that issued it
    culprits: list[int]
    words: dict[str, Any] = field(default_factory=dict)  # the same calls as people read them, and numbers


def name(e: FrEntry) -> str:
    return e.name or e.op


def signature(c: Call) -> str:
    """What the dump says of a call (op, input sizes, input dtypes), one string per distinct call."""
    one = [f"{e.op if not e.name or e.name == e.op else e.name} {e.sizes} {e.dtypes}" for e in c.entries]
    return one[0] if len(one) == 1 else "coalesced[" + "; ".join(one) + "]"


def _first(s: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    return s[0] if s else ()


def entry_mismatch(a: FrEntry, b: FrEntry) -> str | None:
    """torch's ``Op.match`` between two ranks' entries, state aside: "op", "size", "dtype" or None."""
    t = name(a)
    if t != name(b):
        return "op"
    if t in END_MARKERS or a.p2p:
        return None
    if t not in A2A | {"scatter"} and a.in_sizes != b.in_sizes:
        return "size"
    if t not in A2A | {"gather"} and a.out_sizes != b.out_sizes:
        return "size"
    if t not in ("scatter", "broadcast") and set(a.in_dtypes) != set(b.in_dtypes) and _first(a.in_sizes) \
            and _first(b.in_sizes):
        return "dtype"
    if t != "gather" and set(a.out_dtypes) != set(b.out_dtypes) and _first(a.out_sizes) and _first(b.out_sizes):
        return "dtype"
    return None


def syntax(e: FrEntry, n: int | None) -> tuple[str, str] | None:
    """The rules one entry must satisfy in itself: (what, rule) or None. ``n``: the group's size, if known."""
    t = name(e)
    if t in ALL_REDUCE and e.in_sizes != e.out_sizes:
        return "size", "all_reduce: output = input"
    if n and t in ALL_GATHER and math.prod(_first(e.out_sizes)) != math.prod(_first(e.in_sizes)) * n:
        return "size", f"all_gather: output = input x {n} ranks"
    if n and t in REDUCE_SCATTER and math.prod(_first(e.in_sizes)) != math.prod(_first(e.out_sizes)) * n:
        return "size", f"reduce_scatter: input = output x {n} ranks"
    if t not in ("scatter", "gather", "broadcast") and set(e.in_dtypes) != set(e.out_dtypes) \
            and _first(e.in_sizes) and _first(e.out_sizes):
        return "dtype", "input dtype = output dtype"
    return None


def call_mismatch(a: Call, b: Call) -> str | None:
    if len(a.entries) != len(b.entries):
        return "op"
    return next((m for x, y in zip(a.entries, b.entries) if (m := entry_mismatch(x, y))), None)


def disagreement(calls: dict[int, Call], n: int | None, complete: bool) -> Disagreement | None:
    """The ranks whose call at one sequence number does not fit; ``complete``: every member issued it (the
    all_to_all totals are checked only then)."""
    first = next(iter(calls.values()))
    if all(c.fingerprint == first.fingerprint for c in calls.values()):  # the common case: one call everywhere
        return _alike(first, calls, n, complete)
    sigs = {r: signature(c) for r, c in sorted(calls.items())}
    count = Counter(sigs.values())
    bad = {r: s for r, c in sorted(calls.items()) if (s := next((x for e in c.entries if (x := syntax(e, n))), None))}
    # the reference: the most common call; on ties one that fits itself; then the lowest rank
    ref = calls[min(sigs, key=lambda r: (-count[sigs[r]], r in bad, r))]
    odd_what = {r: m for r, c in sorted(calls.items()) if (m := call_mismatch(ref, c))}
    if odd_what:
        what = next(w for w in ("op", "size", "dtype") if w in odd_what.values())
        return _made(what, "ranks", ref, calls, sorted(odd_what), {})
    if bad:
        what, rule = next(iter(bad.values()))
        return _made(what, "syntax", ref, calls, sorted(bad), {"rule": rule})
    if complete and name(ref.head) in A2A and len(ref.entries) == 1:
        tin = sum(math.prod(_first(c.head.in_sizes)) for c in calls.values())
        tout = sum(math.prod(_first(c.head.out_sizes)) for c in calls.values())
        if tin != tout:
            return _made("size", "totals", ref, calls, sorted(calls), {"input_numel": tin, "output_numel": tout})
    return None


def _alike(c: Call, calls: dict[int, Call], n: int | None, complete: bool) -> Disagreement | None:
    """Every rank issued the same call: it must fit itself; an all_to_all's totals must agree."""
    bad = next((x for e in c.entries if (x := syntax(e, n))), None)
    if bad is not None:
        return _made(bad[0], "syntax", c, calls, sorted(calls), {"rule": bad[1]})
    if complete and name(c.head) in A2A and len(c.entries) == 1:
        per = math.prod(_first(c.head.in_sizes)) * len(calls)
        out = math.prod(_first(c.head.out_sizes)) * len(calls)
        if per != out:
            return _made("size", "totals", c, calls, sorted(calls), {"input_numel": per, "output_numel": out})
    return None


def _made(what: str, check: str, ref: Call, calls: dict[int, Call], culprits: list[int],
          extra: dict[str, Any]) -> Disagreement:
    odd: dict[str, list[int]] = {}
    odd_words: dict[str, list[int]] = {}
    for r in culprits:
        if check == "ranks":
            odd.setdefault(signature(calls[r]), []).append(r)
        odd_words.setdefault(shapes.call(calls[r], out=what != "op"), []).append(r)
    expected_ranks = [r for r in sorted(calls) if r not in culprits]
    return Disagreement(what, check, signature(ref), expected_ranks, odd, culprits,
                        {"expected_call": shapes.call(ref, out=what != "op"), "odd_calls": odd_words, **extra})


def first_lag(calls: dict[int, dict[tuple[int, int], Call]], members: list[int],
              keys: list[tuple[int, int]]) -> dict[str, Any] | None:
    """The first call every member recorded with a timed state, but not the same one: the ranks in the least
    advanced state are behind. None when states are unknown (gloo's Flight Recorder: all "scheduled") or agree."""
    if not any(c.head.state in ("started", "completed") for r in members for c in calls.get(r, {}).values()):
        return None
    for k in keys:
        got = {r: calls[r][k].head for r in members if k in calls.get(r, {}) and calls[r][k].head.timed}
        if len(got) < len(members) or any(e.state not in _ORDER for e in got.values()):
            continue
        states = {r: e.state for r, e in got.items()}
        if len(set(states.values())) > 1:
            low = min(_ORDER[x] for x in states.values())
            behind = [r for r, x in states.items() if _ORDER[x] == low]
            return {"seq": k[0], "call": calls[behind[0]][k], "states": states, "behind": behind,
                    "ahead": [r for r in members if r not in behind],
                    "started": [r for r, x in states.items() if x == "started"]}
    return None
