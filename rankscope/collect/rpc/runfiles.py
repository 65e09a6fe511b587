"""RPC recording inside ``rankscope.profile``: on while a window records, saved with the run.

The calls of a profile go to ``ranks/<rank>/rpc.<n>.json.gz`` (:func:`rankscope.store.layout.rpc_rel`)::

    {"format": "rankscope.rpc/1", "rank": 0, "worker": "worker0", "worker_id": 0,
     "calls": [call records, see rankscope.collect.rpc.calls], "gaps": ["what was not captured"]}
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
RPC_FORMAT = "rankscope.rpc/1"


def hold(delta: int) -> None:
    """Tell this process's RPC callee that a rankscope profile runs torch's profiler here (+1 / -1):
    it then answers calls for others unprofiled (:func:`rankscope.collect.rpc.state.own_profiler`)."""
    try:
        from rankscope.collect.rpc import state
    except Exception:  # noqa: BLE001 - no torch.distributed.rpc in this build: no callee either
        return
    state.own_profiler(delta)


def start(kw: dict[str, Any]) -> Any:
    """A recorder made active for this process, or None (no torch RPC here, or another RPC profile on)."""
    try:
        import torch.distributed.rpc as rpc

        if not rpc.is_available():
            return None
        from rankscope.collect.rpc import state
        from rankscope.collect.rpc.calls import Recorder
        from rankscope.collect.rpc.session import config_of

        rec = Recorder(config_of(kw))
        state.activate(rec)
        return rec
    except Exception as exc:  # noqa: BLE001 - RPC profiling is never a reason to fail the job
        log.warning("rankscope: RPC calls are not profiled in this run (%s)", exc)
        return None


def stop(rec: Any, collector: Any) -> dict[str, Any] | None:
    """Restore torch's RPC functions; the document saved to the run (None when there was nothing)."""
    from rankscope.collect.rpc import state
    from rankscope.collect.rpc.session import local_worker

    state.deactivate(rec)
    rec.wait(10.0)
    if not rec.calls and not rec.gaps:
        return None
    worker, wid = local_worker()
    doc = {"format": RPC_FORMAT, "rank": collector.ident.rank if collector is not None else None,
           "worker": worker, "worker_id": wid, "calls": rec.calls, "gaps": rec.gaps}
    if collector is not None:
        try:
            collector.add_rpc(doc)
        except Exception as exc:  # noqa: BLE001 - the calls are lost, never the job
            log.warning("rankscope: the RPC calls could not be saved (%s: %s)", type(exc).__name__, exc)
    return doc
