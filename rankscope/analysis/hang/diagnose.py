"""Hangs and desyncs from per-rank collective records: who never joined what.

Entries of all ranks are matched by (process group, sequence number in that group): every member of
a group issues its collectives in the same order, so the n-th collective of a group must be the same
op, with the same sizes and dtypes, on every member. Members of a group are the ranks that recorded
anything in it (Flight Recorder on gloo records no group membership). Per group, in sequence order:

- a sequence number that some members recorded and others did not: those others never reached it
  (the first such number is where the job hangs);
- the same sequence number with another op, size or dtype on some rank: a desync (the rank issued a
  different collective, e.g. it skipped one and is already at the next), or a size / dtype mismatch;
- point-to-point ops (where the recorder names the peer: "send 0->1", "recv 1<-0") matched per pair of
  ranks in order: the k-th send from a to b is the k-th receive on b from a. A send without its receive
  (or a receive without its send) and a size / dtype that differs between the two are reported;
- sequence numbers below the first one every member still holds are left out: a ring that dropped its
  oldest entries (or a dump limited to a started interval) is not a rank that never joined;
- the last sequence number each rank recorded, and its last completed one where the recorder knows;
- where every member joined but their states differ (Flight Recorder on NCCL with timing, the timed
  engine): the first collective some ranks had not started, or not completed, when the others had. In a
  stuck job those ranks are behind (an NCCL rank whose GPU never started the collective is still in earlier
  work), which torch's analyzer reports as a state mismatch with them as the culprit; in a dump taken while
  the job ran it can be a collective in flight, so it is a warning, not a hang.

Plain data in, plain data out (``Finding``s and rows); the CLI (`rankscope hang`) renders them.
"""
from __future__ import annotations

from collections import defaultdict

from rankscope.analysis.hang.checks import _first_lag, _what
from rankscope.analysis.hang.findings import Verdict
from rankscope.analysis.hang.p2p import _p2p
from rankscope.analysis.hang.words import _headline
from rankscope.model.frdump import FrDump, FrEntry


def diagnose(dumps: list[FrDump], world_size: int | None = None) -> Verdict:
    """The cross-rank verdict (see the module docstring)."""
    ranks = sorted(d.rank for d in dumps)
    by_group: dict[str, dict[int, dict[int, FrEntry]]] = defaultdict(lambda: defaultdict(dict))
    desc: dict[str, str] = {}
    for d in dumps:
        for e in d.entries:
            key = f"{e.pg}{' (p2p)' if e.p2p else ''}"
            by_group[key][e.rank][e.seq] = e
            desc[key] = e.pg_desc
    v = Verdict(headline="", ranks=ranks,
                no_dump=sorted(set(range(world_size or 0)) - set(ranks)))
    for g in sorted(by_group):
        per_rank = by_group[g]
        members = sorted(per_rank)
        if g.endswith("(p2p)") and any(e.peer is not None for r in members for e in per_rank[r].values()):
            v.groups.append({"group": g, "desc": desc[g], "members": members,
                             "last_seq": {r: max(per_rank[r]) for r in members}})
            v.problems += _p2p(per_rank, g, desc[g], set(ranks))
            continue
        last = {r: max(per_rank[r]) for r in members}
        # where the recorder knows completion (the timed engine; Flight Recorder on NCCL): the last
        # completed sequence per rank, None when it completed none it timed
        done = {r: max((s for s, e in per_rank[r].items() if e.state == "completed"), default=None) for r in members}
        known = any(e.state in ("completed", "failed") for r in members for e in per_rank[r].values())
        v.groups.append({"group": g, "desc": desc[g], "members": members, "last_seq": last,
                         **({"last_completed": done} if known else {})})
        floor = max(min(per_rank[r]) for r in members)  # what every member's ring still holds
        seqs = sorted({s for r in members for s in per_rank[r] if s >= floor})
        before = len(v.problems)
        for s in seqs:
            have = [r for r in members if s in per_rank[r]]
            missing = [r for r in members if s not in per_rank[r]]
            kinds: dict[str, list[int]] = defaultdict(list)
            for r in have:
                kinds[_what(per_rank[r][s])].append(r)
            if len(kinds) > 1:
                major = max(kinds.items(), key=lambda kv: len(kv[1]))
                odd = {k: rs for k, rs in kinds.items() if k != major[0]}
                e0 = per_rank[major[1][0]][s]
                others = [per_rank[rs[0]][s] for rs in odd.values()]
                what = ("op" if any(o.op != e0.op for o in others) else
                        "size" if any(o.sizes != e0.sizes for o in others) else "dtype")
                v.problems.append({"kind": "mismatch", "what": what, "group": g, "desc": desc[g], "seq": s,
                                   "expected": major[0], "expected_ranks": major[1], "odd": odd})
                break
            if missing:
                e = per_rank[have[0]][s]
                v.problems.append({"kind": "not_joined", "group": g, "desc": desc[g], "seq": s, "op": _what(e),
                                   "joined": have, "missing": missing,
                                   "their_last": {r: last[r] for r in missing},
                                   **({"last_completed": done} if known else {})})
                break
        if len(v.problems) == before and not g.endswith("(p2p)"):
            lag = _first_lag(per_rank, members, seqs)
            if lag is not None:
                v.problems.append({"kind": "behind", "group": g, "desc": desc[g], **lag})
    v.problems.sort(key=lambda p: p["kind"] == "behind")  # a rank missing or a mismatch first
    v.headline = _headline(v)
    return v
