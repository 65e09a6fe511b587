"""Robust outlier rules for "which of these ranks / groups is slow": small and large groups.

- ``dixon_high(values)``: Dixon's Q test (r10) for the largest value, 3 <= n <= 10, alpha 0.05.
- ``mad_high(values)``: the median / MAD rule (modified z-score > 3.5) for any n >= 3.
- ``high_outliers(values, min_rel)``: the one to use: Dixon for small groups, MAD for large,
  a plain ratio rule for two values, and always a minimum relative excess over the median of the
  others so that a tiny but steady difference is not called an outlier. "None" is a normal answer.
- ``as_float(value)`` / ``as_int(value)``: a polars scalar aggregate (``Series.max()``, ``.median()``)
  as a Python number, narrowed from the any-literal type polars gives it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import SupportsFloat, SupportsInt

import numpy as np

# Dixon r10 critical values at alpha = 0.05 (two-sided table as used by Rorabacher 1991), n = 3..10.
DIXON_Q95 = {3: 0.970, 4: 0.829, 5: 0.710, 6: 0.625, 7: 0.568, 8: 0.526, 9: 0.493, 10: 0.466}
MAD_Z = 3.5
MAD_SCALE = 1.4826


@dataclass(frozen=True)
class Outlier:
    """One high outlier: its index, relative excess over the others' median, and the test used."""

    index: int
    rel_excess: float
    test: str
    statistic: float
    critical: float


def as_float(value: object, null: float | None = None) -> float:
    """``float(value)`` for a numeric scalar from polars; ``null`` (when given) for None.

    Polars types ``Series.max()`` / ``.median()`` / named rows as any Python literal; for numeric
    columns they are int, float or None. Raises TypeError, as ``float()`` would, for anything else
    (None included when no ``null`` is given).
    """
    if value is None and null is not None:
        return null
    if not isinstance(value, SupportsFloat):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)


def as_int(value: object) -> int:
    """``int(value)`` for a numeric scalar from polars (exact for int64 nanoseconds, unlike via float).

    Raises TypeError, as ``int()`` would, for None and anything that is not a number.
    """
    if not isinstance(value, SupportsInt):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return int(value)


def dixon_high(values: np.ndarray) -> tuple[int, float, float] | None:
    """Dixon Q test of the largest value: (index, Q, Q_crit) when it is an outlier, else None."""
    v = np.asarray(values, dtype=float)
    n = len(v)
    if n not in DIXON_Q95:
        return None
    order = np.argsort(v, kind="stable")
    spread = v[order[-1]] - v[order[0]]
    if spread <= 0:
        return None
    q = float((v[order[-1]] - v[order[-2]]) / spread)
    return (int(order[-1]), q, DIXON_Q95[n]) if q > DIXON_Q95[n] else None


def mad_scores(values: np.ndarray) -> np.ndarray:
    """Modified z-scores (value - median) / (1.4826 MAD); zeros when MAD is 0 and all equal."""
    v = np.asarray(values, dtype=float)
    med = np.median(v)
    mad = np.median(np.abs(v - med)) * MAD_SCALE
    if mad <= 0:
        # Over half the values are identical: anything different is infinitely far.
        return np.where(v > med, np.inf, np.where(v < med, -np.inf, 0.0))
    return (v - med) / mad


def mad_high(values: np.ndarray, z: float = MAD_Z) -> list[tuple[int, float]]:
    """Indices whose modified z-score exceeds ``z``, with the score."""
    s = mad_scores(values)
    return [(int(i), float(s[i])) for i in np.flatnonzero(s > z)]


def _rel_excess(v: np.ndarray, i: int) -> float:
    others = np.delete(v, i)
    med = float(np.median(others)) if len(others) else 0.0
    return (float(v[i]) - med) / med if med > 0 else (np.inf if v[i] > 0 else 0.0)


def signed_rank_p(diffs: np.ndarray) -> float:
    """One-sided Wilcoxon signed-rank test: P(W+ >= observed) under "no difference", exact.

    ``diffs`` are paired differences (one per step); zeros are dropped, ties in magnitude are rare
    for timings and ranked in order. The null distribution of W+ is counted by dynamic programming
    (n (n+1) / 2 sums), so any number of steps is exact and cheap.
    """
    d = np.asarray(diffs, float)
    d = d[np.isfinite(d) & (d != 0)]
    n = len(d)
    if n == 0:
        return 1.0
    ranks = np.argsort(np.argsort(np.abs(d))) + 1
    w = int(ranks[d > 0].sum())
    top = n * (n + 1) // 2
    counts = np.zeros(top + 1)
    counts[0] = 1.0
    for k in range(1, n + 1):
        counts[k:] = counts[k:] + counts[:top + 1 - k]
    return float(counts[w:].sum() / counts.sum())


def high_outliers(values: np.ndarray, min_rel: float = 0.1) -> list[Outlier]:
    """High outliers of ``values`` (one per rank / group), robust at every group size.

    n == 2: the larger one when it exceeds the other by ``min_rel``. 3 <= n <= 10: Dixon's Q test
    (one outlier at most), n > 10: median / MAD rule. In every case the value must also exceed the
    median of the others by ``min_rel``.
    """
    v = np.asarray(values, dtype=float)
    n = len(v)
    found: list[Outlier] = []
    if n < 2:
        return found
    if n == 2:
        i = int(np.argmax(v))
        rel = _rel_excess(v, i)
        if rel > min_rel:
            found.append(Outlier(i, rel, "ratio", rel, min_rel))
    elif n in DIXON_Q95:
        hit = dixon_high(v)
        if hit is not None and _rel_excess(v, hit[0]) > min_rel:
            found.append(Outlier(hit[0], _rel_excess(v, hit[0]), "dixon", hit[1], hit[2]))
    else:
        for i, z in mad_high(v):
            if _rel_excess(v, i) > min_rel:
                found.append(Outlier(i, _rel_excess(v, i), "mad", z, MAD_Z))
    return found
