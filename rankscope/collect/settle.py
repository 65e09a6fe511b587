"""Before torch's profiler stops, let the process group's worker threads write their last event.

gloo completes a collective's future and only then ends its RecordFunction on its worker thread
(``pt_gloo_runloop``): DDP, waiting on the future, can reach ``prof.step()`` and stop the profiler while that
thread still writes into the profiler's per-thread queues, which the stop reads. On torch 2.13 (CPU) that corrupts
the heap (a rank's SIGABRT, "free(): invalid pointer"; tests/e2e/test_collect_torchrun.py, measured in
docs/collect.md). So before a step that stops the profiler, and before ``stop()``, :func:`settle` waits until no
such thread is runnable ("R" in ``/proc/self/task/*/stat``), at most ``MAX_WAIT_S``; a blocked worker is past its
end callback. Linux only (elsewhere it returns at once); a few looks of tens of microseconds, at a window's end.
"""
from __future__ import annotations

import os
import time
from typing import Any

WORKERS = frozenset({"pt_gloo_runloop"})  # c10d's gloo worker threads (ProcessGroupGloo::runLoop)
MAX_WAIT_S = 0.1
POLL_S = 0.0005


def runnable_workers(names: frozenset[str] = WORKERS) -> int:
    """How many of this process's threads named in ``names`` are runnable (state "R") now."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    n = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # the thread ended
            continue
        name, _, rest = stat.partition(b"(")[2].rpartition(b")")
        if name.decode(errors="replace") in names and rest.split()[:1] == [b"R"]:
            n += 1
    return n


def settle(max_wait_s: float = MAX_WAIT_S, names: frozenset[str] = WORKERS) -> tuple[float, bool]:
    """Wait until no worker thread in ``names`` is runnable, at most ``max_wait_s``; (seconds waited, settled)."""
    t0 = time.monotonic()
    while runnable_workers(names):
        waited = time.monotonic() - t0
        if waited >= max_wait_s:
            return waited, False
        time.sleep(POLL_S)
    return time.monotonic() - t0, True


def stops_next(prof: Any) -> bool:
    """True when torch profiler ``prof``'s next ``step()`` stops its trace (its own action map says so)."""
    try:
        prev = prof.current_action
        nxt = prof.schedule(prof.step_num + 1)
        return any(a == prof.stop_trace for a in prof.action_map.get((prev, nxt), ()))
    except Exception:  # noqa: BLE001 - another backend's profiler (torch_npu): no wait, as before
        return False


class Settler:
    """Waits before the profiler's stops and counts them for meta.json (``stop_settle``)."""

    def __init__(self) -> None:
        self.stops, self.max_ms, self.ran_out = 0, 0.0, 0

    def __call__(self, prof: Any, collector: Any, stopping: bool = False) -> None:
        """Before ``prof.step()`` (a wait only where that step stops the trace) or, with ``stopping``, ``prof.stop()``."""
        try:
            if not (stopping or stops_next(prof)):
                return
            waited, ok = settle()
            self.stops += 1
            self.max_ms = max(self.max_ms, waited * 1e3)
            self.ran_out += not ok
            if collector is not None:
                collector.extra["stop_settle"] = {"stops": self.stops, "waited_ms_max": round(self.max_ms, 3),
                                                  "ran_out": self.ran_out, "max_wait_ms": MAX_WAIT_S * 1e3}
        except Exception:  # noqa: BLE001 - never the job
            return
