"""Training steps of one rank from ``ProfilerStep#N`` annotations.

A step is the host ``ProfilerStep#N`` span extended to the device work it launched:
end = max(host end, end of the last kernel/memcpy/memset whose launch happened inside the
span), start = max(host start, previous step's end) so steps never overlap and a breakdown
sums to the step's wall time. A step whose host span has no duration is kept and marked
incomplete (never silently dropped).
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from rankscope.model import schema

_STEP_RE = re.compile(r"^ProfilerStep#(\d{1,15})$")  # a longer number is not a step (int64)


_LONG_STEP_RE = re.compile(r"^ProfilerStep#\d{16,}$")


def unread_steps(events: pa.Table) -> int:
    """ProfilerStep spans whose number is too long to be a step (not read as steps: said by the caller)."""
    if events.num_rows == 0:
        return 0
    names = events.column("name").combine_chunks()
    hit = np.array([bool(_LONG_STEP_RE.match(s)) for s in names.dictionary.to_pylist()] + [False])
    return int((hit[names.indices.to_numpy(zero_copy_only=False)] & _on_host(events)).sum())


def _on_host(events: pa.Table) -> np.ndarray:
    """Rows that are not Kineto's GPU copy of a host annotation (``gpu_user_annotation``)."""
    from rankscope.model.comms import _dict_mask

    return ~_dict_mask(events.column("kind"), (schema.Kind.GPU_USER_ANNOTATION.value,))


def _step_rows(events: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of the host ``ProfilerStep#N`` spans. Kineto also writes each step as a ``gpu_user_annotation``
    on the GPU's stream (seen with torch 2.11 on CUDA: the span of the step's device work), which is not a
    second step."""
    names = events.column("name").combine_chunks()
    dic = names.dictionary.to_pylist()
    num = np.array([int(m.group(1)) if (m := _STEP_RE.match(s)) else -1 for s in dic] + [-1])
    step_of = num[names.indices.to_numpy(zero_copy_only=False)]
    rows = np.flatnonzero((step_of >= 0) & _on_host(events))
    return rows, step_of[rows], np.asarray(events.column("ts"))[rows]


def device_end_per_span(events: pa.Table, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each host span [start, end): the end of device work launched inside it (-1: none)."""
    from rankscope.model.comms import _dict_mask

    corr = np.asarray(events.column("correlation"))
    ts, dur = np.asarray(events.column("ts")), np.asarray(events.column("dur"))
    dev = _dict_mask(events.column("kind"), schema.DEVICE_KINDS) & (corr >= 0)
    run = _dict_mask(events.column("kind"), ("runtime",)) & (corr >= 0)
    out = np.full(len(starts), -1, dtype=np.int64)
    if not dev.any() or not run.any():
        return out
    rc, rts = corr[run], ts[run]
    order = np.argsort(rc)
    rc, rts = rc[order], rts[order]
    dc, dend = corr[dev], ts[dev] + dur[dev]
    pos = np.clip(np.searchsorted(rc, dc), 0, len(rc) - 1)
    found = rc[pos] == dc
    launch, dend = rts[pos][found], dend[found]
    span = np.searchsorted(starts, launch, side="right") - 1
    inside = (span >= 0) & (launch < ends[np.clip(span, 0, None)])
    np.maximum.at(out, span[inside], dend[inside])
    return out


def steps(events: pa.Table) -> pa.Table:
    """The ``steps`` table of one rank."""
    if events.num_rows == 0:
        return schema.empty("steps")
    rows, nums, _ = _step_rows(events)
    if not len(rows):
        return schema.empty("steps")
    ts = np.asarray(events.column("ts"))[rows]
    dur = np.asarray(events.column("dur"))[rows]
    order = np.lexsort((nums, ts))
    rows, nums, ts, dur = rows[order], nums[order], ts[order], dur[order]
    host_end = ts + dur
    dev_end = device_end_per_span(events, ts, host_end)
    end = np.maximum(host_end, dev_end)
    start = ts.copy()
    start[1:] = np.maximum(ts[1:], end[:-1])
    end = np.maximum(end, start)
    return pa.table({"step": nums, "ts": start, "end": end, "host_end": host_end,
                     "complete": dur > 0}, schema=schema.STEPS)
