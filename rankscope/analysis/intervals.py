"""Interval arithmetic on sorted numpy arrays (no per-event Python).

``coverage`` splits time into elementary segments at every boundary of the given interval
sets and windows, and says which sets cover each segment; every measure (union, overlap,
exposed part) is then a masked sum of segment lengths per window.
"""
from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]


def merge(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Union of intervals as sorted, disjoint [start, end) pairs."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    groups = np.cumsum(new) - 1
    out_e = np.zeros(groups[-1] + 1, dtype=np.int64)
    np.maximum.at(out_e, groups, e)
    return s[new], out_e


def covered(iv: Intervals, points: np.ndarray) -> np.ndarray:
    """For each point: is it inside one of the (merged) intervals?"""
    s, e = iv
    if len(s) == 0:
        return np.zeros(len(points), dtype=bool)
    i = np.searchsorted(s, points, side="right") - 1
    return (i >= 0) & (points < e[np.clip(i, 0, None)])


def coverage(sets: dict[str, Intervals], win_start: np.ndarray, win_end: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Elementary segments inside the windows: (window index, length, {set: covered mask})."""
    merged = {k: merge(*v) for k, v in sets.items()}
    pts = [win_start, win_end] + [a for iv in merged.values() for a in iv]
    b = np.unique(np.concatenate(pts))
    if len(b) < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64), {k: np.empty(0, bool) for k in sets}
    seg_s, seg_e = b[:-1], b[1:]
    w = np.searchsorted(win_start, seg_s, side="right") - 1
    inside = (w >= 0) & (seg_e <= win_end[np.clip(w, 0, None)])
    seg_s, seg_e, w = seg_s[inside], seg_e[inside], w[inside]
    return w, seg_e - seg_s, {k: covered(iv, seg_s) for k, iv in merged.items()}


def per_window(w: np.ndarray, length: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    """Sum of segment lengths under ``mask`` per window."""
    return np.bincount(w[mask], weights=length[mask], minlength=n).astype(np.int64)
