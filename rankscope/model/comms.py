"""Collective calls of one rank: one row per call with its metadata and device span.

Sources, in order of preference: ``record_param_comms`` CPU ops (NCCL/HCCL traces carry the
collective name, sizes, dtype, process group and sequence number there), then the backend's
own ops (``nccl:*``, ``gloo:*``) that are not nested inside a ``record_param_comms``. Device
kernels are linked through the runtime launch that happened inside the call's host span.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rankscope.model import comm_issue, schema
from rankscope.model.info import Kind, Problem
from rankscope.model.schema import normalize_op
from rankscope.model.readers.kineto import Args, RawTrace

# The group of a call the trace does not name, where this rank is in sub-groups (see _unknown_groups).
UNKNOWN_PG = "?"


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


class Groups(NamedTuple):
    """The default group (name, members, size) and every group's members by name, from the trace's
    ``distributedInfo.pg_config``: where "Process Group Ranks" stops after 30 members."""

    name: str
    ranks: str
    size: int
    members: dict[str, str]


def _cut(v: Any) -> bool:
    """Kineto writes a group of more than 30 ranks as its first 30 and "..." (profiler util.cpp ``format_list``)."""
    return isinstance(v, str) and v.rstrip().endswith("...]")


def _whole(listed: str, name: str, a: Args, groups: Groups) -> tuple[str, bool]:
    """The members of a group whose listed ranks were cut: from pg_config by the group's name, else from NCCL's
    first global rank and stride with the group size; each must begin with the listed ranks. (members, found)."""
    full = groups.members.get(name, "")
    if full and (full + ",").startswith(listed + ","):
        return full, True
    start, stride, size = _int(a.global_start, -1), _int(a.global_stride, -1), _int(a.group_size, 0)
    if start >= 0 and stride > 0 and 30 < size <= (1 << 20):
        got = ",".join(str(start + stride * i) for i in range(size))
        if (got + ",").startswith(listed + ","):
            return got, True
    return listed, False


def _rows(events: pa.Table, xs: Mapping[int, Args | None], raw: RawTrace) -> list[dict[str, Any]]:
    """One row per collective call. Gloo records each call as one ``gloo:*`` span (collectives on its own
    threads, send / recv on the caller's): when those exist, every such span is a call, whatever it
    overlaps, with what its issuing ``c10d::`` op says (peer, split sizes, issue time: ``comm_issue``).
    Otherwise nested comm ops on one thread (c10d::X > record_param_comms > nccl:X) form one call, its
    metadata from the record_param_comms inside it."""
    # Work on dictionary indices: decoding every event's name to a Python string is the slow part.
    name_col = events.column("name").combine_chunks()
    dic = np.asarray(name_col.dictionary.to_pylist() + [""], dtype=object)
    name_idx = name_col.indices.to_numpy(zero_copy_only=False)
    kinds = _dict_mask(events.column("kind"), ("cpu_op", "user_annotation"))
    calls = np.array([comm_issue.is_call_name(str(n)) for n in dic], dtype=bool)
    idx = np.flatnonzero(np.asarray(events.column("is_comm")) & kinds & calls[name_idx])
    is_gloo = np.array([str(n).startswith("gloo:") for n in dic], dtype=bool)
    gloo = is_gloo[name_idx[idx]]
    names = _LazyNames(dic, name_idx)
    ts, dur = np.asarray(events.column("ts")), np.asarray(events.column("dur"))
    tid = np.asarray(events.column("tid"))
    default_pg = Groups(*_default_pg(raw), _members(raw))
    if gloo.any():
        return _gloo_rows(idx[gloo], idx[~gloo], names, xs, ts, dur, tid, default_pg)
    idx = idx[np.lexsort((-dur[idx], ts[idx], tid[idx]))]
    groups: list[list[int]] = []
    end = -1
    for i in idx.tolist():  # nested (contained) spans of one thread are one call; overlapping ones are not
        if groups and tid[i] == tid[groups[-1][0]] and ts[i] + dur[i] <= end:
            groups[-1].append(i)
        else:
            groups.append([i])
            end = ts[i] + dur[i]
    return [_group_row(g, names, xs, int(ts[g[0]]), int(dur[g[0]]), default_pg) for g in groups]


def _gloo_rows(calls: np.ndarray, others: np.ndarray, names: Any, xs: Mapping[int, Args | None], ts: np.ndarray,
               dur: np.ndarray, tid: np.ndarray, default_pg: Groups) -> list[dict[str, Any]]:
    """Every ``gloo:*`` span is a call; its issuing ``c10d::`` op gives the peer, split sizes and issue time."""
    issue = np.array([i for i in others.tolist() if str(names[i]).startswith("c10d::")], dtype=np.int64)
    c_op = [normalize_op(str(names[i])) for i in calls.tolist()]
    i_op = [normalize_op(str(names[j])) for j in issue.tolist()]
    p2p = np.array([o in comm_issue.P2P for o in c_op], dtype=bool)
    link = np.full(len(calls), -1, dtype=np.int64)
    if len(issue):
        link[p2p] = comm_issue.same_thread_links(
            ts[calls[p2p]], tid[calls[p2p]], [o for o, p in zip(c_op, p2p) if p], ts[issue],
            ts[issue] + dur[issue], tid[issue], i_op)
        fam = [comm_issue.family(o) for o in i_op]
        n = [_nelems(xs.get(i))[0] for i, p in zip(calls.tolist(), p2p) if not p]
        link[~p2p] = comm_issue.fifo_links(ts[calls[~p2p]], [comm_issue.family(o) for o, p in zip(c_op, p2p) if not p],
                                           ts[issue], fam, n, [comm_issue.tensor_sizes(xs.get(j)) for j in issue.tolist()])
    rows = []
    for k, i in enumerate(calls.tolist()):
        row = _row(i, str(names[i]), xs.get(i), int(ts[i]), int(dur[i]), default_pg)
        if link[k] >= 0:
            j = int(issue[link[k]])
            a, issued = xs.get(j), str(names[j])
            row["issue_ts"] = int(ts[j])
            if i_op[link[k]] != "other":
                row["op"] = i_op[link[k]]  # what was called (gloo runs a reduce_scatter as an all_reduce)
            _p2p_and_splits(row, issued, a)
        rows.append(row)
    return rows


def _p2p_and_splits(row: dict[str, Any], name: str, a: Args | None) -> None:
    """The peer (in the group, made global later) of a send / recv, and an all_to_all's split sizes."""
    if row["op"] in comm_issue.P2P and row["peer"] < 0:
        peer = comm_issue.local_peer(name, a)
        row["peer"] = -1 if peer is None else peer
    elif row["op"] == "all_to_all" and not row["split_out"]:
        width = schema.DTYPE_BYTES.get(str(row["dtype"]).lower(), 0)
        if not width and a is not None:
            width = schema.DTYPE_BYTES.get(_nelems(a)[1].lower(), 0)
        got = comm_issue.splits(name, a, width)
        if isinstance(got, str):
            row["split_out"] = row["split_in"] = got
        else:
            row["split_out"], row["split_in"] = comm_issue.as_text(got[0]), comm_issue.as_text(got[1])


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
               default_pg: Groups) -> dict[str, Any]:
    meta = next((i for i in g if names[i] == "record_param_comms"), g[0])
    row = _row(meta, str(names[g[0]]), xs[meta], ts, dur, default_pg)
    if row["op"] == "other":
        row["op"] = next((o for o in (normalize_op(str(names[i])) for i in g) if o != "other"), "other")
    for i in [meta] + [i for i in g if i != meta]:  # record_param_comms first, then the c10d op
        _p2p_and_splits(row, str(names[i]), xs[i])
    if row["bytes_in"] < 0:  # sizes may sit on another member of the group (Input Dims)
        for i in g:
            n, dt = _nelems(xs[i])
            width = schema.DTYPE_BYTES.get(str(dt).lower(), 0)
            if n >= 0 and width:
                row.update(nelems_in=n, nelems_out=n, dtype=dt, bytes_in=n * width, bytes_out=n * width)
                break
    return row


def _row(i: int, name: str, a: Args | None, ts: int, dur: int, default_pg: Groups) -> dict[str, Any]:
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
    whole = True
    if a is not None and _cut(a.pg_ranks):
        ranks, whole = _whole(ranks, str(pg_name), a, default_pg)
    gsize = _int(a.group_size, 0) if a is not None and a.group_size else 0
    gsize = gsize if 0 < gsize <= (1 << 20) else (len(ranks.split(",")) if ranks else default_pg[2])
    width = schema.DTYPE_BYTES.get(str(dtype).lower(), 0)
    return {"op": op, "name": name, "ts": ts, "dur": dur, "pg_name": str(pg_name), "pg_ranks": ranks,
            "group_size": int(gsize), "seq": -1 if a is None else _int(a.seq, -1),
            "nelems_in": n_in, "nelems_out": n_out, "dtype": str(dtype),
            "bytes_in": n_in * width if 0 <= n_in < (1 << 50) and width else -1,
            "bytes_out": n_out * width if 0 <= n_out < (1 << 50) and width else -1,
            "external_id": -1 if a is None else _int(a.external_id, -1), "peer": -1, "issue_ts": -1,
            "split_out": "", "split_in": "", "pg_known": a is not None and a.pg_ranks is not None, "pg_cut": not whole}


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


def _members(raw: RawTrace) -> dict[str, str]:
    """Group name -> its members ("0,1,2"), for every group of ``distributedInfo.pg_config`` with a list of ranks."""
    from rankscope.model.readers.kineto import dist_info

    info = dist_info(raw.trace)
    cfg = info.pg_config if info is not None and isinstance(info.pg_config, list) else []
    return {str(g.get("pg_name")): _pg_ranks(g["ranks"]) for g in cfg
            if isinstance(g, dict) and isinstance(g.get("ranks"), list) and len(g["ranks"]) <= 1 << 20}


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


def collectives(events: pa.Table, xs: Mapping[int, Args | None], raw: RawTrace,
                problems: list[str] | None = None, layout: Any = None) -> pa.Table:
    """The ``collectives`` table of one rank; ``xs``: event row -> args of the communication events. Calls whose
    group the trace lists only in part (and names nowhere else) are said in ``problems``, counted. ``layout``:
    meta.json's, for the group of the sends and receives (``comm_issue.p2p_group``)."""
    if events.num_rows == 0:
        return schema.empty("collectives")
    cand = pc.fill_null(events.column("is_comm"), False)
    if not pc.any(cand).as_py():
        return schema.empty("collectives")
    rows = _rows(events, xs, raw)
    if not rows:
        return schema.empty("collectives")
    cols: dict[str, Any] = {k: [r[k] for r in rows] for k in rows[0]}
    cut = sum(cols["pg_cut"])
    if cut and problems is not None:
        groups = sorted({g for g, c in zip(cols["pg_name"], cols["pg_cut"]) if c})
        problems.append(Problem(f"{cut} collectives of groups {', '.join(groups)[:200]} list only their first 30 "
                                "members (as Kineto writes them) and the trace's pg_config does not name the group: "
                                "their other members are unknown", Kind.GROUP_CUT, count=cut))
    ts = np.asarray(cols["ts"], dtype=np.int64)
    dev_ts, dev_dur = _device_spans(events, ts, ts + np.asarray(cols["dur"], dtype=np.int64))
    cols["dev_ts"], cols["dev_dur"] = dev_ts, dev_dur
    table = pa.table({f.name: cols[f.name] for f in schema.COLLECTIVES}, schema=schema.COLLECTIVES)
    known = np.asarray(cols["pg_known"], dtype=bool)
    if raw.path and max(cols["seq"]) < 0:  # gloo: group and sequence from the recorder, when it ran
        from rankscope.model import comm_seq

        found = comm_seq.sibling(raw.path)
        doc = comm_seq.read(found) if found else None
        if doc is not None:
            table, matched = comm_seq.assign(table, doc)
            known |= matched
    cfg = _pg_config(raw)
    groups = [g["ranks"] for g in cfg]
    pipe = comm_issue.p2p_group(cfg, layout, _my_rank(raw))
    table, lost, through = _global_peers(_even_splits(table), known, groups, pipe)
    if pipe is not None and len(through):  # those calls are the pipeline group's: named as the trace lists it
        name = next((str(g.get("pg_name", "")) for g in cfg if sorted(g["ranks"]) == sorted(pipe)), "")
        table = _in_group(table, through, name, pipe)
        known[through] = True
    if lost and problems is not None:
        problems.append(Problem(
            f"{lost} sends / receives name their peer by its rank in a group the trace does not name, and this rank "
            f"is in {len(groups)} groups ({comm_issue.list_groups(groups)}): their peers are unknown and they are "
            "not paired. Name the pipeline's group (group_desc with \"pp\", as DeviceMesh does) or pass "
            "rankscope.profile(layout={\"pp\": P, \"dp\": D})", Kind.GROUP_CUT, count=lost))
    return _unknown_groups(table, known, groups).sort_by("ts")


def _even_splits(table: pa.Table) -> pa.Table:
    """An all_to_all called without split sizes moves bytes / n to and from each of the n members."""
    split = table.column("split_out").to_pylist()
    todo = [i for i, v in enumerate(split) if v == comm_issue.EVEN]
    if not todo:
        return table
    n, b_in, b_out = (table.column(c).to_numpy() for c in ("group_size", "bytes_in", "bytes_out"))
    into = table.column("split_in").to_pylist()
    for i in todo:
        ok = n[i] > 0 and b_in[i] >= 0 and b_in[i] % n[i] == 0
        split[i] = comm_issue.as_text([int(b_in[i] // n[i])] * int(n[i])) if ok else ""
        ok = n[i] > 0 and b_out[i] >= 0 and b_out[i] % n[i] == 0
        into[i] = comm_issue.as_text([int(b_out[i] // n[i])] * int(n[i])) if ok else ""
    for c, v in (("split_out", split), ("split_in", into)):
        table = table.set_column(table.schema.get_field_index(c), table.schema.field(c), pa.array(v).dictionary_encode())
    return table


def _pg_config(raw: RawTrace) -> list[dict[str, Any]]:
    """The groups this rank's trace lists (``distributedInfo.pg_config``) whose member lists are whole."""
    from rankscope.model.readers.kineto import dist_info

    info = dist_info(raw.trace)
    cfg = info.pg_config if info is not None and isinstance(info.pg_config, list) else []
    return [g for g in cfg if isinstance(g, dict) and isinstance(r := g.get("ranks"), list)
            and all(type(x) is int for x in r) and len(r) <= 1 << 20]


def _my_rank(raw: RawTrace) -> int | None:
    from rankscope.model.readers.kineto import dist_info

    info = dist_info(raw.trace)
    r = getattr(info, "rank", None) if info is not None else None
    return r if type(r) is int else None


def _unknown_groups(table: pa.Table, known: np.ndarray, groups: list[list[int]]) -> pa.Table:
    """Calls whose group the trace does not name (gloo without the recorder) are put in the default group
    only when this rank is in no proper sub-group; otherwise their group is ``UNKNOWN_PG`` (they could be
    any of them: matching them by order across the world would mix the groups' calls)."""
    sets = {tuple(sorted(g)) for g in groups}
    world = max(sets, key=len) if sets else ()
    if known.all() or all(len(g) == len(world) for g in sets):
        return table
    cols = {"pg_name": pa.array(np.where(known, table.column("pg_name").to_numpy(zero_copy_only=False).astype(object),
                                         UNKNOWN_PG)).dictionary_encode(),
            "pg_ranks": pa.array(np.where(known, table.column("pg_ranks").to_numpy(zero_copy_only=False).astype(object),
                                          "")).dictionary_encode(),
            "group_size": pa.array(np.where(known, table.column("group_size").to_numpy(), 0), pa.int32())}
    for c, arr in cols.items():
        table = table.set_column(table.schema.get_field_index(c), table.schema.field(c), arr)
    return table


def _global_peers(table: pa.Table, known: np.ndarray, groups: list[list[int]],
                  pipe: list[int] | None = None) -> tuple[pa.Table, int, np.ndarray]:
    """Peers of send / recv as global ranks, and how many stay unknown. A call whose group is known maps
    through its member list; otherwise (gloo without the recorder) through the pipeline's group ``pipe``
    where one is known (``comm_issue.p2p_group``), else through every group this rank is in, and only when
    they all give the same rank (a peer "1" in a pipeline group [0, 2] is rank 2, in the world rank 1). Also
    returns the rows mapped through ``pipe``."""
    peer = table.column("peer").to_numpy().copy()
    todo = np.flatnonzero(peer >= 0)
    if not len(todo):
        return table, 0, todo
    ranks = table.column("pg_ranks").to_pylist()
    lost, through = 0, []
    for i in todo.tolist():
        local = int(peer[i])
        if known[i]:
            peer[i] = comm_issue.global_peer(local, ranks[i])
            continue
        if pipe is not None and local < len(pipe):
            peer[i] = pipe[local]
            through.append(i)
            continue
        cands = {g[local] for g in groups if local < len(g)} or {local}
        peer[i] = cands.pop() if len(cands) == 1 else -1
        lost += int(peer[i] < 0)
    table = table.set_column(table.schema.get_field_index("peer"), "peer", pa.array(peer, pa.int64()))
    return table, lost, np.asarray(through, dtype=np.int64)


def _in_group(table: pa.Table, rows: np.ndarray, name: str, members: list[int]) -> pa.Table:
    """``rows`` put in the group ``name`` with ``members`` (pg_name, pg_ranks, group_size)."""
    cols: dict[str, Any] = {c: table.column(c).to_pylist() for c in ("pg_name", "pg_ranks", "group_size")}
    for i in rows.tolist():
        cols["pg_name"][i], cols["pg_ranks"][i], cols["group_size"][i] = name, ",".join(map(str, members)), len(members)
    for c, v in cols.items():
        arr = pa.array(v, pa.int32()) if c == "group_size" else pa.array(v).dictionary_encode()
        table = table.set_column(table.schema.get_field_index(c), table.schema.field(c), arr)
    return table
