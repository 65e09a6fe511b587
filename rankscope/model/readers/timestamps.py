"""Trace timestamps written as decimal strings of µs, read to int64 ns exactly.

torch_npu writes every "ts" of trace_view.json as a string of µs since the epoch with three decimals
(``convert_ns2us_str``, ``profiler/analysis/prof_common_func/_constant.py``: "1704161511422856.936"), ns exact,
and reads them back with ``convert_us2ns`` (the digits joined: a fourth decimal and beyond are cut). A float64 holds
such a value only to 0.25 µs (2**50 µs is 36 years), so a float parse moves events by up to 125 ns and breaks the
nesting of spans that start or end that close to each other: in ../shared/data/ascend_msprof/trace_view.json.gz a
float parse moved 1,652 of its 1,665 spans, and 11 came to overlap another in part; read exactly, none does.

Pattern: only the decimals need reading. The float's own ns (``fallback``, from ``to_ns``) is within 0.25 µs of the
true value below 2**52 µs (the year 2112), so with the three decimals read from the string the integer µs is the
float's, rounded: exact. The strings become a byte matrix (one row per value, numpy); torch_npu's are all as wide as
the longest, with a point and three digits last, read from the last four columns; the others in a few passes over
their rows. A value with no point, or with anything but digits after it ("1.5e3", "12"), keeps ``fallback``, as does a
value beyond 2**52 µs.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

_DOT, _ZERO = ord("."), ord("0")
_WIDTH = 32  # longer strings are not plain timestamps: they keep their float
_MAX_NS = 2**52 * 1000  # below it a float64 of the µs is within 0.25 µs of the value


def to_ns(ts: np.ndarray, base_ns: int) -> np.ndarray:
    """µs floats -> int64 ns, the fraction rounded on its own (no loss beyond the float's own on epoch-sized values)."""
    whole = np.floor(ts)
    return whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64) + base_ns


def decimal_ns(values: Sequence[Any], fallback: np.ndarray) -> np.ndarray:
    """ns of each µs value: exact for decimal strings (as torch_npu's ``convert_us2ns`` reads them), else
    ``fallback``: ``to_ns`` of each value's float, which also fixes the integer µs of the strings (rows whose float
    is not finite come out as garbage: the callers drop them)."""
    if not len(values) or type(values[0]) is not str:  # numbers (Kineto's JSON): nothing to read here
        return fallback
    n = len(values)
    strs = [v if type(v) is str and len(v) <= _WIDTH and v.isascii() else "" for v in values]
    b = np.array(strs, dtype="S")  # as wide as the longest
    width = b.dtype.itemsize
    if width < 2:
        return fallback
    m = b.view(np.uint8).reshape(n, width)
    frac, ok = np.zeros(n, np.int64), np.zeros(n, bool)
    if width >= 4:  # torch_npu's own: as wide as the longest (16 digits of epoch µs), a point, three decimals
        d = m[:, -3:].astype(np.int64) - _ZERO
        ok = (m[:, -4] == _DOT) & ((d >= 0) & (d <= 9)).all(axis=1)
        frac = d @ np.array([100, 10, 1], np.int64)
    rest = np.flatnonzero(~ok)
    if len(rest):
        frac[rest], ok[rest] = _decimals(m[rest])
    ok &= np.abs(fallback) < _MAX_NS
    neg = fallback < 0
    whole = (np.where(neg, fallback + frac, fallback - frac) + 500) // 1000 * 1000
    return np.where(ok, np.where(neg, whole - frac, whole + frac), fallback).astype(np.int64)


def _decimals(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the first three decimals as an int, whether the row is digits, one point and digits) of each row of a padded
    byte matrix."""
    n, width = m.shape
    dot = m == _DOT
    dpos = dot.argmax(axis=1)
    length = np.count_nonzero(m, axis=1)
    digit = (m >= _ZERO) & (m <= _ZERO + 9)
    after = np.arange(width)[None, :] > dpos[:, None]
    ok = dot.any(axis=1) & (np.count_nonzero(digit & after, axis=1) == length - dpos - 1)
    rows = np.arange(n)
    frac = np.zeros(n, np.int64)
    for k in (1, 2, 3):  # three decimals: missing ones are 0, more are cut
        c = m[rows, np.minimum(dpos + k, width - 1)].astype(np.int64)
        frac = frac * 10 + np.where(dpos + k < length, c - _ZERO, 0)
    return frac, ok
