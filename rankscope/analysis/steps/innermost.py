"""Each instant of a host thread takes the class of the innermost span covering it.

Pattern: a framework wraps its collectives in spans of its own (``FSDP::pre_forward`` around
``FSDP::all_gather``, a pipeline's ``Forward i`` around a receive, an autograd Function around
``all_to_all_single``): the wait is the own time of the innermost span, so an instant's class comes
from that span (compute, communication, data), never from an outer one. The own time of a compute
span that issued a collective (a communication span inside it), while this rank's communication
runs on another thread (gloo's workers), is the untraced ``Work.wait()``: communication too.

Algorithm, per step thread: elementary segments between the spans' boundaries; depth by depth
(spans of one depth do not overlap on one thread) a sorted search gives each segment its covering
span at that depth, so the deepest one is kept. Vectorized: a few searches per depth level.
"""
from __future__ import annotations

import numpy as np

from rankscope.analysis.intervals import Intervals, covered, merge

COMPUTE, COMM, DATA = 0, 1, 2


def _owners(ts: np.ndarray, end: np.ndarray, depth: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Per segment start ``s``: the index of the deepest span covering it (-1: none)."""
    owner = np.full(len(s), -1, np.int64)
    for d in np.unique(depth):
        idx = np.flatnonzero(depth == d)
        idx = idx[np.argsort(ts[idx], kind="stable")]
        j = np.searchsorted(ts[idx], s, side="right") - 1
        ok = (j >= 0) & (s < end[idx[np.clip(j, 0, None)]])
        owner[ok] = idx[j[ok]]
    return owner


def _issued(ts: np.ndarray, end: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Per span: whether a communication span starts inside it (it issued or waits for a collective)."""
    cs = np.sort(ts[cls == COMM])
    return (np.searchsorted(cs, end, side="left") - np.searchsorted(cs, ts, side="left")) > 0


def one_thread(ts: np.ndarray, end: np.ndarray, depth: np.ndarray, cls: np.ndarray,
               elsewhere: Intervals) -> dict[int, Intervals]:
    """The segments of one thread by the class of their innermost span; ``elsewhere``: this rank's
    communication on other threads (merged; its boundaries split the segments)."""
    b = np.unique(np.concatenate([ts, end, *elsewhere]))  # a wait starts or ends where the other thread's span does
    if len(b) < 2:
        return {k: (np.empty(0, np.int64), np.empty(0, np.int64)) for k in (COMPUTE, COMM, DATA)}
    s, e = b[:-1], b[1:]
    owner = _owners(ts, end, depth, s)
    has = owner >= 0
    seg = np.full(len(s), -1, np.int64)
    seg[has] = cls[owner[has]]
    waits = has & (seg == COMPUTE)
    waits[waits] = _issued(ts, end, cls)[owner[waits]]
    waits[waits] = covered(elsewhere, s[waits])
    seg[waits] = COMM
    return {k: (s[seg == k], e[seg == k]) for k in (COMPUTE, COMM, DATA)}


def innermost(ts: np.ndarray, end: np.ndarray, depth: np.ndarray, tid: np.ndarray, cls: np.ndarray,
              elsewhere: Intervals) -> dict[int, Intervals]:
    """Per class (COMPUTE, COMM, DATA): the time whose innermost span has it, over the threads in ``tid``
    (the spans given are the step threads' host spans, step markers left out)."""
    out: dict[int, list[Intervals]] = {COMPUTE: [], COMM: [], DATA: []}
    other = merge(*elsewhere)
    for t in np.unique(tid):
        m = tid == t
        for k, iv in one_thread(ts[m], end[m], depth[m], cls[m], other).items():
            out[k].append(iv)
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    return {k: (np.concatenate([a for a, _ in v]), np.concatenate([b for _, b in v])) if v else empty
            for k, v in out.items()}
