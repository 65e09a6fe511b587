"""The timed recorder's Work for gloo ops whose Work has no future (send / recv, reduce_scatter_tensor):
completion is noted when the caller's ``wait()`` returns. Split from :mod:`rankscope.collect.comms.timed_pg`."""
from __future__ import annotations

import time
from typing import Any


def finish(e: dict[str, Any], failed: bool, now: int | None = None) -> None:
    """An entry's end: completed or failed, seen at ``now`` (default: this moment)."""
    e["time_discovered_completed_ns"] = time.time_ns() if now is None else now
    e["state"] = "failed" if failed else "completed"
    e["retired"] = True


def failed(fut: Any) -> bool:
    """Whether a done future holds an error (its caller sees that error; the recorder only notes it)."""
    try:
        fut.value()
    except Exception:  # noqa: BLE001
        return True
    return False


def work_class(base: type) -> type:
    """A torch ``Work`` around a gloo Work that has neither a future nor a callback (send / recv,
    reduce_scatter_tensor):
    completion is discovered when the caller's ``wait()`` returns (or ``is_completed()`` says so),
    which is when the training thread learns of it too. Everything else is the inner Work's."""

    class TimedP2PWork(base):  # type: ignore[misc, valid-type]
        def __init__(self, inner: Any, entry: dict[str, Any], pg: Any) -> None:
            super().__init__()
            self.inner, self.entry, self.pg = inner, entry, pg

        def _mark(self, failed: bool) -> None:
            e = self.entry
            try:
                if not e["retired"]:
                    finish(e, failed)
                    if e.get("peer") == -1 and not failed:  # recv from any source: now it is known
                        src = int(self.inner._source_rank())
                        other = self.pg.members[src] if 0 <= src < len(self.pg.members) else src
                        e["peer"] = other
                        e["profiling_name"] = e["profiling_name"].rsplit("<-", 1)[0] + f"<-{other}"
            except Exception:  # noqa: BLE001 - the recorder, never the op
                self.pg.ring.warn_once()

        def wait(self, timeout: Any = None) -> bool:
            if self.entry.get("wait_started_ns") is None:
                self.entry["wait_started_ns"] = time.time_ns()  # the watchdog's clock for this op
            try:
                ok = self.inner.wait() if timeout is None else self.inner.wait(timeout)
            except BaseException:
                self._mark(failed=True)
                raise
            self._mark(failed=False)
            return bool(ok) if ok is not None else True

        def is_completed(self) -> bool:
            done = bool(self.inner.is_completed())
            if done:
                self._mark(failed=not self.inner.is_success())
            return done

        def is_success(self) -> bool:
            return bool(self.inner.is_success())

        def exception(self) -> Any:
            return self.inner.exception()

        def source_rank(self) -> int:
            return int(self.inner.source_rank())

        def _source_rank(self) -> int:
            return int(self.inner._source_rank())

        def result(self) -> Any:
            return self.inner.result()

        def synchronize(self) -> None:
            self.inner.synchronize()

        def get_future(self) -> Any:
            return self.inner.get_future()

        def abort(self) -> None:
            self.inner.abort()

    return TimedP2PWork
