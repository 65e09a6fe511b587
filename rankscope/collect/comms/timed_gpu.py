"""Start and completion of the timed recorder's collectives on a GPU, from CUDA events.

On a GPU backend (NCCL) the ``Work``'s future is marked complete when the collective is *enqueued*,
not when it ends (torch's ProcessGroupNCCL completes it right after the launch, with CUDA events
attached), so a completion callback alone would time the launch. What torch does instead, and this
module does the same way:

- a **start** event is recorded on the caller's current stream just before the call: NCCL's stream
  waits on that stream before its kernel, so the event completes when the collective can start;
- an **end** event is recorded inside the future's callback: torch runs it on a stream that waits on
  the collective's own end event, so this event completes when the collective has finished on the GPU;
- a poller (a thread, every ``POLL_S`` seconds, and every snapshot / dump / watchdog look) asks the
  events with ``query()``: a started one becomes ``started`` (``time_discovered_started_ns``), a finished
  one ``completed`` with ``time_discovered_completed_ns`` and ``duration_ms`` (the GPU's own elapsed time
  between the two events). "Discovered" as in Flight Recorder: the wall time the poller saw it, within
  ``POLL_S``; the duration is exact.

Bounded: at most ``MAX_PENDING`` entries wait for their events (oldest given up, left untimed), so a hung
GPU cannot grow memory. Nothing here may break a collective: every failure is logged once and swallowed.
"""
from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)
POLL_S = 0.1
MAX_PENDING = 4096


def _cuda_event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)


# The event factory: torch.cuda.Event. The unit tests replace it (no GPU on this project's machines).
EVENT: list[Callable[[], Any]] = [_cuda_event]


class GpuTimes:
    """The entries whose CUDA events are not both complete yet, and the thread that polls them."""

    def __init__(self) -> None:
        self.pending: collections.deque[list[Any]] = collections.deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False
        self.given_up = 0

    def start_event(self) -> Any:
        """A start event recorded on the current stream now; None when it cannot be (then the entry
        stays untimed)."""
        try:
            ev = EVENT[0]()
            ev.record()
            return ev
        except Exception:  # noqa: BLE001 - the recorder, never the collective
            self._warn()
            return None

    def on_enqueued(self, e: dict[str, Any], start: Any) -> None:
        """Called from the Work future's callback (a stream that waits on the collective): record the end
        event and hand the pair to the poller."""
        try:
            end = EVENT[0]()
            end.record()
        except Exception:  # noqa: BLE001
            self._warn()
            return
        with self._lock:
            self.pending.append([e, start, end])
            while len(self.pending) > MAX_PENDING:
                old = self.pending.popleft()
                old[0]["timed"] = False
                self.given_up += 1
        if self._thread is None:
            self._start_thread()

    def poll(self) -> int:
        """Look at every pending pair once; returns how many are still pending."""
        with self._lock:
            items = list(self.pending)
        finished = []
        now = time.time_ns()
        for item in items:
            e, start, end = item
            try:
                if e["time_discovered_started_ns"] is None and start.query():
                    e["time_discovered_started_ns"] = now
                    e["state"] = "started"
                if end.query():
                    if e["time_discovered_started_ns"] is None:
                        e["time_discovered_started_ns"] = now
                    e["duration_ms"] = float(start.elapsed_time(end))
                    e["time_discovered_completed_ns"] = now
                    e["state"], e["retired"] = "completed", True
                    finished.append(item)
            except Exception:  # noqa: BLE001 - e.g. the context is gone at exit: stop timing this one
                self._warn()
                finished.append(item)
        if finished:
            done = {id(x) for x in finished}
            with self._lock:
                self.pending = collections.deque(x for x in self.pending if id(x) not in done)
        return len(self.pending)

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="rankscope-comms-gpu-poll", daemon=True)
            self._thread.start()
        # stopped and joined before the interpreter tears CUDA down (a daemon thread inside a CUDA call
        # during teardown can abort the process)
        atexit.register(self.stop)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - never the job
                self._warn()

    def stop(self) -> None:
        self._stop.set()
        t, self._thread = self._thread, None
        if t is not None and t is not threading.current_thread():
            t.join(timeout=2)

    def _warn(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning("rankscope: timing a collective with CUDA events failed (the collective ran)", exc_info=True)


GPU = GpuTimes()
