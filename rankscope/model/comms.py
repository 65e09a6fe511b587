"""Collective calls of one rank: one row per call with its metadata and device span.

Sources, in order of preference: ``record_param_comms`` CPU ops (NCCL/HCCL traces carry the
collective name, sizes, dtype, process group and sequence number there), then the backend's
own ops (``nccl:*``, ``gloo:*``) that are not nested inside a ``record_param_comms``. Device
kernels are linked through the runtime launch that happened inside the call's host span.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rankscope.model import schema
from rankscope.model.readers.kineto import Args, RawTrace

_OP_RE = re.compile(r"^(?:nccl|gloo|hccl|rccl|c10d)(?:[:_]+)(.*)$", re.I)


@functools.lru_cache(maxsize=4096)
def normalize_op(name: str) -> str:
    """'allreduce', 'nccl:all_reduce', 'gloo:all_reduce' -> 'all_reduce'."""
    m = _OP_RE.match(name)
    key = (m.group(1) if m else name).lower().strip("_")
    return schema.COLLECTIVE_OPS.get(key, schema.COLLECTIVE_OPS.get(key.replace("_", ""), "other"))


def _nelems(a: Args | None) -> tuple[int, str]:
    """Element count and dtype from 'Input Dims' / 'Input type' (gloo ops carry no comm metadata)."""
    if a is None or not bytes(a.input_dims):
        return -1, ""
    import orjson

    try:
        dims = orjson.loads(bytes(a.input_dims))
        types = orjson.loads(bytes(a.input_type)) if bytes(a.input_type) else []
        n = _count(dims[0]) if dims and isinstance(dims, list) else -1
    except (orjson.JSONDecodeError, TypeError, ValueError, KeyError, IndexError, OverflowError, RecursionError):
        return -1, ""  # odd 'Input Dims': the element count is unknown, the event is kept
    n = n if 0 <= n < (1 << 50) else -1  # an absurd shape is unknown, not a 2**70-element tensor
    t = types[0] if isinstance(types, list) and types and isinstance(types[0], str) else ""
    return n, t


def _count(shape: Any) -> int:
    """Elements of a shape [a, b], or of a tensor list [[a, b], [c]]; -1 if unknowable."""
    if not isinstance(shape, list):
        return -1
    if all(isinstance(x, int) for x in shape):
        return math.prod(shape)
    parts = [_count(x) for x in shape]
    return -1 if any(p < 0 for p in parts) else sum(parts)


def _pg_ranks(v: Any) -> str:
    if isinstance(v, list):
        return ",".join(str(x) for x in v if type(x) is int)
    return ",".join(re.findall(r"-?\d+", str(v or "")))


def _rows(events: pa.Table, xs: Mapping[int, Args | None], raw: RawTrace) -> list[dict[str, Any]]:
    """One row per collective call: nested comm ops on one thread (c10d::X > record_param_comms >
    nccl:X) form a single call; metadata comes from the record_param_comms inside it. Gloo runs
    collectives on its own threads as ``gloo:*`` spans: when those exist they are the calls."""
    # Work on dictionary indices: decoding every event's name to a Python string is the slow part.
    name_col = events.column("name").combine_chunks()
    dic = np.asarray(name_col.dictionary.to_pylist() + [""], dtype=object)
    name_idx = name_col.indices.to_numpy(zero_copy_only=False)
    kinds = _dict_mask(events.column("kind"), ("cpu_op", "user_annotation"))
    comm = np.asarray(events.column("is_comm")) & kinds
    idx = np.flatnonzero(comm)
    is_gloo = np.array([str(n).startswith("gloo:") for n in dic], dtype=bool)
    gloo = is_gloo[name_idx[idx]]
    if gloo.any():
        idx = idx[gloo]
    names = _LazyNames(dic, name_idx)
    ts, dur = np.asarray(events.column("ts")), np.asarray(events.column("dur"))
    tid = np.asarray(events.column("tid"))
    idx = idx[np.lexsort((-dur[idx], ts[idx], tid[idx]))]
    default_pg = _default_pg(raw)
    groups: list[list[int]] = []
    end = -1
    for i in idx.tolist():
        if groups and tid[i] == tid[groups[-1][0]] and ts[i] < end:
            groups[-1].append(i)
        else:
            groups.append([i])
            end = ts[i] + dur[i]
    return [_group_row(g, names, xs, int(ts[g[0]]), int(dur[g[0]]), default_pg) for g in groups]


class _LazyNames:
    """names[i] for an event row, decoded from the dictionary only for the rows asked for."""

    def __init__(self, dic: np.ndarray, idx: np.ndarray) -> None:
        self.dic, self.idx = dic, idx

    def __getitem__(self, i: int) -> str:
        return self.dic[self.idx[i]]


def _dict_mask(col: Any, values: tuple[str, ...]) -> np.ndarray:
    """Rows of a dictionary column whose value is one of ``values``, tested over the dictionary."""
    arr = col.combine_chunks()
    hit = np.array([v in values for v in arr.dictionary.to_pylist()] + [False], dtype=bool)
    return hit[arr.indices.to_numpy(zero_copy_only=False)]


def _group_row(g: list[int], names: Any, xs: Mapping[int, Args | None], ts: int, dur: int,
               default_pg: tuple[str, str, int]) -> dict[str, Any]:
    meta = next((i for i in g if names[i] == "record_param_comms"), g[0])
    row = _row(meta, str(names[g[0]]), xs[meta], ts, dur, default_pg)
    if row["op"] == "other":
        row["op"] = next((o for o in (normalize_op(str(names[i])) for i in g) if o != "other"), "other")
    if row["bytes_in"] < 0:  # sizes may sit on another member of the group (Input Dims)
        for i in g:
            n, dt = _nelems(xs[i])
            width = schema.DTYPE_BYTES.get(str(dt).lower(), 0)
            if n >= 0 and width:
                row.update(nelems_in=n, nelems_out=n, dtype=dt, bytes_in=n * width, bytes_out=n * width)
                break
    return row


def _row(i: int, name: str, a: Args | None, ts: int, dur: int, default_pg: tuple[str, str, int]) -> dict[str, Any]:
    n_in, dtype = _nelems(a)
    n_out = n_in
    if a is not None and a.coll_name:
        op = normalize_op(a.coll_name)
        n_in = _int(a.in_nelems, -1) if a.in_nelems is not None else n_in
        n_out = _int(a.out_nelems, -1) if a.out_nelems is not None else n_in
        dtype = a.dtype or dtype
    else:
        op = normalize_op(name)
    pg_name = a.pg_name if a is not None and a.pg_name is not None else default_pg[0]
    ranks = _pg_ranks(a.pg_ranks) if a is not None and a.pg_ranks is not None else default_pg[1]
    gsize = _int(a.group_size, 0) if a is not None and a.group_size else 0
    gsize = gsize if 0 < gsize <= (1 << 20) else (len(ranks.split(",")) if ranks else default_pg[2])
    width = schema.DTYPE_BYTES.get(str(dtype).lower(), 0)
    return {"op": op, "name": name, "ts": ts, "dur": dur, "pg_name": str(pg_name), "pg_ranks": ranks,
            "group_size": int(gsize), "seq": -1 if a is None else _int(a.seq, -1),
            "nelems_in": n_in, "nelems_out": n_out, "dtype": str(dtype),
            "bytes_in": n_in * width if 0 <= n_in < (1 << 50) and width else -1,
            "bytes_out": n_out * width if 0 <= n_out < (1 << 50) and width else -1,
            "external_id": -1 if a is None else _int(a.external_id, -1)}


def _default_pg(raw: RawTrace) -> tuple[str, str, int]:
    from rankscope.model import sanity
    from rankscope.model.readers.kineto import dist_info

    info = dist_info(raw.trace)
    cfg = info.pg_config if info is not None and isinstance(info.pg_config, list) else None
    if cfg and isinstance(cfg[0], dict):
        pg = cfg[0]
        ranks = _pg_ranks(pg.get("ranks")) if isinstance(pg.get("ranks"), (list, str)) else ""
        size = _int(pg.get("pg_size"), 0)
        return str(pg.get("pg_name") or "0"), ranks, len(ranks.split(",")) if ranks else size
    world = sanity.world_size(info.world_size, raw.path, []) if info is not None else None
    if world and world <= 4096:  # spelled out only when small: never a string sized by a number from a file
        return "0", ",".join(map(str, range(world))), world
    return "0", "", world or 0


def _int(v: Any, fill: int) -> int:
    """An int from a value of any type (strings, floats, junk -> ``fill``), bounded to int64."""
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return fill
    return i if -(1 << 63) <= i < (1 << 63) else fill


def _device_spans(events: pa.Table, ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First..last communication kernel launched inside each [ts, end) host span."""
    corr = events.column("correlation").to_numpy()
    comm = events.column("is_comm").to_numpy()
    k = np.flatnonzero(_dict_mask(events.column("kind"), ("kernel",)) & comm & (corr >= 0))
    r = np.flatnonzero(_dict_mask(events.column("kind"), ("runtime",)) & (corr >= 0))
    dev_ts = np.full(len(ts), -1, dtype=np.int64)
    dev_dur = np.full(len(ts), -1, dtype=np.int64)
    if not len(k) or not len(r):
        return dev_ts, dev_dur
    ets, edur = events.column("ts").to_numpy(), events.column("dur").to_numpy()
    launch_of = dict(zip(corr[r].tolist(), ets[r].tolist()))
    launch = np.array([launch_of.get(c, -1) for c in corr[k].tolist()], dtype=np.int64)
    ok = launch >= 0
    k, launch = k[ok], launch[ok]
    order = np.argsort(launch)
    k, launch = k[order], launch[order]
    lo = np.searchsorted(launch, ts, side="left")
    hi = np.searchsorted(launch, end, side="right")
    for j in np.flatnonzero(hi > lo):
        ks = k[lo[j]:hi[j]]
        dev_ts[j] = ets[ks].min()
        dev_dur[j] = (ets[ks] + edur[ks]).max() - dev_ts[j]
    return dev_ts, dev_dur


def collectives(events: pa.Table, xs: Mapping[int, Args | None], raw: RawTrace) -> pa.Table:
    """The ``collectives`` table of one rank; ``xs``: event row -> args of the communication events."""
    if events.num_rows == 0:
        return schema.empty("collectives")
    cand = pc.fill_null(events.column("is_comm"), False)
    if not pc.any(cand).as_py():
        return schema.empty("collectives")
    rows = _rows(events, xs, raw)
    if not rows:
        return schema.empty("collectives")
    cols: dict[str, Any] = {k: [r[k] for r in rows] for k in rows[0]}
    ts = np.asarray(cols["ts"], dtype=np.int64)
    dev_ts, dev_dur = _device_spans(events, ts, ts + np.asarray(cols["dur"], dtype=np.int64))
    cols["dev_ts"], cols["dev_dur"] = dev_ts, dev_dur
    table = pa.table({f.name: cols[f.name] for f in schema.COLLECTIVES}, schema=schema.COLLECTIVES)
    if raw.path and max(cols["seq"]) < 0:  # gloo: group and sequence from the recorder, when it ran
        from rankscope.model import comm_seq

        found = comm_seq.sibling(raw.path)
        doc = comm_seq.read(found) if found else None
        if doc is not None:
            table = comm_seq.assign(table, doc)[0]
    return table.sort_by("ts")
