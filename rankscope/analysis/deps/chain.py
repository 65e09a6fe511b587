"""A critical path as segments a person (and the verdict, diff and advice) can read.

Pattern: every edge of the path with a weight becomes a segment {rank, kind, name, start, end,
group, seq}: kind "compute" (host operators, host time between operators), "launch" (runtime
calls, launch delays), "kernel" (device operations and the gaps between them), "sync" (the time a
thread or stream took to resume after what it waited for), "collective" / "p2p" (a transfer after
the last member arrived), "wait" (a member waiting for the last arrival, zero on the path by
construction). Consecutive segments of one rank, kind and name merge. A run of segments of one
rank between two meeting points is named by the operator that took most of it and the innermost
annotation around that operator (``DataLoader``, ``FSDP::pre_forward``, a ``record_function``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rankscope.analysis.deps.events import K, RankEvents
from rankscope.analysis.deps.gpu import E
from rankscope.analysis.deps.graph import RankGraph

_DEVICE = (K.KERNEL, K.MEMCPY, K.MEMSET)


def context(ev: RankEvents, parent: np.ndarray, i: int) -> str:
    """Innermost user annotation (or Python function) around event ``i`` ("" if none)."""
    for _ in range(64):
        i = int(parent[i]) if i >= 0 else -1
        if i < 0:
            return ""
        if ev.kind[i] in (K.ANNOTATION, K.PYTHON) and not ev.is_comm[i] and not ev.name_of(i).startswith("ProfilerStep"):
            return ev.name_of(i)
    return ""


def label(ev: RankEvents, i: int) -> str:
    """An event's name with its input shapes, as the verdict quotes it: ``aten::mm [4096, 4096]``."""
    dims = str(ev.dims[ev.dims_idx[i]]) if i >= 0 else ""
    name = ev.name_of(i) if i >= 0 else ""
    if dims and dims not in ("[]", "") and ev.kind[i] == K.CPU_OP:
        first = dims.split("], [")[0].strip("[]")
        return f"{name} [{first}]" if first else name
    return name


def edge_segments(rank: int, g: RankGraph, ev: RankEvents, parent: np.ndarray, edges: list[int]) -> list[dict[str, Any]]:
    """Segments of the weighted edges of a local path, merged when consecutive and alike."""
    out: list[dict[str, Any]] = []
    for e in edges:
        if g.w[e] <= 0:
            continue
        kind, who = _kind(g, ev, e)
        seg = {"rank": rank, "kind": kind, "name": label(ev, who) if who >= 0 else "host (between operators)",
               "start": int(g.node_ts[g.src[e]]), "end": int(g.node_ts[g.dst[e]]), "group": None, "seq": None,
               "dur": int(g.w[e]), "context": context(ev, parent, who) if who >= 0 else ""}
        if kind == "compute" and who < 0:
            nxt = int(g.node_ev[g.dst[e]])
            seg["context"] = context(ev, parent, nxt)
        prev = out[-1] if out else None
        if prev and (prev["kind"], prev["name"], prev["rank"]) == (seg["kind"], seg["name"], seg["rank"]):
            prev["end"], prev["dur"] = seg["end"], prev["dur"] + seg["dur"]
        else:
            out.append(seg)
    return out


def _kind(g: RankGraph, ev: RankEvents, e: int) -> tuple[str, int]:
    """(segment kind, event it is named after; -1 for host time between operators)."""
    t = int(g.typ[e])
    a = int(g.attr[e])
    if t == E.DEPENDENCY:
        return "compute", -1
    if t == E.LAUNCH:
        return "launch", int(g.node_ev[g.src[e]])
    if t == E.SYNC:
        return "sync", int(g.node_ev[g.dst[e]])
    if t == E.KERNEL_KERNEL:
        return "kernel", int(g.node_ev[g.dst[e]])
    who = a if a >= 0 else int(g.node_ev[g.dst[e]])
    k = int(ev.kind[who])
    if k in _DEVICE:
        return "kernel", who
    if k == K.RUNTIME:
        return "launch", who
    return "compute", who


def run_name(segs: list[dict[str, Any]]) -> dict[str, Any]:
    """One line for a run of one rank's segments: the segment that took most of it, and its context."""
    if not segs:
        return {"name": "", "context": "", "kind": ""}
    top = max(segs, key=lambda s: s["dur"])
    by_kind: dict[str, int] = {}
    for s in segs:
        by_kind[s["kind"]] = by_kind.get(s["kind"], 0) + s["dur"]
    return {"name": top["name"], "context": top["context"], "kind": max(by_kind, key=by_kind.__getitem__)}
