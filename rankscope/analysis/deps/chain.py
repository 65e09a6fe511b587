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


_ANNOT = (int(K.ANNOTATION), int(K.PYTHON))


def context(ev: RankEvents, parent: np.ndarray, i: int) -> str:
    """Innermost user annotation (or Python function) around event ``i`` ("" if none)."""
    for _ in range(64):
        i = int(parent[i]) if i >= 0 else -1
        if i < 0:
            return ""
        if int(ev.kind[i]) in _ANNOT and not ev.is_comm[i] and not ev.name_of(i).startswith("ProfilerStep"):
            return ev.name_of(i)
    return ""


def label(ev: RankEvents, i: int) -> str:
    """An event's name with its input shapes, as the verdict quotes it: ``aten::mm [4096, 4096]``."""
    dims = str(ev.dims[ev.dims_idx[i]]) if i >= 0 else ""
    name = ev.name_of(i) if i >= 0 else ""
    if dims and dims not in ("[]", "") and int(ev.kind[i]) == int(K.CPU_OP):
        first = dims.split("], [")[0].strip("[]")
        return f"{name} [{first}]" if first else name
    return name


def contexts(ev: RankEvents, parent: np.ndarray) -> np.ndarray:
    """Per event: its innermost enclosing annotation (itself, for such an annotation) that is not a
    step or a communication span (-1: none), by pointer jumping over the call-stack parents."""
    ok = np.isin(ev.kind, _ANNOT) & ~ev.is_comm
    ok &= ~ev.name_has(("profilerstep#",))
    cur = parent.copy()
    out = np.full(ev.n, -1, np.int64)
    out[ok] = np.flatnonzero(ok)  # an annotation is its own context (time inside it, between its operators)
    todo = np.flatnonzero((cur >= 0) & ~ok)
    for _ in range(256):
        if not len(todo):
            break
        c = cur[todo]
        hit = ok[c]
        out[todo[hit]] = c[hit]
        todo = todo[~hit]
        cur[todo] = parent[cur[todo]]
        todo = todo[cur[todo] >= 0]
    return out


def edge_segments(rank: int, g: RankGraph, ev: RankEvents, ctx: np.ndarray, edges: list[int]) -> list[dict[str, Any]]:
    """Segments of a local path: runs of edges under one annotation (device work under the
    annotation of its launch), named after the event that took most of the run (up to three in
    ``top``); ``kind`` is the kind that took most of it, ``kinds`` the time per kind."""
    e = np.asarray(edges, np.int64)
    e = e[g.w[e] > 0]
    if not len(e):
        return []
    kind, who = _kinds(g, ev, e)
    c = ctx[np.where(who >= 0, who, g.node_ev[g.dst[e]])]
    new = np.r_[True, c[1:] != c[:-1]]
    run = np.cumsum(new) - 1
    first = np.flatnonzero(new)
    last = np.r_[first[1:], len(e)] - 1
    w = g.w[e]
    safe = np.maximum(who, 0)
    label_key = np.where(who >= 0, ev.name_idx[safe].astype(np.int64) * (len(ev.dims) + 1)
                         + np.where(ev.kind[safe] == int(K.CPU_OP), ev.dims_idx[safe], 0), -1)
    by_name = _sums(run, label_key, w)
    by_kind = _sums(run, kind.astype(np.int64), w)
    rep: dict[int, int] = {}  # label key -> an event carrying it
    for k_, who_ in zip(label_key.tolist(), who.tolist()):
        rep.setdefault(k_, who_)
    out = []
    for r, (f, l_) in enumerate(zip(first.tolist(), last.tolist())):  # one per run
        names = [(label(ev, rep[k_]) if k_ >= 0 else "host (between operators)", d) for k_, d in by_name.get(r, [])[:3]]
        kinds = {KINDS[k_]: d for k_, d in by_kind.get(r, [])}
        cx = int(c[f])
        out.append({"rank": rank, "kind": max(kinds, key=kinds.__getitem__), "name": names[0][0] if names else "",
                    "start": int(g.node_ts[g.src[e[f]]]), "end": int(g.node_ts[g.dst[e[l_]]]), "group": None,
                    "seq": None, "dur": int(w[f:l_ + 1].sum()), "context": ev.name_of(cx) if cx >= 0 else "",
                    "top": names, "kinds": kinds})
    return out


def _sums(run: np.ndarray, key: np.ndarray, w: np.ndarray, top: int = 3) -> dict[int, list[tuple[int, int]]]:
    """Per run: its ``top`` keys by total weight, [(key, total)] largest first."""
    o = np.lexsort((key, run))
    rk, kk, ww = run[o], key[o], w[o]
    grp = np.flatnonzero(np.r_[True, (rk[1:] != rk[:-1]) | (kk[1:] != kk[:-1])])
    tot, gr, gk = np.add.reduceat(ww, grp), rk[grp], kk[grp]
    o2 = np.lexsort((-tot, gr))
    gr, gk, tot = gr[o2], gk[o2], tot[o2]
    starts = np.flatnonzero(np.r_[True, gr[1:] != gr[:-1]])
    nth = np.arange(len(gr)) - np.repeat(starts, np.diff(np.r_[starts, len(gr)]))
    keep = nth < top
    out: dict[int, list[tuple[int, int]]] = {}
    for r, k_, t in zip(gr[keep].tolist(), gk[keep].tolist(), tot[keep].tolist()):
        out.setdefault(r, []).append((k_, t))
    return out


KINDS = ("compute", "launch", "kernel", "sync")


def _kinds(g: RankGraph, ev: RankEvents, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(segment kind index into KINDS, event it is named after; -1 for host time between operators)."""
    t = g.typ[e]
    src_ev, dst_ev = g.node_ev[g.src[e]], g.node_ev[g.dst[e]]
    own = np.where(g.attr[e] >= 0, g.attr[e], dst_ev)
    k = ev.kind[own]
    kind = np.where(np.isin(k, [int(x) for x in _DEVICE]), 2, np.where(k == int(K.RUNTIME), 1, 0))
    who = own.copy()
    step = ev.name_has(("profilerstep#",))[who]  # time inside the step's own span, between operators
    kind[step], who[step] = 0, -1
    for typ, kd, w in ((E.DEPENDENCY, 0, -1), (E.LAUNCH, 1, None), (E.SYNC, 3, None), (E.KERNEL_KERNEL, 2, None)):
        m = t == typ
        kind[m] = kd
        who[m] = -1 if w == -1 else (src_ev[m] if typ == E.LAUNCH else dst_ev[m])
    return kind, who


def run_name(segs: list[dict[str, Any]]) -> dict[str, Any]:
    """One line for a run of one rank's segments: the segment that took most of it, and its context."""
    if not segs:
        return {"name": "", "context": "", "kind": ""}
    top = max(segs, key=lambda s: s["dur"])
    by_kind: dict[str, int] = {}
    for s in segs:
        by_kind[s["kind"]] = by_kind.get(s["kind"], 0) + s["dur"]
    return {"name": top["name"], "context": top["context"], "kind": max(by_kind, key=by_kind.__getitem__)}
