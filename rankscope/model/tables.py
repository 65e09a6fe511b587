"""Decoded Kineto events -> the per-rank Arrow tables of ``schema.py``.

Column work is vectorized (numpy / pyarrow); the only per-event Python is the attribute
gathering out of the decoded structs (``map(attrgetter)``, one C-level pass per column), done a
chunk of events at a time so the structs of a whole file never exist at once.
"""
from __future__ import annotations

import math
from operator import attrgetter
from typing import Any, Optional, Sequence

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rankscope.model import inflate, schema
from rankscope.model.info import Kind, Problem
from rankscope.model.readers.kineto import Args, Event, RawTrace, bad_comm_args
from rankscope.model.readers.timestamps import decimal_ns, to_ns

_NOARGS = Args()
MAX_TS_US = 4.1e15  # epoch µs of year 2100 (model/sanity.py MAX_EPOCH_NS)
MAX_DUR_US = 86_400e6
_ARGS_ENC = msgspec.json.Encoder()
_ARGS_DEC = msgspec.json.Decoder(list[Optional[Args]])

_HOST_KINDS = ("cpu_op", "user_annotation", "python_function")
# Which names are communication (or a framework's wait for it): model/comm_issue.py.


def _ids(values: Sequence[Any], names: dict[str, int] | None = None, probs: "_Problems | None" = None) -> np.ndarray:
    """pid/tid may be ints or strings ("Spans", "PyTorch Profiler"); strings get stable negatives. An
    integer-valued float (1.0) is that integer. Anything else (1.5, true, [1], {}, an int beyond int64,
    missing) gets a negative of its own, counted: the thread stays distinct (1.5 and true are not
    thread 1), nothing overflows."""
    try:  # Arrow's inference refuses a bool among ints (numpy would read true as 1) and ints beyond int64
        got = pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        got = None
    if got is not None and pa.types.is_integer(got.type) and got.null_count == 0 and got.type.bit_width == 64 \
            and pa.types.is_signed_integer(got.type):
        return got.to_numpy(zero_copy_only=False)
    names = {} if names is None else names
    out, bad = [], 0
    for v in values:
        if type(v) is int and -(1 << 63) <= v < (1 << 63):
            out.append(v)
        elif type(v) is float and v.is_integer() and -(2.0 ** 63) <= v < 2.0 ** 63:
            out.append(int(v))
        elif isinstance(v, str):
            out.append(names.setdefault(v[:64], -1 - len(names)))
        else:
            bad += 1
            out.append(names.setdefault(f"\0{str(v)[:64]}", -1 - len(names)))
    if probs is not None:
        probs.count("pid / tid values that are not integers (e.g. 1.5, true, [1], 2**70) were kept as threads of "
                    "their own", bad, Kind.BAD_PID_TID)
    return np.asarray(out, dtype=np.int64)


def _int_or(v: Any, fill: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError):
        return fill


def _fast(values: Sequence[Any], typ: pa.DataType, fill: Any) -> np.ndarray:
    """Python values -> numpy through Arrow's C converter (None -> ``fill``); raises on odd values."""
    arr = pa.array(values, type=typ)
    return (pc.fill_null(arr, fill) if arr.null_count else arr).to_numpy(zero_copy_only=False)


def _opt(values: Sequence[Any], fill: int = -1) -> np.ndarray:
    """Optional ints -> int64 with ``fill`` for missing; odd values (strings, floats) coerced."""
    try:
        return _fast(values, pa.int64(), fill)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return np.asarray([_int_or(v, fill) for v in values], dtype=np.int64)


def _floats(values: Sequence[Any]) -> np.ndarray:
    try:
        return _fast(values, pa.float64(), math.nan)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        out = []
        for v in values:
            try:
                out.append(float(v))
            except (TypeError, ValueError):
                out.append(math.nan)
        return np.asarray(out, dtype=np.float64)


def _comm_names(names: pa.DictionaryArray) -> np.ndarray:
    """``comm_issue.is_comm_name`` over the (small) dictionary, then gathered by index."""
    from rankscope.model.comm_issue import comm_mask

    hit = np.append(comm_mask(names.dictionary.to_pylist()), False)
    return hit[names.indices.fill_null(len(names.dictionary)).to_numpy(zero_copy_only=False)]


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


class _Problems:
    """Problems counted over all chunks of a file, rendered once as one line each."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.kinds: dict[str, Kind] = {}
        self.unknown: set[str] = set()
        self.args: dict[str, int] = {}  # collective metadata field -> values read as unknown

    def count(self, what: str, n: int, kind: Kind) -> None:
        if n:
            self.counts[what] = self.counts.get(what, 0) + n
            self.kinds[what] = kind

    def comm_args(self, args: list[Any]) -> None:
        for field, n in bad_comm_args(args).items():
            self.args[field] = self.args.get(field, 0) + n

    def lines(self) -> list[str]:
        out: list[str] = [Problem(f"{n} {what}", self.kinds[what], count=n) for what, n in self.counts.items()]
        if self.args:
            n = sum(self.args.values())
            fields = ", ".join(f"{f} ({k})" for f, k in self.args.items())
            out.append(Problem(f"{n} collective metadata values that torch does not write were read as unknown: "
                               f"{fields}", Kind.BAD_COLLECTIVE_ARGS, count=n))
        if self.unknown:
            out.append(Problem(f"unknown event categories kept as 'other': {', '.join(sorted(self.unknown))}",
                               Kind.UNKNOWN_CATEGORY, count=len(self.unknown)))
        return out


def build(raw: RawTrace, layout: Any = None) -> tuple[dict[str, pa.Table], list[str]]:
    """All per-rank tables of one decoded trace, plus problems found on the way. ``layout``: the rank's meta.json
    layout (``{"pp": 4, "dp": 2}``), for the group of a send / receive the trace does not name.

    Events become structs and then columns one chunk at a time; only the few communication
    events are kept as structs (their args feed the ``collectives`` table)."""
    probs = _Problems()
    parts: list[pa.Table] = []
    mems: list[pa.Table] = []
    kept: list[tuple[int, np.ndarray, Any]] = []
    ids: dict[str, int] = {}
    offset = 0
    for chunk in raw.chunks():
        xs = [e for e in chunk if e.ph == "X"]
        phs = _get(chunk, "ph")
        probs.count("begin/end ('B'/'E') events are not supported and were left out",
                    phs.count("B") + phs.count("E"), Kind.UNSUPPORTED_EVENTS)
        mems.append(_memory([e for e in chunk if e.ph == "i" and e.name == "[memory]"], 0))
        del chunk
        cols, xs = _chunk_columns(xs, 0, probs, ids)
        comm = np.flatnonzero(_comm_names(cols["name"]))
        if len(comm):
            # Only the args of communication events are kept, re-encoded as one JSON blob: live
            # structs scattered over every chunk's memory would keep all of it from being reused
            # (heap fragmentation), and their Raw fields would pin the chunk's JSON buffer.
            keep = [xs[i].args for i in comm.tolist()]
            probs.comm_args(keep)
            kept.append((offset, comm, _ARGS_ENC.encode(keep) if raw.streamed else keep))
        offset += len(xs)
        parts.append(pa.table(cols))
        del xs, cols
    # baseTimeNanoseconds may sit after the events (streamed files): added once at the end.
    from rankscope.model.sanity import base_time

    base = base_time(raw.trace.baseTimeNanoseconds, raw.path, [])  # the problem is said once, by ingest
    events = _finish_events(parts, base)
    del parts
    memory = pa.concat_tables(mems) if mems else schema.empty("memory")
    if base and memory.num_rows:
        memory = memory.set_column(0, "ts", pa.array(memory.column("ts").to_numpy() + base))
    comm_args: dict[int, Args | None] = {}
    for off, idx, blob in kept:
        comm_args.update(zip((idx + off).tolist(), _ARGS_DEC.decode(blob) if isinstance(blob, bytes) else blob))
    if "cuda_profiler_range" in events.column("cat").combine_chunks().dictionary.to_pylist():
        events = _with_counters(events, raw)
    tables = {"events": events, "memory": memory}
    said: list[str] = []
    tables["collectives"] = _collectives(events, comm_args, raw, said, layout)
    tables["steps"] = _steps(events)
    probs.count("ProfilerStep spans with a number too long to be a step (over 15 digits) were not read as steps",
                unread_steps(events), Kind.BAD_STEP)
    return tables, probs.lines() + said


def _finish_events(parts: list[pa.Table], base: int) -> pa.Table:
    """Concatenate chunk tables (one dictionary per column) and add the whole-thread columns."""
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return schema.empty("events")
    t = pa.concat_tables(parts).unify_dictionaries().combine_chunks() if len(parts) > 1 else parts[0]
    tid, ts, dur = (t.column(c).to_numpy() for c in ("tid", "ts", "dur"))
    kind = t.column("kind").combine_chunks()
    hostk = np.array([k in _HOST_KINDS for k in kind.dictionary.to_pylist()] + [False])
    host = hostk[kind.indices.to_numpy(zero_copy_only=False)]
    cols = {n: t.column(n) for n in t.column_names}
    if base:
        ts = ts + base
        cols["ts"] = pa.array(ts)
    cols["depth"] = pa.array(nesting_depth(tid, ts, dur, host))
    cols["is_comm"] = pa.array(_comm_names(t.column("name").combine_chunks()))
    return pa.table({f.name: cols[f.name] for f in schema.EVENTS}, schema=schema.EVENTS)


def _get(xs: Sequence[Any], *attrs: str) -> Any:
    """Attribute columns out of decoded structs, one C-level pass (map + attrgetter) each."""
    cols = [list(map(attrgetter(a), xs)) for a in attrs]
    return cols[0] if len(attrs) == 1 else cols


def _strings(values: Sequence[str | None], probs: "_Problems | None" = None) -> pa.DictionaryArray:
    """Interned strings; missing values become "", lone surrogates (from "\\ud800" escapes) are
    replaced by U+FFFD and counted, non-strings become their JSON-ish text."""
    try:
        arr = pa.array(values, type=pa.string())
    except (pa.ArrowException, UnicodeError, TypeError):
        fixed = [v if v is None else _repair(v) for v in values]
        if probs is not None:
            probs.count("names or categories with invalid text (lone surrogates, non-strings) were repaired",
                        sum(1 for a, b in zip(values, fixed) if a is not b and a != b), Kind.INVALID_TEXT)
        arr = pa.array(fixed, type=pa.string())
    return pc.fill_null(arr, "").dictionary_encode()


def _repair(v: Any) -> str:
    if not isinstance(v, str):
        return str(v)[:256]
    return v.encode("utf-8", "replace").decode("utf-8")


def _kinds(cat: pa.DictionaryArray, probs: _Problems) -> pa.DictionaryArray:
    """Normalized kind per event, computed over the (small) category dictionary, then gathered."""
    names = [k.value for k in schema.Kind]
    dic = [str(c).lower() for c in cat.dictionary.to_pylist()]
    probs.unknown |= {c for c in dic if c not in schema.CATEGORY_KIND and c not in ("", "trace")}
    code = np.array([names.index(schema.CATEGORY_KIND.get(c, schema.Kind.OTHER).value) for c in dic] + [0],
                    dtype=np.int32)
    per_event = code[cat.indices.to_numpy(zero_copy_only=False)]
    used = np.flatnonzero(np.bincount(per_event, minlength=len(names)))
    remap = np.zeros(len(names), dtype=np.int32)
    remap[used] = np.arange(len(used), dtype=np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(remap[per_event]), pa.array([names[i] for i in used]))


def _valid_times(xs: list[Event], probs: _Problems) -> tuple[list[Event], np.ndarray, np.ndarray]:
    ts_f, dur_f = _floats(_get(xs, "ts")), _floats(_get(xs, "dur"))
    bad_ts = ~np.isfinite(ts_f)
    # Bounds (µs): a timestamp past year 2100 or before 1970 (ts 1e300), a duration over a day.
    absurd = ~bad_ts & ((ts_f > MAX_TS_US) | (ts_f < -MAX_TS_US))
    bad_dur = ~np.isfinite(dur_f) | (dur_f < 0)
    long_dur = ~bad_dur & (dur_f > MAX_DUR_US)
    probs.count("events without a valid 'ts' were dropped", int(bad_ts.sum()), Kind.BAD_TIMESTAMP)
    probs.count("events with an absurd 'ts' (beyond year 2100) were dropped", int(absurd.sum()), Kind.BAD_TIMESTAMP)
    bad_ts |= absurd
    probs.count("events with missing, negative or NaN 'dur' were kept with duration 0",
                int((bad_dur & ~bad_ts).sum()), Kind.BAD_DURATION)
    probs.count("events with a 'dur' over a day were kept with duration 0", int((long_dur & ~bad_ts).sum()),
                Kind.BAD_DURATION)
    bad_dur |= long_dur
    if bad_ts.any():
        keep = ~bad_ts
        xs = [e for e, k in zip(xs, keep) if k]
        ts_f, dur_f, bad_dur = ts_f[keep], dur_f[keep], bad_dur[keep]
    return xs, ts_f, np.where(bad_dur, 0.0, dur_f)


def _chunk_columns(xs: list[Event], base: int, probs: _Problems,
                   ids: dict[str, int]) -> tuple[dict[str, Any], list[Event]]:
    """Columns of one chunk of 'X' events (all but the whole-thread ``depth`` and ``is_comm``)."""
    xs, ts_f, dur_f = _valid_times(xs, probs)
    names_l, cats_l, pids, tids, args = _get(xs, "name", "cat", "pid", "tid", "args")
    args = [a or _NOARGS for a in args]
    stream, device, corr, ext, nbytes, bw = _get(args, "stream", "device", "correlation", "external_id",
                                                 "copy_bytes", "bandwidth")
    names = _strings(names_l, probs)
    if "" in names.dictionary.to_pylist():
        probs.count("events without a name were kept with an empty name",
                    int(pc.sum(pc.equal(names.dictionary.take(names.indices), "")).as_py() or 0), Kind.UNNAMED_EVENTS)
    cat = _strings(cats_l, probs)
    dims = pa.array([bytes(a.input_dims) for a in args], type=pa.binary()).cast(pa.string())
    return {
        "name": names, "cat": cat, "kind": _kinds(cat, probs),
        "ts": decimal_ns(_get(xs, "ts"), to_ns(ts_f, 0)) + base, "dur": np.rint(dur_f * 1000).astype(np.int64),
        "pid": _ids(pids, ids, probs), "tid": _ids(tids, ids, probs),
        "stream": _opt(stream), "device": _opt(device).astype(np.int32),
        "correlation": _opt(corr), "external_id": _opt(ext),
        "input_dims": dims.dictionary_encode(),
        "bytes": _opt(nbytes), "bandwidth": np.nan_to_num(_floats(bw), nan=-1.0),
        "counters": pa.DictionaryArray.from_arrays(pa.array(np.zeros(len(xs), np.int32)), pa.array([""])),
    }, xs


def _memory(ms: list[Event], base: int) -> pa.Table:
    if not ms:
        return schema.empty("memory")
    a = [e.args for e in ms]
    return pa.table({
        "ts": decimal_ns([e.ts for e in ms], to_ns(np.nan_to_num(_floats([e.ts for e in ms])), 0)) + base,
        "device": _opt([x.device_id if x else None for x in a]).astype(np.int32),
        "bytes_delta": _opt([x.nbytes if x else None for x in a], 0),
        "total_allocated": _opt([x.total_allocated if x else None for x in a], 0),
        "total_reserved": _opt([x.total_reserved if x else None for x in a], 0),
    }, schema=schema.MEMORY)


class _RangeEvent(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Optional[str] = None
    args: Optional[dict[str, Any]] = None


class _RangeTrace(msgspec.Struct, gc=False):
    traceEvents: list[_RangeEvent] = []


def _with_counters(events: pa.Table, raw: RawTrace) -> pa.Table:
    """The ``counters`` column of CUPTI range-profiler events ("cuda_profiler_range": one per kernel, its
    metrics as arbitrary args keys, which the typed decoding drops): the file is read a second time,
    only for such traces (small: the range profiler serializes kernels). The k-th such 'X' event of the
    file is the k-th of the table; when the counts differ the column stays empty."""
    try:
        data = inflate.Source(raw.path).read_all()
        doc = msgspec.json.decode(data, type=_RangeTrace)
    except (OSError, msgspec.DecodeError, ValueError):
        return events
    found = [_ARGS_ENC.encode({k: v for k, v in (e.args or {}).items() if isinstance(v, (int, float))}).decode()
             for e in doc.traceEvents if e.ph == "X" and e.cat == "cuda_profiler_range"]
    cat = events.column("cat").combine_chunks()
    rows = np.flatnonzero(cat.indices.to_numpy(zero_copy_only=False)
                          == cat.dictionary.to_pylist().index("cuda_profiler_range"))
    if len(rows) != len(found):
        return events
    col = np.full(events.num_rows, "", dtype=object)
    col[rows] = found
    i = events.schema.get_field_index("counters")
    return events.set_column(i, "counters", pa.array(col, pa.string()).dictionary_encode())


from rankscope.model.comms import collectives as _collectives  # noqa: E402
from rankscope.model.steps import steps as _steps, unread_steps  # noqa: E402
