"""Launch links of a torch_npu ``trace_view.json``: which host op put each device task on its stream.

torch_npu writes them as flow events. ``TraceEventManager.create_torch_to_npu_flow``
(``profiler/analysis/prof_common_func/_trace_event_manager.py``, torch_npu 2.14) gives each link an "s" at the
torch op's own start on its thread and an "f" at the task's start on its Ascend Hardware thread, name
``torch_to_npu``, cat ``async_npu``, binding "e". CANN's timeline, which trace_view.json includes, adds flows of cat
``HostToDevice`` from the CANN API call that launched the task (``CANNFileParser.combine_acl_to_npu`` pairs their ends
with tasks by (pid, tid, ts)). The threads of the Ascend Hardware layer are the device's streams.

Kineto's traces say the same with a correlation id on the launch and on the kernel, and a stream on the kernel. So each
task gets its thread as its stream and its flow's id as its correlation, and the host op at the flow's start gets the
same id (one task per host op: the first flow from it; a task whose launch is unknown keeps no partner). The critical
path's launch edges and the device-side analyses then read an Ascend run as they read a Kineto one. A task with both
kinds of flow is linked to the torch op (on the training thread, which the critical path follows). The ``HostToDevice``
flows are the weaker link: their "s" is not at the start of the CANN call that holds it, and in
../shared/data/ascend_msprof/trace_view.json.gz some end at a task that started before them.

torch_npu's task queue (``TASK_QUEUE_ENABLE``) adds flows of cat ``async_task_queue``: the op only enqueues its work
("Enqueue", inside the op), and another thread dequeues it ("Dequeue@<op>") and makes the CANN calls that launch its
tasks. ``queue_links`` joins each Enqueue to its Dequeue by an id of their own; the critical path takes the Dequeue as
the launch (``analysis/deps/events``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
import zlib
from typing import Any

import numpy as np

from rankscope.model.schema import QUEUE_IDS

CATS = ("async_npu", "HostToDevice")  # preferred first
QUEUE_CAT = "async_task_queue"
_NONE = np.zeros(0, np.int64)
GROUP_STREAMS = 1 << 30  # HCCL operations' lanes: one per group, above any hardware stream id (and within int32)


def ns_many(ts: list[Any]) -> np.ndarray:
    """``ns`` of many timestamps at once (-1 where bad): the links' keys, parsed in one pass. Keys only: a flow's end
    and the event at it are read alike, to 0.25 µs on epoch-sized µs (the events' own times are read exactly,
    ``readers/timestamps``)."""
    try:
        v = np.array(ts, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return np.array([-1 if (t := ns(x)) is None else t for x in ts], np.int64)
    ok = np.isfinite(v) & (np.abs(v) < 1e16)
    return np.where(ok, np.rint(v * 1000), -1).astype(np.int64)


def ns(ts: Any) -> int | None:
    """A trace_view timestamp (µs, a number or a decimal string) as a key, as the same string always gives; None if
    bad."""
    try:
        v = float(ts)
    except (TypeError, ValueError):
        return None
    return round(v * 1000) if v == v and abs(v) < 1e16 else None


def stream_of(name: Any, tid: Any) -> int | None:
    """The stream of a device-layer event: an HCCL operation ("hcom_<op>_..._@<group hash>", the same name in the text
    and the DB export) runs on its group's lane; a task on its Ascend Hardware thread, the stream id."""
    if isinstance(name, str) and name.startswith("hcom_") and "@" in name:
        group = name.rpartition("@")[2]
        return GROUP_STREAMS + (int(group) if group.isdigit() else zlib.crc32(group.encode())) % GROUP_STREAMS
    return tid if type(tid) is int and 0 <= tid < GROUP_STREAMS else None


@dataclass
class Links:
    """Launch links as sorted arrays: a thread's code (``threads``: (pid, tid) -> code) and a start ns -> correlation
    id, for tasks (``task``) and for the host ops that launched them (``host``), each sorted by (code, start)."""

    threads: dict[tuple[Any, Any], int] = field(default_factory=dict)
    task: tuple[np.ndarray, np.ndarray, np.ndarray] = (_NONE, _NONE, _NONE)
    host: tuple[np.ndarray, np.ndarray, np.ndarray] = (_NONE, _NONE, _NONE)

    def __bool__(self) -> bool:
        return bool(len(self.task[2]))

    def host_pids(self) -> set[Any]:
        """The pids of the threads whose ops launched tasks."""
        codes = set(self.host[0].tolist())
        return {pt[0] for pt, c in self.threads.items() if c in codes}

    def find(self, keys: list[tuple[Any, Any]], starts: np.ndarray, device: np.ndarray) -> np.ndarray:
        """The correlation of each event ((pid, tid), start ns; ``device``: a task, else a host op), -1 if none."""
        get = self.threads.get
        codes = np.array([get(k, -1) for k in keys], np.int64)
        out = np.full(len(keys), -1, np.int64)
        device = np.asarray(device, bool)
        for table, mask in ((self.task, device), (self.host, ~device)):
            _find(table, codes, starts, mask, out)
        return out


def _find(table: tuple[np.ndarray, np.ndarray, np.ndarray], codes: np.ndarray, starts: np.ndarray,
          mask: np.ndarray, out: np.ndarray) -> None:
    """Fill ``out`` where ``mask`` with the correlation of ``table``'s row of the same (code, start)."""
    code, start, corr = table
    for c in np.unique(codes[mask & (codes >= 0)]).tolist():
        lo, hi = np.searchsorted(code, [c, c + 1]).tolist()
        if lo == hi:
            continue
        at = np.flatnonzero(mask & (codes == c))
        i = lo + np.searchsorted(start[lo:hi], starts[at])
        hit = (i < hi) & (start[np.minimum(i, hi - 1)] == starts[at])
        out[at[hit]] = corr[i[hit]]


def _group_ranks(first: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """Within runs that start where ``first``: each row's 0-based index among the run's rows where ``flag``."""
    c = np.cumsum(flag)
    return c - (c - flag)[first][np.cumsum(first) - 1] - 1


def pair(group: np.ndarray, is_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flow ends in file order, each of a group (its (cat, id)): (index of each paired "f", index of its "s"). An
    "f" ends the earliest open "s" of its group and is dropped where none is open: a queue per group, whose length
    is Lindley's recursion q = max(q + (1 if s else -1), 0), computed as the running sum less its running minimum.
    The pairs come in the file order of their "f"."""
    n = len(group)
    order = np.argsort(group, kind="stable")
    g, s = group[order], is_s[order]
    first = np.r_[True, g[1:] != g[:-1]] if n else np.zeros(0, bool)
    run = np.cumsum(first) - 1
    step = np.where(s, 1, -1)
    x = np.cumsum(step)
    x = x - (x - step)[first][run]  # the running sum within the group
    big = 2 * n + 2  # groups apart: a later group's values all lie below an earlier one's
    low = np.minimum.accumulate(x - run * big) + run * big
    q = x - np.minimum(low, 0)
    before = np.where(first, 0, np.r_[0, q[:-1]])
    ends = ~s & (before > 0)
    s_at, f_at = np.flatnonzero(s), np.flatnonzero(ends)
    s_key = g[s_at] * (n + 1) + _group_ranks(first, s)[s_at]
    f_key = g[f_at] * (n + 1) + _group_ranks(first, ends)[f_at]
    f_i, s_i = order[f_at], order[s_at[np.searchsorted(s_key, f_key)]]
    o = np.argsort(f_i)  # in the file order of the "f"s
    return f_i[o], s_i[o]


def link(pairs: list[tuple[int, tuple[Any, Any, Any], tuple[Any, Any, Any]]]) -> Links:
    """Links from (preference, task key, host key) triples, keys (pid, tid, start ns) (``link_arrays``)."""
    threads: dict[tuple[Any, Any], int] = {}
    code = np.fromiter((threads.setdefault(k[:2], len(threads)) for _, t, h in pairs for k in (t, h)), np.int64,
                       2 * len(pairs))
    start = np.fromiter((k[2] for _, t, h in pairs for k in (t, h)), np.int64, 2 * len(pairs))
    pref = np.fromiter((p for p, _, _ in pairs), np.int64, len(pairs))
    return link_arrays(pref, code[0::2], start[0::2], code[1::2], start[1::2], threads)


def link_arrays(pref: np.ndarray, task_code: np.ndarray, task_start: np.ndarray, host_code: np.ndarray,
                host_start: np.ndarray, threads: dict[tuple[Any, Any], int]) -> Links:
    """Links from pairs as arrays (threads coded by ``threads``): each task keeps its most preferred host op (the
    first in pair order among equals); ids are numbered by the tasks' start, then their tid, then their pid, as
    strings (both exports number them alike); a host op keeps the id of its first task."""
    if not len(pref):
        return Links(threads)
    keep = _firsts(task_code, task_start, pref)
    names = sorted(threads, key=lambda k: (str(k[1]), str(k[0])))
    rank = np.zeros(len(threads), np.int64)
    rank[[threads[k] for k in names]] = np.arange(len(names))
    tasks = keep[np.lexsort((rank[task_code[keep]], task_start[keep]))]
    corr = np.arange(len(tasks))
    task = _sorted(task_code[tasks], task_start[tasks], corr)
    hc, hs = host_code[tasks], host_start[tasks]
    first = _firsts(hc, hs, corr)
    return Links(threads, task, _sorted(hc[first], hs[first], corr[first]))


def _firsts(code: np.ndarray, start: np.ndarray, by: np.ndarray) -> np.ndarray:
    """Per distinct (code, start): the index of its row with the least ``by`` (the first such in row order)."""
    o = np.lexsort((by, start, code))
    c, t = code[o], start[o]
    return o[np.r_[True, (c[1:] != c[:-1]) | (t[1:] != t[:-1])]]


def _sorted(code: np.ndarray, start: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    o = np.lexsort((start, code))
    return code[o], start[o], corr[o]


def links(flows: list[Any], cats: tuple[str, ...] = CATS) -> Links:
    """Links from the flow events (structs with ph, cat, id, pid, tid, ts) of one trace_view.json, in file order: an
    "f" ends the earliest open "s" of its (cat, id) (``pair``: torch_npu ids a flow by its task's start, which two
    streams can share). ``cats``: the flows read, the preferred first. Every step after coding the keys is over arrays:
    a trace holds a flow per task."""
    kinds = {c: i for i, c in enumerate(cats)}
    flows = [f for f in flows if f.cat in kinds and f.ph in ("s", "f") and f.id is not None]
    try:
        return _links(flows, kinds)
    except TypeError:  # an id, pid or tid that is a list or an object: those flows are left out
        return _links([f for f in flows if _hashable((f.id, f.pid, f.tid))], kinds)


def queue_links(flows: list[Any]) -> Links:
    """torch_npu's task queue from its flows (``TraceEventManager.create_task_queue_flow``: an "s" at each Enqueue on
    the op's thread, an "f" at its Dequeue on the thread that launches its tasks, the pair's id theirs): each Dequeue
    (the ``task`` side) and its Enqueue (the ``host`` side) share an id, numbered from ``QUEUE_IDS`` up."""
    return as_queue(links(flows, (QUEUE_CAT,)))


def as_queue(got: Links) -> Links:
    """The same links with their ids moved to the task queue's range (``schema.QUEUE_IDS`` up)."""
    return Links(got.threads, _shift(got.task), _shift(got.host))


def _shift(table: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    code, start, corr = table
    return code, start, corr + QUEUE_IDS


def _links(flows: list[Any], kinds: dict[str, int]) -> Links:
    groups: dict[tuple[Any, Any], int] = {}
    threads: dict[tuple[Any, Any], int] = {}
    group = np.array([groups.setdefault((f.cat, f.id), len(groups)) for f in flows], np.int64)
    code = np.array([threads.setdefault((f.pid, f.tid), len(threads)) for f in flows], np.int64)
    is_s = np.array([f.ph == "s" for f in flows], bool)
    pref = np.array([kinds[f.cat] for f in flows], np.int64)
    start = ns_many([f.ts for f in flows])
    ok = np.flatnonzero(start >= 0)  # a flow end at a bad time is left out
    f_at, s_at = pair(group[ok], is_s[ok])
    f_at, s_at = ok[f_at], ok[s_at]
    return link_arrays(pref[f_at], code[f_at], start[f_at], code[s_at], start[s_at], threads)


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True
