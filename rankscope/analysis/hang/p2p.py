"""Point-to-point ops paired per (sender, receiver) in order: the k-th send from a to b is the k-th receive on b
from a."""
from __future__ import annotations

from collections import defaultdict
from typing import Any

from rankscope.model.frdump import FrEntry


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
