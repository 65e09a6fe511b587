"""The verdict in plain words: one line per problem, the headline."""
from __future__ import annotations

from typing import Any

from rankscope.analysis.hang.checks import _ORDER
from rankscope.analysis.hang.findings import Verdict
from rankscope.intlist import format_int_list


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
