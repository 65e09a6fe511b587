"""Per-step CPU scheduling of the training thread: CPU time and time spent waiting for a CPU.

A rank can be slow because it does more work, or because its host did not give it a CPU
(other processes, too many dataloader workers or OpenMP threads, a noisy neighbour on a VM).
The trace cannot tell these apart: an operator that waited for a CPU looks longer. Linux keeps,
per thread, the time spent running and the time spent runnable but waiting on a run queue
(``/proc/thread-self/schedstat``: "time on cpu (ns), time waiting on a runqueue (ns), timeslices";
see the kernel's Documentation/scheduler/sched-stats.rst). ``rankscope.profile`` reads it at
every ``step()`` (one small read, ~5 µs) and writes the per-step differences of the captured
steps into the window's metadata; the straggler analysis uses them to name CPU contention.
Elsewhere (no procfs), CPU time comes from ``time.thread_time_ns`` and the wait is unknown.
"""
from __future__ import annotations

import time

_PATH = "/proc/thread-self/schedstat"


class SchedSampler:
    """Cumulative (cpu_ns, runq_wait_ns) of the calling thread; differences via :meth:`delta`."""

    def __init__(self) -> None:
        try:
            with open(_PATH, "rb") as fh:
                self._parse(fh.read())
            self.source = "schedstat"
        except (OSError, ValueError):
            self.source = "thread_time"

    @staticmethod
    def _parse(raw: bytes) -> tuple[int, int]:
        cpu, wait = raw.split()[:2]
        return int(cpu), int(wait)

    def sample(self) -> tuple[int, int | None]:
        """Now: cumulative CPU time and run-queue wait (None where unknown) of this thread."""
        if self.source == "schedstat":
            try:
                with open(_PATH, "rb") as fh:  # thread-self: must be opened by the thread itself
                    return self._parse(fh.read())
            except (OSError, ValueError):
                self.source = "thread_time"
        return time.thread_time_ns(), None

    @staticmethod
    def delta(start: tuple[int, int | None], end: tuple[int, int | None]) -> tuple[int, int | None]:
        """CPU time and run-queue wait between two samples (wait None where unknown)."""
        wait = end[1] - start[1] if end[1] is not None and start[1] is not None else None
        return end[0] - start[0], wait
