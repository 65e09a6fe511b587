"""``rankscope.rpc.profile``: torch.profiler.profile on the caller, plus the events of every RPC it
makes, recorded on the worker that ran the call and merged on the caller's clock.

Example::

    import torch, torch.distributed.rpc as rpc, rankscope.rpc

    with rankscope.rpc.profile(record_shapes=True) as prof:
        fut = rpc.rpc_async("worker1", torch.mm, args=(a, b))   # torch's own function, patched meanwhile
        fut.wait()
    print(prof.table(sort_by="cpu_time_total", row_limit=20))   # Node ID column: local and remote ops
    prof.export_chrome_trace("rpc.json")                       # one lane per remote worker

Inside ``rankscope.profile(run=...)`` the same recording is on by default (``rpc=False`` turns it
off) and the calls go to the run directory (``ranks/<r>/rpc.<n>.json.gz``).
"""
from __future__ import annotations

from typing import Any, Iterable

from rankscope.collect.rpc import state
from rankscope.collect.rpc.calls import Recorder


def config_of(kw: dict[str, Any]) -> dict[str, Any]:
    """The options a callee profiles with: the caller's shapes, memory and stacks settings."""
    return {k: bool(kw.get(k)) for k in ("record_shapes", "profile_memory", "with_stack")}


def local_worker() -> tuple[str, int]:
    """This process's RPC worker name and id (("local", 0) before ``init_rpc``)."""
    try:
        from torch.distributed.rpc import get_worker_info

        info = get_worker_info()
        return info.name, int(info.id)
    except Exception:  # noqa: BLE001 - RPC not initialized
        return "local", 0


class profile:  # noqa: N801 - mirrors torch.profiler.profile
    """torch.profiler.profile whose RPC calls (``rpc_sync``, ``rpc_async``, ``remote``) are profiled
    on the callee with the same ``record_shapes`` / ``profile_memory`` / ``with_stack``.

    ``local=False`` records only the RPC calls (no profiler on this process). Results:
    :attr:`calls` (call records, see :mod:`rankscope.collect.rpc.calls`), :attr:`gaps` (what was not
    captured, and why), :meth:`table`, :meth:`export_chrome_trace`.
    """

    def __init__(self, *, activities: Iterable[Any] | None = None, record_shapes: bool = True,
                 profile_memory: bool = False, with_stack: bool = False, local: bool = True, **kw: Any) -> None:
        self._kw = {"activities": activities, "record_shapes": record_shapes, "profile_memory": profile_memory,
                    "with_stack": with_stack, **kw}
        self._local = local
        self.recorder = Recorder(config_of(self._kw))
        self.prof: Any = None
        self.worker, self.worker_id = "local", 0

    def start(self) -> None:
        self.worker, self.worker_id = local_worker()
        if self._local:
            import torch.profiler

            self.prof = torch.profiler.profile(**self._kw)
            self.prof.start()
            state.own_profiler(+1)
        try:
            state.activate(self.recorder)
        except BaseException:
            self._stop_local()
            raise

    def _stop_local(self) -> None:
        if self.prof is not None:
            state.own_profiler(-1)
            self.prof.stop()

    def stop(self) -> None:
        state.deactivate(self.recorder)
        self.recorder.wait()
        self._stop_local()

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def calls(self) -> list[dict[str, Any]]:
        return self.recorder.calls

    @property
    def gaps(self) -> list[str]:
        return self.recorder.gaps

    def key_averages(self) -> Any:
        """torch's key_averages of the local events (RPC's remote rows are in :meth:`table`)."""
        return self.prof.key_averages() if self.prof is not None else []

    def table(self, sort_by: str = "cpu_time_total", row_limit: int = 100) -> str:
        """``key_averages().table()`` with a Node ID column and the remote operators of every call."""
        from rankscope.collect.rpc import table

        rows = table.local_rows(self.key_averages(), self.worker_id) + table.remote_rows(self.calls)
        return table.render(rows, sort_by=sort_by, row_limit=row_limit)

    def local_events(self) -> list[dict[str, Any]]:
        """This process's CPU events ({name, ts, dur, tid}, ns since the epoch)."""
        if self.prof is None:
            return []
        return [{"name": e.name(), "ts": e.start_ns(), "dur": max(e.duration_ns(), 0), "tid": e.start_thread_id()}
                for e in self.prof.profiler.kineto_results.events() if e.device_type().name == "CPU"]

    def export_chrome_trace(self, path: str) -> None:
        """Chrome / Perfetto JSON (``.gz`` gzipped): local lanes, RPC spans, one lane per remote worker."""
        from rankscope.collect.rpc import chrome

        chrome.write(path, chrome.trace(self.local_events(), self.calls, self.worker, self.worker_id))
