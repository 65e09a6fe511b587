"""Trace export off the training thread.

At the end of a window torch has already stopped the profiler (``stop_trace``: its own event
post-processing, on the training thread, for every handler); what is left is writing the
Kineto JSON (``export_chrome_trace`` -> ``_ProfilerResult.save``). That call holds no Python
lock while it writes (measured on torch 2.13: the main thread kept running with at most
0.05 ms gaps during a 15 MB save), and it only reads the result object it belongs to: the
next profiling session builds a new one, and Kineto's trace base time is set once per process.
So :class:`Exporter` keeps a reference to the window's result object and saves it on one
background thread, in window order (optionally at a lower CPU priority: ``UploadConfig.nice``).
Verified on torch 2.13 (CPU): 20 back-to-back windows of 30k events each, every save
overlapping the next session, all complete and unmixed. A result can be saved only once
("Trace is already saved"), so nothing else may export it:
``rankscope.profile.export_chrome_trace`` copies the spooled file instead.

Falls back to exporting on the calling thread when the backend has no detachable Kineto
result (torch_npu, the CUPTI-monitor path, a profiler built without Kineto).
"""
from __future__ import annotations

import os
import queue
import threading
import warnings
from typing import Any, Callable

from rankscope.store.spool import RankscopeWarning
from rankscope.store.uploader import lower_thread_priority


def detach_result(prof: Any) -> Any | None:
    """The Kineto result object of ``prof``'s finished window, if it can be saved from another thread."""
    if getattr(prof, "_use_cupti_monitor", False):
        return None
    inner = getattr(prof, "profiler", None)
    result = getattr(inner, "kineto_results", None)
    if result is None or not callable(getattr(result, "save", None)):
        return None
    if type(prof).__module__.split(".")[0] != "torch":  # torch_npu and others: their own export path
        return None
    return result


class Exporter:
    """One background thread running export jobs in order (saves of detached results, spool writes).

    Nothing here touches the disk on the training thread: under a heavy write load, even a
    small local write can stall for a long time in the kernel's dirty-page throttling.
    """

    def __init__(self, done: Callable[[str], None], failed: Callable[[str, BaseException], None],
                 nice: int = 0) -> None:
        self.nice = nice
        self._q: queue.Queue[Callable[[], Any] | None] = queue.Queue()
        self._done, self._failed = done, failed
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def call(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` on the export thread after the jobs already queued; returns at once."""
        with self._lock:
            self._pending += 1
            self._idle.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="rankscope-export", daemon=True)
                self._thread.start()
        self._q.put(fn)

    def submit(self, result: Any, path: str, rel: str) -> None:
        """Queue ``result.save(path)`` then ``done(rel)``; returns at once."""
        box = [result]

        def job() -> None:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                box.pop().save(path)  # the (large) result is freed here, not on the training thread
            except BaseException as exc:  # noqa: BLE001 - reported, never raised into a daemon thread
                self._failed(rel, exc)
                return
            self._done(rel)

        self.call(job)

    def _work(self) -> None:
        lower_thread_priority(self.nice)
        while True:
            job = self._q.get()
            if job is None:
                return
            try:
                job()
            except BaseException as exc:  # noqa: BLE001 - a failed job must not end the thread
                warnings.warn(f"rankscope: background export job failed ({type(exc).__name__}: {exc})",
                              RankscopeWarning, stacklevel=1)
            finally:
                with self._lock:
                    self._pending -= 1
                    if self._pending == 0:
                        self._idle.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until every queued job has run; False on timeout."""
        return self._idle.wait(timeout_s)

    def close(self, timeout_s: float | None = None) -> bool:
        """Wait (bounded) for queued jobs, then end the thread."""
        ok = self.wait(timeout_s)
        if self._thread is not None:
            self._q.put(None)
            if ok:
                self._thread.join(timeout=1.0)
        return ok


def warn_failed(rel: str, exc: BaseException) -> None:
    """Default failure report: one warning per failed window."""
    warnings.warn(f"rankscope: exporting {rel} failed ({type(exc).__name__}: {exc}); window lost",
                  RankscopeWarning, stacklevel=2)
