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
kinds of flow is linked to the torch op (on the training thread, which the critical path follows).
"""
from __future__ import annotations

from dataclasses import dataclass, field
import zlib
from typing import Any

import numpy as np

CATS = ("async_npu", "HostToDevice")  # preferred first
GROUP_STREAMS = 1 << 30  # HCCL operations' lanes: one per group, above any hardware stream id (and within int32)


def ns_many(ts: list[Any]) -> np.ndarray:
    """``ns`` of many timestamps at once (-1 where bad): the links' keys, parsed in one pass."""
    try:
        v = np.array(ts, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        return np.array([-1 if (t := ns(x)) is None else t for x in ts], np.int64)
    ok = np.isfinite(v) & (np.abs(v) < 1e16)
    return np.where(ok, np.rint(v * 1000), -1).astype(np.int64)


def ns(ts: Any) -> int | None:
    """A trace_view timestamp (µs, a number or a decimal string) in ns, as the same string always gives; None if bad."""
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
    """(pid, tid, start ns) of a task or of a host op -> correlation id."""

    task: dict[tuple[Any, Any, Any], int] = field(default_factory=dict)
    host: dict[tuple[Any, Any, Any], int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.task)


def link(pairs: list[tuple[int, tuple[Any, Any, Any], tuple[Any, Any, Any]]]) -> Links:
    """Links from (preference, task key, host key) triples, keys (pid, tid, ``key`` of the start): each task keeps its
    most preferred host op; ids are numbered by the tasks' start (then stream), so both exports number them alike."""
    best: dict[tuple[Any, Any, Any], tuple[int, tuple[Any, Any, Any]]] = {}
    for pref, task, host in pairs:
        if task not in best or pref < best[task][0]:
            best[task] = (pref, host)
    out = Links()
    for corr, task in enumerate(sorted(best, key=lambda k: (k[2], str(k[1])))):
        out.task[task] = corr
        out.host.setdefault(best[task][1], corr)
    return out


def links(flows: list[Any]) -> Links:
    """Links from the flow events (structs with ph, cat, id, pid, tid, ts) of one trace_view.json, in file order: an
    "f" ends the earliest open "s" of its id (torch_npu ids a flow by its task's start, which two streams can share)."""
    flows = [f for f in flows if f.cat in CATS and f.id is not None and not isinstance(f.id, (dict, list))]
    open_: dict[tuple[Any, Any], list[tuple[Any, Any, Any]]] = {}
    pairs: list[tuple[int, tuple[Any, Any, Any], tuple[Any, Any, Any]]] = []
    for f, t in zip(flows, ns_many([f.ts for f in flows]).tolist()):
        if t < 0:
            continue
        if f.ph == "s":
            open_.setdefault((f.cat, f.id), []).append((f.pid, f.tid, t))
        elif got := open_.get((f.cat, f.id)):
            pairs.append((CATS.index(f.cat), (f.pid, f.tid, t), got.pop(0)))
    return link(pairs)
