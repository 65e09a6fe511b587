"""What the step would take if one rank ran at the other ranks' median: the path recomputed.

Pattern: a rank's own segments are its longest local paths between anchors (start -> arrival at a
call, end of a call -> arrival at the next, ... -> step end). For rank r, every one of them is
replaced by the median of the same segment (same source and target call positions) over the other
ranks running the same sequence of calls (same ops and kinds), and the joined step's longest path
is computed again. Nothing else changes: transfers, the other ranks, the dependencies. The
difference to the measured path is what rank r costs the step; the rank with the largest
difference bounds the step.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rankscope.analysis.deps.join import LOCAL, Joined, longest
from rankscope.analysis.deps.local import NEG


@dataclass
class WhatIf:
    rank: int
    path_ns: int  # measured path length
    path_if_median_ns: int | None  # None: no other rank runs the same calls to compare with

    @property
    def saving_ns(self) -> int:
        return 0 if self.path_if_median_ns is None else self.path_ns - self.path_if_median_ns


def medians_of_others(j: Joined) -> dict[int, np.ndarray]:
    """Per rank index: the element-wise median of the other comparable ranks' anchor matrices
    (NaN where none of them has that segment)."""
    groups: dict[tuple, list[int]] = {}
    for ri, r in enumerate(j.ranks):
        groups.setdefault(r.sig, []).append(ri)
    out: dict[int, np.ndarray] = {}
    for members in groups.values():
        if len(members) >= 2:
            stack = np.stack([j.ranks[ri].d for ri in members]).astype(np.float64)
            stack[stack <= NEG] = np.nan
            for i, med in enumerate(_leave_one_out_medians(stack)):
                out[members[i]] = med
    return out


def _leave_one_out_medians(x: np.ndarray) -> np.ndarray:
    """For each i along axis 0: the nan-median of x without row i, in one sort (NaN: no value)."""
    m = x.shape[0]
    o = np.argsort(x, axis=0, kind="stable")  # NaN last
    srt = np.take_along_axis(x, o, axis=0)
    rank_of = np.empty_like(o)
    np.put_along_axis(rank_of, o, np.arange(m).reshape((m,) + (1,) * (x.ndim - 1)) * np.ones_like(o), axis=0)
    valid = (~np.isnan(x)).sum(axis=0)
    out = np.full(x.shape, np.nan)
    for i in range(m):  # per row: at most a few dozen ranks, each a handful of vector ops
        mine = ~np.isnan(x[i])
        k = valid - mine  # how many values the others have
        pos = rank_of[i]

        def nth(q: np.ndarray) -> np.ndarray:  # the q-th smallest of the others' values
            idx = np.where(mine & (q >= pos), q + 1, q)
            return np.take_along_axis(srt, np.clip(idx, 0, m - 1)[None], axis=0)[0]

        lo, hi = nth(np.maximum((k - 1) // 2, 0)), nth(np.maximum(k // 2, 0))
        out[i] = np.where(k > 0, (lo + hi) / 2, np.nan)
    return out


def what_if(j: Joined, length: int, chunk: int = 32) -> list[WhatIf]:
    """For every rank of the step: the path length if it ran at the others' median (the ranks'
    weight sets solved together, ``chunk`` at a time)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: segments no other rank has
        meds = medians_of_others(j)
    local = np.flatnonzero(j.kind == LOCAL)
    owner = j.ref[local, 0]
    todo = [ri for ri in range(len(j.ranks)) if ri in meds]
    got: dict[int, int] = {}
    for c0 in range(0, len(todo), chunk):
        part = todo[c0:c0 + chunk]
        w = np.repeat(j.w[:, None], len(part), axis=1)
        for col, ri in enumerate(part):
            mine = local[owner == ri]
            m = meds[ri][j.ref[mine, 1], j.ref[mine, 2]]
            ok = ~np.isnan(m)
            w[mine[ok], col] = np.rint(m[ok]).astype(np.int64)
        dist, _ = longest(j, w)
        for col, ri in enumerate(part):
            got[ri] = int(dist[:, col].max()) if len(dist) else 0
    return [WhatIf(r.rank, length, got.get(ri)) for ri, r in enumerate(j.ranks)]
