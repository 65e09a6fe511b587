"""The verdict in plain words: one line per problem, the headline (the root cause), where ranks are."""
from __future__ import annotations

from rankscope.analysis.hang import shapes
from rankscope.analysis.hang.checks import _ORDER
from rankscope.analysis.hang.findings import Problem, Verdict, Where
from rankscope.intlist import format_int_list


def _ranks(rs: list[int]) -> str:
    return f"rank{'s' if len(rs) > 1 else ''} {format_int_list(rs)}"


def _wait(rs: list[int]) -> str:
    return f"{_ranks(rs)} wait{'s' if len(rs) == 1 else ''}"


def _group(p: Problem) -> str:
    name = p.group
    return f"process group {name}" + (f" ({p.desc})" if p.desc and p.desc != "undefined" else "")


def _step(p: Problem) -> str:
    return f", step {p.step}" if p.step is not None else ""


def _waited(p: Problem) -> str:
    """'waiting 12.3 s of a 30 s timeout' over the waiting ranks (the longest)."""
    got = [v for v in p.pending.values() if v]
    if not got:
        return ""
    pend = max((v.get("pending_s", -1.0) for v in got), default=-1.0)
    tmo = max((v.get("timeout_s", 0.0) for v in got), default=0.0)
    if pend >= 0 and tmo:
        return f" ({pend:.1f} s, {'past' if pend > tmo else 'of'} its {tmo:g} s timeout)"
    if pend >= 0:
        return f" ({pend:.1f} s when dumped)"
    return f" (timeout {tmo:g} s)"


def thread_frame(stacks: dict[str, list[str]]) -> str:
    """The innermost user frame of the main thread (else the first thread) of rankscope's thread stacks.
    A stack's order is read from where its outermost frame (``<module>``, ``_bootstrap``, runpy's) is."""
    if not stacks:
        return ""
    name = "MainThread" if "MainThread" in stacks else next(iter(stacks))
    frames = list(stacks[name])
    if len(frames) > 1 and any(x in frames[0] for x in _OUTERMOST) and not any(x in frames[-1] for x in _OUTERMOST):
        frames.reverse()
    return shapes.frame(tuple(frames))


_OUTERMOST = ("<module>", "_bootstrap", "_run_module_as_main", "_run_code")


def whereabouts(w: Where | None) -> str:
    """Where a culprit is, in a few words."""
    if w is None:
        return ""
    if w.state == "no_dump":
        return "sent no dump"
    if w.state == "exited":
        return "exited (its dump was written at exit)"
    if w.state == "waiting":
        return f"waits in process group {w.group} #{w.seq} ({w.op})"
    step = f", step {w.step}" if w.step is not None else ""
    if w.frame:
        return f"is outside any collective at {w.frame}{step}"
    last = f"; its last recorded call: group {w.group} #{w.seq} ({w.op})" if w.seq is not None else ""
    return f"is in none of these collectives{step}{last}"


def headline(v: Verdict) -> str:
    named = set(v.problems[0].culprits) if v.problems else set()
    rest = [r for r in v.no_dump if r not in named]
    tail = f"; no dump from {_ranks(rest)}" if rest else ""
    if not v.problems:
        return f"no hang or desync among ranks {format_int_list(v.ranks)}: every group's collectives agree{tail}"
    return describe(v.problems[0], v.where) + tail


def describe(p: Problem, where: dict[int, Where] | None = None) -> str:
    """One problem in plain words; ``where``: say where its culprits are."""
    text = _KINDS[p.kind](p)
    if where and p.kind in ("unmatched_send", "unmatched_recv"):
        said = [f"rank {r} {w}" for r in p.culprits if (w := whereabouts(where.get(r))) and r not in p.waiting]
        text += (" — " + "; ".join(said)) if said else ""
    if where and p.kind == "not_joined":
        text = _not_joined(p, where)
    return text


def _culprits(rs: list[int], where: dict[int, Where] | None) -> str:
    said = [f"rank {r} {w}" for r in rs if where and (w := whereabouts(where.get(r)))]
    return f" ({'; '.join(said)})" if said else ""


def _not_joined(p: Problem, where: dict[int, Where] | None = None) -> str:
    d = p.detail
    head = f"hang in {_group(p)} at collective #{p.seq} ({d['call'] or p.op}{_step(p)})"
    parts = []
    if d["missing"]:
        last = ", ".join(f"rank {r} #{s}" if s is not None else f"rank {r} none" for r, s in d["their_last"].items())
        parts.append(f"{_ranks(d['missing'])} never joined it"
                     + (_culprits(d["missing"], where) or f" (last recorded in this group: {last})"))
    if d["no_dump"]:
        parts.append(f"{_ranks(d['no_dump'])} left no record of it" + (_culprits(d["no_dump"], where) or
                                                                       " (no dump, or nothing of this group in its ring)"))
    parts.append(f"{_wait(d['joined'])} in it{_waited(p)}")
    if p.stack:
        parts[-1] += f", issued at {p.stack}"
    done = d.get("last_completed")
    if done:
        parts.append("last completed: " + ", ".join(f"rank {r} #{s}" if s is not None else f"rank {r} none"
                                                    for r, s in sorted(done.items())))
    return head + ": " + "; ".join(parts)


def _mismatch(p: Problem) -> str:
    d = p.detail
    what = d.get("what", "op")
    if d.get("check") == "totals":
        return (f"size mismatch in {_group(p)} at collective #{p.seq} ({p.op}{_step(p)}): the members send "
                f"{d['input_numel']} elements in all but receive {d['output_numel']} (uneven all_to_all sizes are "
                f"normal; these totals must agree)")
    odd = "; ".join(f"{_ranks(rs)} issued {k}" for k, rs in d["odd_calls"].items())
    if d.get("check") == "syntax":
        return (f"{what} mismatch in {_group(p)} at collective #{p.seq}{_step(p)}: {odd}, which breaks "
                f"{d['rule']}")
    head = "desync" if what == "op" else f"{what} mismatch"
    why = ("a rank skipped or added a collective" if what == "op" else
           "the same collective with another shape" if what == "size" else "the same collective with another dtype")
    return (f"{head} in {_group(p)} at collective #{p.seq}{_step(p)}: {_ranks(d['expected_ranks'])} issued "
            f"{d['expected_call']}, but {odd} ({why})")


def _behind(p: Problem) -> str:
    d = p.detail
    low = d["states"][d["behind"][0]]
    ahead = sorted({d["states"][r] for r in d["ahead"]}, key=_ORDER.__getitem__)
    what = "never started" if low == "scheduled" else "had not completed"
    return (f"every rank joined each collective, but in {_group(p)} {_ranks(d['behind'])} {what} collective "
            f"#{p.seq} ({d['call']}; state {low}) when {_ranks(d['ahead'])} had it {' / '.join(ahead)}: if the job is "
            f"stuck, {'they are' if len(d['behind']) > 1 else 'it is'} behind"
            + (" (on a GPU: still in earlier work)" if low == "scheduled" else "")
            + "; in a dump taken while the job ran, a collective in flight")


def _p2p(p: Problem) -> str:
    d = p.detail
    src, dst, n = d["src"], d["dst"], d["n"]
    if p.kind == "unmatched_send":
        return (f"unmatched send in {_group(p)}: rank {src}'s send #{n} to rank {dst} ({d['call']}) has no matching "
                f"receive (rank {dst} posted {d['received']} receive{'s' if d['received'] != 1 else ''} from rank {src})")
    if p.kind == "unmatched_recv":
        return (f"unmatched receive in {_group(p)}: rank {dst} waits for receive #{n} from rank {src} ({d['call']}), "
                f"which rank {src} never sent (it sent {d['sent']})")
    return (f"point-to-point size mismatch in {_group(p)}: rank {src}'s send #{n} to rank {dst} is {d['sent_call']}, "
            f"rank {dst}'s matching receive {d['received_call']}")


def _deadlock(p: Problem) -> str:
    legs = [f"{_wait(c['waiting'])} in process group {c['group']} #{c['seq']} ({c['op']}) for "
            f"{_ranks(c['culprits'])}" for c in p.detail["cycle"]]
    return f"deadlock: {_ranks(p.culprits)} wait for each other{_step(p)}: " + "; ".join(legs)


def _pg(p: Problem) -> str:
    d = p.detail
    odd = "; ".join(f"{v!r} on {_ranks(rs)}" for v, rs in d["odd"].items())
    if d["what"] == "version":
        return f"the dumps' format versions differ: {d['expected']!r} on {_ranks(d['expected_ranks'])}; {odd}"
    if d["what"] == "unlisted":
        return f"{_ranks(p.culprits)} recorded collectives in process group {p.group}, which its pg_config does not list"
    what = "description" if d["what"] == "desc" else "members"
    return (f"process group {p.group}'s {what} differ between ranks: {d['expected']!r} on "
            f"{_ranks(d['expected_ranks'])}; {odd}")


_KINDS = {"not_joined": _not_joined, "mismatch": _mismatch, "behind": _behind, "unmatched_send": _p2p,
          "unmatched_recv": _p2p, "p2p_mismatch": _p2p, "deadlock": _deadlock, "pg_inconsistent": _pg}
