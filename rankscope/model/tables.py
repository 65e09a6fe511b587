"""Decoded Kineto events -> the per-rank Arrow tables of ``schema.py``.

Column work is vectorized (numpy / pyarrow); the only per-event Python is the attribute
gathering out of the decoded structs, done once per column with list comprehensions.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rankscope.model import schema
from rankscope.model.kineto import Event, RawTrace

_COMM_MARKERS = ("nccl", "rccl", "hccl", "gloo", "record_param_comms", "c10d::")


def to_ns(ts: np.ndarray, base_ns: int) -> np.ndarray:
    """µs floats -> int64 ns without losing precision on epoch-sized values."""
    whole = np.floor(ts)
    return whole.astype(np.int64) * 1000 + np.rint((ts - whole) * 1000).astype(np.int64) + base_ns


def _ids(values: Sequence[Any]) -> np.ndarray:
    """pid/tid may be ints or strings ("Spans", "PyTorch Profiler"); strings get stable negatives."""
    names: dict[str, int] = {}
    out = [v if type(v) is int else names.setdefault(str(v), -1 - len(names)) for v in values]
    return np.asarray(out, dtype=np.int64)


def _int_or(v: Any, fill: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return fill


def _opt(values: Sequence[Any], fill: int = -1) -> np.ndarray:
    """Optional ints -> int64 with ``fill`` for missing; odd values (strings, floats) coerced."""
    try:
        return np.asarray([fill if v is None else v for v in values], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return np.asarray([_int_or(v, fill) for v in values], dtype=np.int64)


def _floats(values: Sequence[Any]) -> np.ndarray:
    try:
        return np.asarray([math.nan if v is None else v for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        out = []
        for v in values:
            try:
                out.append(float(v))
            except (TypeError, ValueError):
                out.append(math.nan)
        return np.asarray(out, dtype=np.float64)


def _dict_array(values: Sequence[str | None]) -> pa.Array:
    return pa.array(values, type=pa.string()).dictionary_encode()


def _flag_names(names: pa.DictionaryArray, markers: tuple[str, ...]) -> np.ndarray:
    """Vectorized name test over the (small) dictionary, then gathered by index."""
    dic = [str(s).lower() for s in names.dictionary.to_pylist()]
    hit = np.array([any(m in s for m in markers) for s in dic] + [False], dtype=bool)
    return hit[names.indices.to_numpy(zero_copy_only=False)]


def nesting_depth(tid: np.ndarray, ts: np.ndarray, dur: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Depth of each masked (host) event among the masked events of its thread.

    With proper nesting, depth = (# events of the thread ordered before it by (ts, -dur))
    - (# of them already ended at its start). Vectorized per thread with searchsorted.
    """
    depth = np.zeros(len(ts), dtype=np.int16)
    for t in np.unique(tid[mask]):
        sel = np.flatnonzero(mask & (tid == t))
        order = sel[np.lexsort((-dur[sel], ts[sel]))]
        ends = np.sort(ts[order] + dur[order])
        before = np.arange(len(order))
        ended = np.searchsorted(ends, ts[order], side="right")
        depth[order] = np.clip(before - ended, 0, None).astype(np.int16)
    return depth


def build(raw: RawTrace) -> tuple[dict[str, pa.Table], list[str]]:
    """All per-rank tables of one decoded trace, plus problems found on the way."""
    problems: list[str] = []
    evs = raw.trace.traceEvents
    base = raw.trace.baseTimeNanoseconds or 0
    xs = [e for e in evs if e.ph == "X"]
    events, xs = _events(xs, base, problems)
    tables = {
        "events": events,
        "memory": _memory([e for e in evs if e.ph == "i" and e.name == "[memory]"], base),
    }
    tables["collectives"] = _collectives(events, xs, raw)
    tables["steps"] = _steps(events)
    return tables, problems


def _events(xs: list[Event], base: int, problems: list[str]) -> tuple[pa.Table, list[Event]]:
    ts_f = _floats([e.ts for e in xs])
    dur_f = _floats([e.dur for e in xs])
    bad_ts = ~np.isfinite(ts_f)
    if bad_ts.any():
        problems.append(f"{int(bad_ts.sum())} events without a valid 'ts' were dropped")
    bad_dur = ~np.isfinite(dur_f) | (dur_f < 0)
    if (bad_dur & ~bad_ts).any():
        problems.append(f"{int((bad_dur & ~bad_ts).sum())} events with missing, negative or NaN 'dur' "
                        "were kept with duration 0")
    keep = ~bad_ts
    if not keep.all():
        xs = [e for e, k in zip(xs, keep) if k]
        ts_f, dur_f, bad_dur = ts_f[keep], dur_f[keep], bad_dur[keep]
    dur_f = np.where(bad_dur, 0.0, dur_f)
    ts = to_ns(ts_f, base)
    dur = np.rint(dur_f * 1000).astype(np.int64)
    args = [e.args for e in xs]
    cats = [(e.cat or "").lower() for e in xs]
    unknown = {c for c in set(cats) if c not in schema.CATEGORY_KIND and c not in ("", "trace")}
    kinds = [schema.CATEGORY_KIND.get(c, schema.Kind.OTHER).value for c in cats]
    names = _dict_array([e.name or "" for e in xs])
    tid = _ids([e.tid for e in xs])
    kind_arr = _dict_array(kinds)
    host = np.isin(np.asarray(kinds), ("cpu_op", "user_annotation", "python_function"))
    cols = {
        "name": names, "cat": _dict_array([e.cat or "" for e in xs]), "kind": kind_arr,
        "ts": ts, "dur": dur, "pid": _ids([e.pid for e in xs]), "tid": tid,
        "stream": _opt([a.stream if a else None for a in args]),
        "device": _opt([a.device if a else None for a in args]).astype(np.int32),
        "correlation": _opt([a.correlation if a else None for a in args]),
        "external_id": _opt([a.external_id if a else None for a in args]),
        "depth": nesting_depth(tid, ts, dur, host),
        "is_comm": _flag_names(names, _COMM_MARKERS),
        "input_dims": _dict_array([bytes(a.input_dims).decode() if a else ""
                                   for a in args]),
    }
    if unknown:
        problems.append(f"unknown event categories kept as 'other': {', '.join(sorted(unknown))}")
    return pa.table(cols, schema=schema.EVENTS), xs


def _memory(ms: list[Event], base: int) -> pa.Table:
    if not ms:
        return schema.empty("memory")
    a = [e.args for e in ms]
    return pa.table({
        "ts": to_ns(np.nan_to_num(_floats([e.ts for e in ms])), base),
        "device": _opt([x.device_id if x else None for x in a]).astype(np.int32),
        "bytes_delta": _opt([x.nbytes if x else None for x in a], 0),
        "total_allocated": _opt([x.total_allocated if x else None for x in a], 0),
        "total_reserved": _opt([x.total_reserved if x else None for x in a], 0),
    }, schema=schema.MEMORY)


from rankscope.model.comms import collectives as _collectives  # noqa: E402
from rankscope.model.steps import steps as _steps  # noqa: E402
