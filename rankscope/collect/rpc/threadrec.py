"""The callee's recorder of one call: torch's thread-local (legacy) profiler, on the RPC thread only.

Pattern: what torch's own RPC server did for a profiled request (``enableProfilerLegacy`` on the
thread that runs it). It adds RecordFunction callbacks to this thread and never touches Kineto,
whose activity profiler is one per process: a ``torch.profiler`` session started for a call
preempted the process's own session (Kineto cancels the active trace when a new synchronous one is
prepared) and reset it, and the process's own stop then crashed in Kineto (SIGSEGV); the first
Kineto start on an RPC thread also printed "External init callback must run in same thread as
registerClient". docs/rpc.md has the whole story.

Algorithm: push / pop records paired by handle; times are the first ``__start_profile`` mark's (µs
since the epoch: the clock of ``time.time_ns()``) plus each record's distance from it; only the thread
that ran the call's span is kept, with self time and depth (:func:`with_self_time`).

While the function sends an RPC of its own (nested RPC) the recorder is paused (:func:`paused`): torch
wraps a request sent from a thread that runs the legacy profiler for its own remote profiling, which
then fails in C++ ("Must set currentThreadLocalKey_ before calling getCurrentProfilingKey") unless
torch's Python side set it up, and would make the next worker refuse to record the call for us. The
records of the segments are joined; an op open at a pause ends at that pause.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Iterator

log = logging.getLogger(__name__)
_MEMORY = "[memory]"
_ON = threading.local()  # .rec: the recorder running on this thread


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pause this thread's recorder, if one runs, for the time of the block (see the module docstring)."""
    rec = getattr(_ON, "rec", None)
    if rec is None or not rec.on:
        yield
        return
    rec.pause()
    try:
        yield
    finally:
        rec.resume()


class ThreadRecorder:
    """Record the ops of this thread between :meth:`start` and :meth:`stop` (``config``: the caller's
    ``record_shapes`` / ``profile_memory`` / ``with_stack``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.records: list[Any] = []
        self.on = False

    def start(self) -> None:
        """Raises (RuntimeError) when a profiler is enabled on this thread already."""
        import torch
        from torch.autograd import ProfilerConfig, ProfilerState, _enable_profiler_legacy

        cfg = ProfilerConfig(ProfilerState.CPU, bool(self.config.get("record_shapes")),
                             bool(self.config.get("profile_memory")), bool(self.config.get("with_stack")),
                             False, False, torch._C._profiler._ExperimentalConfig())
        _enable_profiler_legacy(cfg)
        self.on = True
        _ON.rec = self

    def pause(self) -> None:
        """Never raises: a recorder that cannot be read leaves the records it has."""
        from torch.autograd import _disable_profiler_legacy

        if not self.on:
            return
        self.on = False
        try:
            self.records += [e for lst in _disable_profiler_legacy() for e in lst]
        except Exception as exc:  # noqa: BLE001 - the call's result matters more than its events
            log.warning("rankscope: the events of an RPC call could not be read (%s: %s)", type(exc).__name__, exc)

    def resume(self) -> None:
        """After :meth:`pause`; a recorder that cannot start again stays off (the call runs on)."""
        try:
            self.start()
        except Exception as exc:  # noqa: BLE001 - e.g. the function enabled a profiler meanwhile
            log.warning("rankscope: an RPC call is recorded only in part (%s: %s)", type(exc).__name__, exc)
            _ON.rec = None

    def stop(self) -> None:
        """Never raises (see :meth:`pause`)."""
        self.pause()
        _ON.rec = None

    def events(self, label: str, shift_ns: int = 0) -> list[dict[str, Any]]:
        """The events of the thread that ran ``label``: {name, ts, dur[, shapes][, bytes]} in ns on
        this worker's clock (plus ``shift_ns``), sorted, with ``self`` and ``depth``."""
        return with_self_time(events_of(self.records, label, shift_ns))


def events_of(records: list[Any], label: str, shift_ns: int = 0) -> list[dict[str, Any]]:
    """Pair the legacy records of one or more segments (see the module docstring)."""
    marks = [e for e in records if e.kind() == "mark"]
    first = next((e for e in marks if e.name() == "__start_profile"), None)
    if first is None:
        return []
    base = round(first.start_us() * 1000) + shift_ns
    at = lambda e: base + round(first.cpu_elapsed_us(e) * 1000)  # noqa: E731 - relative: exact in a double
    stops = sorted(at(e) for e in marks if e.name() == "__stop_profile")
    tid = next((e.thread_id() for e in records if e.kind() == "push" and e.name() == label), None)
    ends = {e.handle(): at(e) for e in records if e.kind() == "pop"}
    out: list[dict[str, Any]] = []
    for e in records:
        if e.thread_id() != tid or e.is_remote():  # remote: torch's own RPC profiling of a pre-bound call
            continue
        if e.kind() == "push":
            ts = at(e)
            end = ends.get(e.handle()) or next((t for t in stops if t >= ts), ts)
            d: dict[str, Any] = {"name": e.name(), "ts": ts, "dur": max(end - ts, 0)}
            shapes = [list(s) for s in e.shapes()]
            if any(shapes):
                d["shapes"] = shapes
            out.append(d)
        elif e.kind() == "memory_alloc":
            out.append({"name": _MEMORY, "ts": at(e), "dur": 0, "bytes": int(e.cpu_memory_usage())})
    out.sort(key=lambda d: (d["ts"], -d["dur"]))
    return out


def with_self_time(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add ``self`` (duration minus direct children) and ``depth`` to events of one thread sorted by
    (start, longest first). A callee's events are few (one call), so a plain stack walk is enough."""
    stack: list[dict[str, Any]] = []
    for e in events:
        e["self"] = e["dur"]
        while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
            stack.pop()
        if stack and e["dur"] > 0:
            stack[-1]["self"] -= e["dur"]
        e["depth"] = len(stack)
        if e["dur"] > 0:
            stack.append(e)
    for e in events:
        e["self"] = max(e["self"], 0)
    return events
