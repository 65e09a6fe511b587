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
from dataclasses import dataclass, field
from typing import Any

from rankscope.intlist import format_int_list
from rankscope.model.frdump import FrDump, FrEntry


@dataclass
class Verdict:
    headline: str
    problems: list[dict[str, Any]] = field(default_factory=list)  # first of each kind per group
    groups: list[dict[str, Any]] = field(default_factory=list)  # per group: members, last seq per rank
    ranks: list[int] = field(default_factory=list)
    no_dump: list[int] = field(default_factory=list)


def _what(e: FrEntry) -> str:
    """What must agree across the members at one sequence number; for point-to-point ops the data (a send
    on one rank and its receive on the other share a sequence number: "send 0->1" / "recv 1<-0")."""
    if e.p2p:
        return f"p2p {e.sizes} {e.dtypes}"
    return f"{e.op} {e.sizes} {e.dtypes}"


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


_ORDER = {"scheduled": 0, "started": 1, "completed": 2}


def _p2p(per_rank: dict[int, dict[int, FrEntry]], g: str, desc: str, dumped: set[int]) -> list[dict[str, Any]]:
    """Point-to-point ops matched per (sender, receiver) in order; the first problem of each pair. Pairs whose
    sequence on either side does not start at 1 (a ring that dropped entries) are not counted."""
    sends: dict[tuple[int, int], list[FrEntry]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[FrEntry]] = defaultdict(list)
    for r, ents in per_rank.items():
        for s in sorted(ents):
            e = ents[s]
            if e.peer is None:
                continue
            if e.op == "send":
                sends[(r, e.peer)].append(e)
            else:
                recvs[(e.peer, r)].append(e)
    whole = {r for r, ents in per_rank.items() if min(ents) == 1}
    out: list[dict[str, Any]] = []
    for src, dst in sorted(set(sends) | set(recvs)):
        if src not in dumped or dst not in dumped or not {src, dst} <= whole:
            continue  # no dump from one side (said apart), or a side whose oldest ops are gone
        a, b = sends.get((src, dst), []), recvs.get((src, dst), [])
        base = {"group": g, "desc": desc, "src": src, "dst": dst, "sent": len(a), "received": len(b)}
        bad = next((k for k in range(min(len(a), len(b))) if (a[k].sizes, a[k].dtypes) != (b[k].sizes, b[k].dtypes)), None)
        if bad is not None:
            out.append({"kind": "p2p_mismatch", **base, "seq": a[bad].seq, "n": bad + 1,
                        "expected": f"{a[bad].sizes} {a[bad].dtypes}", "got": f"{b[bad].sizes} {b[bad].dtypes}"})
        elif len(a) > len(b):
            out.append({"kind": "unmatched_send", **base, "seq": a[len(b)].seq, "n": len(b) + 1,
                        "op": f"{a[len(b)].sizes} {a[len(b)].dtypes}"})
        elif len(b) > len(a):
            out.append({"kind": "unmatched_recv", **base, "seq": b[len(a)].seq, "n": len(a) + 1,
                        "op": f"{b[len(a)].sizes} {b[len(a)].dtypes}"})
    return out


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


def _group(p: dict[str, Any]) -> str:
    return f"process group {p['group']}" + (f" ({p['desc']})" if p["desc"] and p["desc"] != "undefined" else "")


def _headline(v: Verdict) -> str:
    tail = f"; no dump from ranks {format_int_list(v.no_dump)}" if v.no_dump else ""
    if not v.problems:
        return f"no hang or desync among ranks {format_int_list(v.ranks)}: every group's collectives agree{tail}"
    return describe(v.problems[0]) + tail


def describe(p: dict[str, Any]) -> str:
    """One problem in plain words."""
    if p["kind"] in ("unmatched_send", "unmatched_recv", "p2p_mismatch"):
        src, dst, n = p["src"], p["dst"], p["n"]
        if p["kind"] == "unmatched_send":
            return (f"unmatched send in {_group(p)}: rank {src}'s send #{n} to rank {dst} ({p['op']}) has no matching "
                    f"receive (rank {dst} posted {p['received']} receive{'s' if p['received'] != 1 else ''} from "
                    f"rank {src})")
        if p["kind"] == "unmatched_recv":
            return (f"unmatched receive in {_group(p)}: rank {dst} waits for receive #{n} from rank {src} ({p['op']}), "
                    f"which rank {src} never sent (it sent {p['sent']})")
        return (f"point-to-point size mismatch in {_group(p)}: rank {src}'s send #{n} to rank {dst} is {p['expected']}, "
                f"rank {dst}'s matching receive {p['got']}")
    if p["kind"] == "behind":
        low = p["states"][p["behind"][0]]
        ahead = sorted({p["states"][r] for r in p["ahead"]}, key=_ORDER.__getitem__)
        what = "never started" if low == "scheduled" else "had not completed"
        return (f"every rank joined each collective, but in {_group(p)} rank{'s' if len(p['behind']) > 1 else ''} "
                f"{format_int_list(p['behind'])} {what} collective #{p['seq']} ({p['op']}; state {low}) when ranks "
                f"{format_int_list(p['ahead'])} had it {' / '.join(ahead)}: if the job is stuck, "
                f"{'they are' if len(p['behind']) > 1 else 'it is'} behind"
                + (" (on a GPU: still in earlier work)" if low == "scheduled" else "")
                + "; in a dump taken while the job ran, a collective in flight")
    if p["kind"] == "mismatch":
        odd = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {format_int_list(rs)} issued {k}" for k, rs in p["odd"].items())
        what = p.get("what", "op")
        head = "desync" if what == "op" else f"{what} mismatch"
        why = ("a rank skipped or added a collective" if what == "op" else
               "the same collective with another shape" if what == "size" else "the same collective with another dtype")
        return (f"{head} in {_group(p)} at collective #{p['seq']}: rank{'s' if len(p['expected_ranks']) > 1 else ''} "
                f"{format_int_list(p['expected_ranks'])} issued {p['expected']}, but {odd} ({why})")
    done = p.get("last_completed")
    tail = ("; last completed: " + ", ".join(f"rank {r} #{s}" if s is not None else f"rank {r} none"
                                            for r, s in sorted(done.items()))) if done else ""
    return (f"hang in {_group(p)} at collective #{p['seq']} ({p['op']}): ranks {format_int_list(p['missing'])} "
            f"never joined it (last recorded: " + ", ".join(f"rank {r} #{s}" for r, s in p["their_last"].items())
            + f"); ranks {format_int_list(p['joined'])} wait in it{tail}")


def run_hang(run: Any, results: dict[str, Any]) -> Any:
    """Registered analysis "hang": the latest collective recorder dump of every rank in the run directory
    (``ranks/<r>/comms.<n>-<reason>.rank<r>.json.gz``), matched by (process group, sequence)."""
    import polars as pl

    from rankscope.analysis.base import Finding, Result, Severity
    from rankscope.errors import TraceError
    from rankscope.model import frdump

    files = [f for f in frdump.find(run.path) if str(f).rsplit("/", 1)[-1].startswith("comms.")]
    if not files:
        return Result("hang", skipped="no collective recorder dumps in the run (profile with comms=True or "
                                      "RANKSCOPE_COMMS=1; dumps come at the end, on a watchdog, on SIGUSR1 or with "
                                      "`rankscope trigger RUN --dump`)")
    latest: dict[int, Any] = {}
    for f in sorted(files, key=lambda x: str(x).rsplit("/", 1)[-1]):  # comms.<n>-...: the last one wins
        try:
            d = frdump.read(f)
        except (TraceError, OSError):
            continue
        latest[d.rank] = d
    if not latest:
        return Result("hang", skipped="the collective recorder dumps in the run could not be read")
    v = diagnose(list(latest.values()), run.world_size)
    kind = v.problems[0]["kind"] if v.problems else ""
    sev = Severity.INFO if not v.problems else Severity.WARNING if kind == "behind" else Severity.CRITICAL
    p0 = v.problems[0] if v.problems else {}
    findings = [Finding({"not_joined": "hang", "mismatch": "desync", "behind": "collective_behind",
                         "unmatched_send": "p2p_unmatched", "unmatched_recv": "p2p_unmatched",
                         "p2p_mismatch": "p2p_mismatch"}.get(kind, "collectives_in_step"), v.headline, sev,
                        tuple(p0.get("missing") or p0.get("behind") or
                              ([p0["src"], p0["dst"]] if "src" in p0 else
                               [r for rs in p0.get("odd", {}).values() for r in rs])),
                        {k: val for k, val in (v.problems[0] if v.problems else {}).items() if k != "group"})]
    rows = [{"group": g["group"], "desc": g["desc"], "rank": int(r), "last_seq": int(s),
             "last_completed": (g.get("last_completed") or {}).get(r)}
            for g in v.groups for r, s in g["last_seq"].items()]
    return Result("hang", tables={"last_collective": pl.DataFrame(rows) if rows else pl.DataFrame()},
                  findings=findings, summary={"headline": v.headline, "dumps": len(latest),
                                              "also": "; ".join(describe(p) for p in v.problems[1:]) or "none",
                                              "no_dump": v.no_dump})
