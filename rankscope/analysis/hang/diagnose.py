"""Hangs and desyncs from per-rank collective records: who never joined what, and why.

Every rank's entries are arranged per process group (``matching``: members from ``pg_config``,
coalesced blocks as one call) and matched by sequence number: every member issues a group's
collectives in the same order, so the n-th call of a group must fit on every member (``checks``:
torch's analyzer's rules). Per group, in sequence order, from the first number every member's ring
still holds (a ring that dropped old entries is not a rank that never joined):

- a call some members issued with another op, size or dtype (or that does not fit itself): a desync or
  mismatch; the ranks that differ from the majority are the culprits;
- a call some members never issued: they never joined it (they are the culprits, the others wait);
- members whose records cannot say (no dump, or a ring with nothing of the group): where the others
  wait in the group's last call, those members are the suspects;
- every member joined, but in different states (timed records): the first call some had not started
  or completed when the others had (a warning: a dump taken while the job ran can catch one in flight).

Point-to-point ops are paired per sender and receiver (``p2p``); the groups' descriptions, members and
the dumps' versions are compared (``consistency``). ``rootcause`` then puts the problem that explains
the others first. Where each rank is (waiting in which call for how long, outside any collective at
which line, gone, silent) comes from its dump: the pending call's creation time and timeout, its
stack, and the thread stacks rankscope's recorder adds.
"""
from __future__ import annotations

from collections import Counter

from rankscope.analysis.hang import checks, consistency, p2p, rootcause, shapes, words
from rankscope.analysis.hang.findings import HANG_KINDS, Problem, Verdict, Where
from rankscope.analysis.hang.matching import Call, Group, arrange
from rankscope.model.readers.frdump import FrDump, FrEntry, no_gc


def diagnose(dumps: list[FrDump], world_size: int | None = None) -> Verdict:
    """The cross-rank verdict (see the module docstring)."""
    with no_gc():
        return _diagnose(dumps, world_size)


def _diagnose(dumps: list[FrDump], world_size: int | None) -> Verdict:
    dumped = {d.rank: d for d in dumps}
    groups = arrange(dumps, world_size)
    members = {r for g in groups if g.known for r in g.members}
    no_dump = sorted((set(range(world_size or 0)) | members) - set(dumped))
    problems: list[Problem] = []
    for g in groups:
        problems += _collectives(g, dumped, no_dump)
        problems += p2p.pair(g, set(dumped), {r for r, d in dumped.items() if not d.ring_full})
    problems += consistency.check(dumps)
    for p in problems:
        _annotate(p, dumped)
    v = Verdict("", rootcause.order(problems, groups), [_summary(g) for g in groups if g.calls], sorted(dumped),
                no_dump)
    v.where = _where(v, dumped, groups)
    v.headline = words.headline(v)
    return v


def _collectives(g: Group, dumped: dict[int, FrDump], no_dump: list[int]) -> list[Problem]:
    calls = {r: {c.key: c for c in cs} for r, cs in g.calls.items() if cs}
    recorded = [r for r in g.members if r not in g.unknown]
    if not calls:
        return []
    floor = max((min(k[0] for k in calls[r]) for r in recorded if r in calls), default=0)
    keys = sorted({k for r in calls for k in calls[r] if k[0] >= floor})
    silent = sorted(set(g.members) & g.unknown) if g.known else sorted((set(g.members) & g.unknown) | set(no_dump))
    size = len(g.members) if g.known else None
    for k in _suspects(calls, recorded, keys, size):
        have = {r: calls[r][k] for r in sorted(calls) if k in calls[r]}
        missing = [r for r in recorded if k not in calls.get(r, {})]
        d = checks.disagreement(have, size, complete=not missing and not silent)
        if d is not None:
            return [_mismatch(g, k, d, have, dumped)]
        if missing:
            return [_not_joined(g, k, have, missing, [r for r in silent if r in g.members], calls, dumped)]
    if silent and keys:
        have = {r: calls[r][keys[-1]] for r in sorted(calls) if keys[-1] in calls[r]}
        if any(_pending(c, dumped.get(r)) for r, c in have.items()):
            return [_not_joined(g, keys[-1], have, [], silent, calls, dumped)]
    lag = checks.first_lag(calls, recorded, keys)
    if lag is None:
        return []
    call: Call = lag.pop("call")
    started = lag.pop("started")
    return [Problem("behind", g.key, g.desc, lag["seq"], shapes.op_name(call), lag["behind"], started,
                    {**lag, "call": shapes.call(call)},
                    entries={r: calls[r][call.key].head for r in lag["ahead"]})]


def _suspects(calls: dict[int, dict[tuple[int, int], Call]], recorded: list[int], keys: list[tuple[int, int]],
              size: int | None) -> list[tuple[int, int]]:
    """The calls that may hold a problem, in order: some member lacks it, ranks' calls differ, or the call
    may not fit itself (each distinct call checked once) or is an all_to_all (totals). Set operations and one
    pass over the calls; the rules themselves run only on these."""
    every = set(keys)
    sus: set[tuple[int, int]] = set()
    for r in recorded:
        sus |= every - calls.get(r, {}).keys()
    ref: dict[tuple[int, int], object] = {}
    sample: dict[object, Call] = {}
    for cs in calls.values():
        for k, c in cs.items():
            f = c.fingerprint
            if ref.setdefault(k, f) != f:
                sus.add(k)
            sample.setdefault(f, c)
    odd = {f for f, c in sample.items() if any(checks.syntax(e, size) or checks.name(e) in checks.A2A
                                               for e in c.entries)}
    if odd:
        sus |= {k for cs in calls.values() for k, c in cs.items() if c.fingerprint in odd}
    return sorted(sus & every)


def _pending(c: Call, d: FrDump | None) -> bool:
    """A call its rank is still in: its last recorded one, not completed."""
    return d is not None and bool(d.entries) and d.entries[-1] in c.entries and c.head.state != "completed"


def _mismatch(g: Group, k: tuple[int, int], d: checks.Disagreement, have: dict[int, Call],
              dumped: dict[int, FrDump]) -> Problem:
    waiting = [r for r, c in have.items() if _pending(c, dumped.get(r))]
    ref = have[d.expected_ranks[0]] if d.expected_ranks else next(iter(have.values()))
    detail = {"what": d.what, "check": d.check, "expected": d.expected, "expected_ranks": d.expected_ranks,
              "odd": d.odd, "part": k[1], **d.words}
    return Problem("mismatch", g.key, g.desc, k[0], shapes.op_name(ref), d.culprits, waiting, detail,
                   entries={r: have[r].head for r in waiting} or {r: c.head for r, c in have.items()})


def _not_joined(g: Group, k: tuple[int, int], have: dict[int, Call], missing: list[int], silent: list[int],
                calls: dict[int, dict[tuple[int, int], Call]], dumped: dict[int, FrDump]) -> Problem:
    c = next(iter(have.values()))
    last = {r: max(calls[r])[0] if calls.get(r) else None for r in missing}
    done = {r: max((kk[0] for kk, cc in calls.get(r, {}).items() if cc.head.state == "completed"), default=None)
            for r in g.members if r in calls}
    known = any(cc.head.state in ("completed", "failed") for cs in calls.values() for cc in cs.values())
    detail = {"joined": sorted(have), "missing": missing, "no_dump": silent, "their_last": last, "part": k[1],
              "call": shapes.call(c), "signature": checks.signature(c), **({"last_completed": done} if known else {})}
    return Problem("not_joined", g.key, g.desc, k[0], shapes.op_name(c), missing or silent, sorted(have), detail,
                   entries={r: cc.head for r, cc in have.items()})


def _annotate(p: Problem, dumped: dict[int, FrDump]) -> None:
    """The step, the issuing frame and how long each waiting rank has waited against its timeout."""
    steps = []
    for r, e in sorted(p.entries.items()):
        d = dumped.get(r)
        steps.append(e.step if e.step is not None else d.step if d is not None and d.entries
                     and d.entries[-1] is e else None)
        if r in p.waiting:
            p.pending[r] = _pending_s(e, d)
    known = [s for s in steps if s is not None]
    p.step = Counter(known).most_common(1)[0][0] if known else None
    p.stack = next((shapes.frame(e.frames) for e in p.entries.values() if e.frames), "")
    created = [e.created_ns for r, e in p.entries.items() if e.created_ns and (r in p.waiting or not p.waiting)]
    p.created_ns = min(created) if created else p.created_ns


def _pending_s(e: FrEntry, d: FrDump | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if d is not None and d.dump_ns and e.created_ns:
        out["pending_s"] = round((d.dump_ns - e.created_ns) / 1e9, 3)
    if e.timeout_ms:
        out["timeout_s"] = e.timeout_ms / 1000
    return out


def _summary(g: Group) -> dict[str, object]:
    last = {r: cs[-1].seq for r, cs in sorted(g.calls.items()) if cs}
    out: dict[str, object] = {"group": g.key, "desc": g.desc, "members": list(g.members), "last_seq": last}
    if any(c.head.state in ("completed", "failed") for cs in g.calls.values() for c in cs):
        out["last_completed"] = {r: max((c.seq for c in cs if c.head.state == "completed"), default=None)
                                 for r, cs in sorted(g.calls.items()) if cs}
    return out


def _where(v: Verdict, dumped: dict[int, FrDump], groups: list[Group]) -> dict[int, Where]:
    """Where each rank is: waiting in a problem's call, gone, silent, or outside every collective."""
    out: dict[int, Where] = {}
    ranks = set(dumped) | set(v.no_dump) | {r for g in groups for r in g.members}
    for r in sorted(ranks):
        d = dumped.get(r)
        if d is None:
            out[r] = Where(r, "no_dump")
            continue
        p = next((p for p in v.problems if p.kind in HANG_KINDS + ("behind",) and r in p.waiting and r in p.entries),
                 None)
        if p is not None:
            e = p.entries[r]
            out[r] = Where(r, "waiting", p.group, p.seq, e.name or e.op, p.step, shapes.frame(e.frames),
                           p.pending.get(r, {}).get("pending_s"), p.pending.get(r, {}).get("timeout_s"))
            continue
        last = d.entries[-1] if d.entries else None
        state = "exited" if d.reason == "exit" else "outside"
        out[r] = Where(r, state, last.pg if last else "", last.seq if last else None,
                       (last.name or last.op) if last else "", d.step, words.thread_frame(d.stacks))
    return out
