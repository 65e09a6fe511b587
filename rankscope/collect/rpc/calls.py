"""Sending a profiled RPC and merging its reply: one call record per call, on the caller's clock.

A call record is plain JSON-able data::

    {"kind": "rpc_async", "name": "rpc_async#mm(worker0 -> worker1)", "fn": "mm",
     "src": "worker0", "src_id": 0, "dst": "worker1", "dst_id": 1, "tid": 1234,
     "t_send": ..., "t_done": ...,                  # caller clock (ns since the epoch)
     "t_recv_remote": ..., "t_reply_remote": ...,   # callee clock
     "offset_ns": ..., "error_ns": ..., "remote_ns": ..., "network_ns": ...,
     "status": "ok" | "error", "gap": None | "why the callee's events are missing",
     "depth": 0,                                    # 1 for a call the callee made (nested RPC)
     "events": [{"name", "ts", "dur", "self", "depth", "worker", "worker_id", ...}]}

Event ``ts`` are on the caller's clock: the callee's time minus the call's offset
(:mod:`.offset`); a nested call's events get its parent's offset as well.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from typing import Any, Callable

import torch

from rankscope.collect.rpc import callee, state, threadrec
from rankscope.collect.rpc.offset import estimate

_KEYS = itertools.count()


def torch_rpc(name: str) -> Callable[..., Any]:
    """torch's ``rpc_sync`` / ``rpc_async`` / ``remote``, sent with this thread's call recorder paused
    (a nested call from a callee: :func:`rankscope.collect.rpc.threadrec.paused` says why)."""
    fn = state.TORCH[name]

    def call(*args: Any) -> Any:
        with threadrec.paused():
            return fn(*args)
    return call


class Recorder:
    """Collects the call records of one profile (or of one profiled call on a callee: ``nested``)."""

    def __init__(self, config: dict[str, Any], *, nested: bool = False) -> None:
        self.config = dict(config)
        self.nested = nested
        self.enabled = True
        self.calls: list[dict[str, Any]] = []
        self.gaps: list[str] = []
        self.pending: list[Any] = []
        self._capable: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def add(self, call: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append(call)

    def note(self, gap: str) -> None:
        with self._lock:
            if gap not in self.gaps:
                self.gaps.append(gap)

    def wait(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded) for the events of ``remote()`` calls still being fetched."""
        deadline = time.monotonic() + timeout_s
        # a remote() call's creation future adds the fetch of its events when it completes: look again
        while any(not f.done() for f in list(self.pending)) and time.monotonic() < deadline:
            time.sleep(0.005)
        left = sum(not f.done() for f in self.pending)
        if left:
            self.note(f"{left} remote() calls: their events did not arrive within {timeout_s:.0f} s")
        self.pending.clear()

    def why_not(self, dst: Any) -> str | None:
        """None when ``dst`` can run profiled calls (asked once per worker), else why not."""
        if dst.name not in self._capable:
            try:
                torch_rpc("rpc_sync")(dst, callee.probe, None, None, 30.0)
                self._capable[dst.name] = None
            except Exception as exc:  # noqa: BLE001 - an older rankscope, or none, on the callee
                self._capable[dst.name] = (f"{dst.name} cannot run profiled calls ({type(exc).__name__}: "
                                           f"{str(exc).splitlines()[0] if str(exc) else ''}"[:200] + ")")
        return self._capable[dst.name]


def _start(rec: Recorder, kind: str, to: Any, func: Callable[..., Any]) -> tuple[dict[str, Any] | None, Any]:
    """The call record to fill, or None (and why, noted) when this call goes out unprofiled."""
    from torch.distributed.rpc import get_worker_info

    dst = _api_worker(to)
    if isinstance(func, torch.jit.ScriptFunction) or hasattr(func, "_wrapped_async_rpc_function"):
        rec.note(f"{kind} of {state.fn_name(func)}: TorchScript and @async_execution functions are not profiled")
        return None, dst
    why = rec.why_not(dst)
    if why is not None:
        rec.note(why)
        rec.add(_gap_call(kind, func, dst, why))
        return None, dst
    me = get_worker_info()
    name = f"{kind}#{state.fn_name(func)}({me.name} -> {dst.name})"
    return {"kind": kind, "name": name, "fn": state.fn_name(func), "src": me.name, "src_id": me.id,
            "dst": dst.name, "dst_id": dst.id, "tid": threading.get_native_id(),
            "depth": 1 if rec.nested else 0}, dst


def _api_worker(to: Any) -> Any:
    from torch.distributed.rpc.api import _to_worker_info

    return _to_worker_info(to)


def _gap_call(kind: str, func: Any, dst: Any, why: str) -> dict[str, Any]:
    now = time.time_ns()
    return {"kind": kind, "name": f"{kind}#{state.fn_name(func)}", "fn": state.fn_name(func), "dst": dst.name,
            "dst_id": dst.id, "t_send": now, "t_done": now, "status": "unprofiled", "gap": why, "events": []}


def send(rec: Recorder, kind: str, to: Any, func: Callable[..., Any], args: Any, kwargs: Any,
         timeout: float) -> Any:
    """``rpc_async`` of ``callee.run_profiled``: a future of the function's own result (or its error)."""
    call, dst = _start(rec, kind, to, func)
    if call is None:
        return torch_rpc("rpc_async")(dst, func, args, kwargs, timeout)
    payload = (func, tuple(args or ()), dict(kwargs or {}), rec.config)
    # The caller's span (a record_function) ends when the reply is merged, on the thread that merges
    # it, as torch's own RPC spans do. Not with record_function._call_end_callbacks_on_future: on
    # torch 2.13 its future hands an exception back as a value instead of raising it.
    span = torch.ops.profiler._record_function_enter_new(call["name"], None)
    call["t_send"] = _now(rec)
    try:
        fut = torch_rpc("rpc_async")(dst, callee.run_profiled, payload, None, timeout)
    except BaseException:
        torch.ops.profiler._record_function_exit._RecordFunction(span)
        raise
    return _settle(fut, lambda f: _finish(rec, call, _reply(rec, call, f), _now(rec)),
                   lambda: torch.ops.profiler._record_function_exit._RecordFunction(span))


def _reply(rec: Recorder, call: dict[str, Any], fut: Any) -> Any:
    """The callee's Reply; a call that failed as an RPC (timeout, lost connection) is recorded, then
    its error goes to the caller as torch raised it."""
    try:
        return fut.value()
    except BaseException as exc:
        call.update(t_done=_now(rec), status="error", gap=f"the RPC failed ({type(exc).__name__})", events=[])
        rec.add(call)
        raise


def _settle(fut: Any, merge: Callable[[Any], Any], end: Callable[[], Any]) -> Any:
    """A future of ``merge(fut)``: its value, or its exception object unchanged (``Future.then``
    would wrap an exception raised by the callback in a RuntimeError). ``end`` runs first."""
    out: Any = torch.futures.Future()

    def done(f: Any) -> None:
        try:
            value = merge(f)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's wait() as it is
            end()
            out.set_exception(exc)
            return
        end()
        out.set_result(value)

    fut.add_done_callback(done)
    return out


def send_remote(rec: Recorder, to: Any, func: Callable[..., Any], args: Any, kwargs: Any, timeout: float) -> Any:
    """``remote`` of ``callee.run_remote``: the RRef holds the function's own result; the events are
    fetched from the owner once it has run the function."""
    call, dst = _start(rec, "remote", to, func)
    if call is None:
        return torch_rpc("remote")(dst, func, args, kwargs, timeout)
    key = f"{call['src']}:{os.getpid()}:{next(_KEYS)}"
    call["t_send"] = _now(rec)
    rref = torch_rpc("remote")(dst, callee.run_remote, (func, tuple(args or ()), dict(kwargs or {}),
                                                        rec.config, key), None, timeout)

    def created(f: Any) -> None:
        t_done = _now(rec)
        taken = torch_rpc("rpc_async")(dst, callee.take, (key,), None, 30.0)
        rec.pending.append(taken.then(lambda g: _finish(rec, call, g.value(), t_done, raise_=False)))

    rec.pending.append(rref._get_future().then(created))
    return rref


def _now(rec: Recorder) -> int:
    # a nested call is timed on the callee's (possibly shifted) clock, like the callee's events
    return callee.now_ns() if rec.nested else time.time_ns()


def _finish(rec: Recorder, call: dict[str, Any], reply: Any, t_done: int, raise_: bool = True) -> Any:
    """Merge ``reply`` into ``call`` and record it; return the function's result or raise its error."""
    call["t_done"] = t_done
    if not isinstance(reply, callee.Reply):
        call.update(status="unprofiled", gap="the owner kept no events for this remote() call", events=[])
        rec.add(call)
        return reply
    from torch.distributed.rpc.internal import RemoteException

    est = estimate(call["t_send"], reply.t_recv, reply.t_reply, t_done)
    failed = isinstance(reply.result, RemoteException)
    call.update(t_recv_remote=reply.t_recv, t_reply_remote=reply.t_reply, offset_ns=est.offset_ns,
                error_ns=est.error_ns, remote_ns=est.remote_ns, network_ns=est.network_ns,
                status="error" if failed else "unprofiled" if reply.gap else "ok", gap=reply.gap,
                events=place(reply.events, est.offset_ns, reply.worker, reply.worker_id))
    if reply.gap:
        rec.note(f"{reply.worker}: {reply.gap}")
    for sub in reply.nested:  # calls the callee made: shift their times onto this caller's clock too
        rec.add(shift_call(sub, est.offset_ns, 1 if rec.nested else 0))
        if sub.get("gap"):
            rec.note(f"nested {sub.get('name', '')}: {sub['gap']}")
    rec.add(call)
    if raise_ and failed:
        plain_error(reply.result)
    return reply.result


def plain_error(remote: Any) -> None:
    """Raise what a plain RPC raises for the callee's ``RemoteException``: the remote type, with the
    message torch's C++ future gives it ("ValueError: On WorkerInfo(...)" and the remote traceback)."""
    from torch.distributed.rpc.internal import _handle_exception

    try:
        _handle_exception(remote)
    except Exception as exc:  # noqa: BLE001 - re-raised as torch's future would
        try:
            again = type(exc)(f"{type(exc).__name__}: {exc}")
        except Exception:  # noqa: BLE001 - a type that cannot be built from one string
            raise exc from None
        raise again from None


def place(events: list[dict[str, Any]], offset_ns: int, worker: str, worker_id: int) -> list[dict[str, Any]]:
    """Callee events on the caller's clock, marked with the worker that ran them."""
    return [{**e, "ts": e["ts"] - offset_ns, "worker": worker, "worker_id": worker_id} for e in events]


def shift_call(call: dict[str, Any], offset_ns: int, deeper: int = 0) -> dict[str, Any]:
    """A nested call record moved from the callee's clock to the caller's (``deeper``: levels added)."""
    out = {**call, "t_send": call["t_send"] - offset_ns, "t_done": call["t_done"] - offset_ns}
    out["events"] = [{**e, "ts": e["ts"] - offset_ns} for e in call.get("events", [])]
    out["depth"] = int(call.get("depth", 1)) + deeper
    return out
