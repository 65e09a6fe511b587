"""step_trace_time.csv rows from trace_view.json's "Overlap Analysis" layer, as torch_npu computes them.

torch_npu writes step_trace_time.csv beside trace_view.json; where a copy of a run lacks it, the
same rows are derived here from the trace, following torch_npu 2.14.0's writer:

- prof_parse/_fwk_cann_relation_parser.py ``get_step_range``: a ProfilerStep#N's range on the device
  starts at the first kernel launched inside the step (the ops' correlation ids in order; here the
  ``torch_to_npu`` flows that start inside the step's host span) and ends at the later of the last
  such kernel's end and the step's host end; its framework start is the step's host start;
- prof_view/_trace_step_time_parser.py ``create_step_file``: each Computing / Communication /
  Communication(Not Overlapped) / Free event of the layer, and each ``hcom_receive*`` on an NPU
  layer (the bubble), adds its duration to the first step whose range holds its start; the step's
  end-to-end span runs from the first to the last of those events. Overlapped = Communication - Not
  Overlapped; Stage = end-to-end - Bubble; Not Overlapped and Exclude Receive = max(Not Overlapped -
  Bubble, 0); Preparing = first Computing / Communication start - framework start.

Times are µs floats added in trace order, as torch_npu does, so the values agree to the last digit
(checked against torch_npu's own parser on a real trace: tests/golden/test_ascend_real_outputs.py).
A trace without ProfilerStep spans gives one row with an empty Step, as torch_npu writes it.
"""
from __future__ import annotations

import bisect
import json
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from rankscope.model.schema import STEP_TIMES

LAYER = {"Communication": "comun", "Computing": "compute", "Free": "free",
         "Communication(Not Overlapped)": "comunNotOverlp"}
COLUMNS = ["Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage", "Bubble",
           "Communication(Not Overlapped and Exclude Receive)", "Preparing"]


class _Ev(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    cat: Any = None
    args: Any = None


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Ev] = []


def _events(data: bytes) -> list[_Ev]:
    try:
        return msgspec.json.decode(data, type=list[_Ev])
    except msgspec.DecodeError:
        return msgspec.json.decode(data, type=_Doc).traceEvents


def _ns(v: Any) -> int | None:
    try:
        return int(Decimal(str(v)) * 1000)
    except (InvalidOperation, ValueError, TypeError):
        return None


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def step_ranges(evs: list[_Ev], npu: set[Any]) -> list[list[Any]]:
    """[step id, device start µs, end µs, e2e start, e2e end, framework start µs, first task] per step."""
    kernels = {(e.pid, e.tid, str(e.ts)): e for e in evs if e.ph == "X" and e.pid in npu}
    starts = {e.id: _ns(e.ts) for e in evs if e.ph == "s" and e.cat == "async_npu"}
    launched: dict[Any, list[_Ev]] = {}
    for e in evs:
        k = kernels.get((e.pid, e.tid, str(e.ts))) if e.ph == "f" and e.cat == "async_npu" else None
        if k is not None and e.id in starts:
            launched.setdefault(e.id, []).append(k)
    # launch times in order, searched per step (not every flow scanned for every step)
    by_time = sorted((t, i) for i, t in starts.items() if t is not None and i in launched)
    times = [t for t, _ in by_time]
    out = []
    for e in evs:
        if not (e.ph == "X" and e.pid not in npu and str(e.name).startswith("ProfilerStep#")):
            continue
        lo, dur = _ns(e.ts), _float(e.dur)
        if lo is None or dur is None:
            continue
        hi = lo + int(round(dur * 1000))
        ids = sorted(i for _, i in by_time[bisect.bisect_left(times, lo):bisect.bisect_right(times, hi)])
        if not ids:
            continue  # torch_npu: "There is no flow events in ProfilerStep#N range", no row
        first = min(_ns(k.ts) or 0 for k in launched[ids[0]])
        last = max((_ns(k.ts) or 0) + int(round((_float(k.dur) or 0.0) * 1000)) for k in launched[ids[-1]])
        out.append([str(e.name).split("#")[-1], first / 1000, max(last, hi) / 1000, -1, -1, lo / 1000, -1])
    return out


def rows(evs: list[_Ev]) -> list[tuple[str, dict[str, float]]]:
    """(step, {column: µs}) per step, in step order (see the module docstring)."""
    npu = {e.pid for e in evs if e.ph == "M" and e.name == "process_labels" and isinstance(e.args, dict)
           and str(e.args.get("labels", "")).startswith("NPU")}
    steps = step_ranges(evs, npu)
    named = bool(steps)
    if not named:
        host = [ns for e in evs if e.ph == "X" and e.pid not in npu and (ns := _ns(e.ts)) is not None]
        steps = [["", -1, -1, -1, -1, min(host) / 1000 if host else 0.0, -1]]
    sums: dict[str, dict[str, float]] = {}
    for e in evs:
        kind: str | None = LAYER.get(e.name) if e.ph == "X" and e.pid in npu else None
        if kind is None and e.pid in npu and str(e.name).startswith("hcom_receive"):
            kind = "bubble"
        start, dur = (_float(e.ts), _float(e.dur)) if kind else (None, None)
        if kind is None or start is None or dur is None:
            continue
        step = steps[0] if not named else next((s for s in steps if s[1] <= start < s[2]), None)
        if step is None:
            continue  # torch_npu counts it under step None, which it leaves out when steps exist
        if start < step[3] or step[3] == -1:
            step[3] = start
        if start + dur > step[4] or step[4] == -1:
            step[4] = start + dur
        if kind in ("comun", "compute") and (start < step[6] or step[6] == -1):
            step[6] = start
        acc = sums.setdefault(step[0], dict.fromkeys(("compute", "comunNotOverlp", "comun", "free", "bubble"), 0))
        acc[kind] += dur
    out = []
    for s in steps:
        t = sums.get(s[0])
        if t is None:
            continue
        out.append((s[0], {"Computing": t["compute"], "Communication(Not Overlapped)": t["comunNotOverlp"],
                           "Overlapped": t["comun"] - t["comunNotOverlp"], "Communication": t["comun"],
                           "Free": t["free"], "Stage": (s[4] - s[3]) - t["bubble"], "Bubble": t["bubble"],
                           "Communication(Not Overlapped and Exclude Receive)": max(t["comunNotOverlp"] - t["bubble"], 0),
                           "Preparing": s[6] - s[5]}))
    return sorted(out, key=lambda r: int(r[0]) if r[0].lstrip("-").isdigit() else -1)


def step_times(path: Path) -> pa.Table:
    """The ``step_times`` table (as read from step_trace_time.csv) derived from ``path`` (trace_view.json);
    empty when the trace has no Overlap Analysis events."""
    got = rows(_events(Path(path).read_bytes()))
    data = [(step, json.dumps({c: repr(v[c]) for c in COLUMNS})) for step, v in got]  # as csv.writer writes them
    return pa.table(list(map(list, zip(*data))) if data else [[]] * 2, schema=STEP_TIMES)
