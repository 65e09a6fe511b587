"""The callee's side of a profiled RPC: run the function under the profiler on the RPC thread.

The caller sends :func:`run_profiled` (a module-level function: it pickles by name) with the user's
function, its arguments and the caller's profiling options. The callee records when the request
arrived and when the reply left (``now_ns``: its own wall clock), runs the function under
``torch.profiler.profile`` with those options, and returns a :class:`Reply`: the function's result, or
torch's own ``RemoteException`` (the caller raises it exactly as a plain RPC would), the events of this
thread, and the two timestamps. Calls the function made to further workers through a patched or
wrapped RPC (nested RPC) come back in ``nested``.

A callee that cannot profile (a rankscope profile runs its profiler already, another profiled call
holds it, or ``RANKSCOPE_RPC_CALLEE=0`` in its environment) runs the function plainly and says why in
``gap``. A bare ``torch.profiler.profile`` running in the callee cannot be detected (torch keeps that
state per thread): set ``RANKSCOPE_RPC_CALLEE=0`` on such workers.

``RANKSCOPE_RPC_CLOCK_SHIFT_NS`` shifts this process's RPC clock (timestamps and events) by that many
ns: the tests use it to check that a known offset is recovered.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

_SHIFT_NS = int(os.environ.get("RANKSCOPE_RPC_CLOCK_SHIFT_NS", "0") or 0)
_BUSY = threading.Lock()  # one profiled call at a time: torch's profiler is one per process
_REMOTE_REPLIES: dict[str, Reply] = {}  # remote() calls: events kept until the caller takes them
_REMOTE_LOCK = threading.Lock()
_LAST = threading.local()


def now_ns() -> int:
    """This worker's RPC clock: wall time, plus the test shift if one is set."""
    return time.time_ns() + _SHIFT_NS


@dataclass
class Reply:
    """What a profiled call returns to the caller (pickled by RPC)."""

    result: Any
    events: list[dict[str, Any]]
    t_recv: int
    t_reply: int
    worker: str
    worker_id: int
    gap: str | None = None
    nested: list[dict[str, Any]] = field(default_factory=list)


def probe() -> int:
    """Answered by a callee that can run :func:`run_profiled` (protocol version). Starts and stops the
    profiler once, so that its first-use cost (about a second here) is not charged to a call."""
    from rankscope.collect.rpc import state

    if os.environ.get("RANKSCOPE_RPC_CALLEE", "1") != "0" and not state.own_profiler_running() \
            and _BUSY.acquire(blocking=False):
        try:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU]):
                pass
        except Exception:  # noqa: BLE001 - a busy profiler: run_profiled will say so per call
            pass
        finally:
            _BUSY.release()
    return 1


def _worker() -> tuple[str, int]:
    from torch.distributed.rpc import get_worker_info

    info = get_worker_info()
    return info.name, info.id


def _remote_exception(exc: BaseException) -> Any:
    """The exception as torch's RPC returns it (same message, same type on the caller)."""
    from torch.distributed.rpc.internal import RemoteException, _get_current_rpc_agent

    text = f"On {_get_current_rpc_agent().get_worker_info()}:\n{exc!r}\n{traceback.format_exc()}"
    print(text, file=sys.stderr)
    _LAST.exc = exc  # remote() raises the exception itself again on the owner (run_remote)
    return RemoteException(text, type(exc))


def run_profiled(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 config: dict[str, Any]) -> Reply:
    """Run ``fn(*args, **kwargs)`` under the profiler on this thread; see the module docstring."""
    t_recv = now_ns()
    name, wid = _worker()
    from rankscope.collect.rpc import state

    if os.environ.get("RANKSCOPE_RPC_CALLEE", "1") == "0":
        return _plain(fn, args, kwargs, t_recv, name, wid, "RANKSCOPE_RPC_CALLEE=0 on the callee: not profiled")
    if state.own_profiler_running():
        return _plain(fn, args, kwargs, t_recv, name, wid, "the callee's profiler was busy (a rankscope profile "
                                                           "runs there)")
    if not _BUSY.acquire(blocking=False):
        return _plain(fn, args, kwargs, t_recv, name, wid, "the callee's profiler was busy with another call")
    try:
        return _profiled(fn, args, kwargs, config, t_recv, name, wid)
    finally:
        _BUSY.release()


def run_remote(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], config: dict[str, Any],
               key: str) -> Any:
    """``remote()``'s version: the owner keeps the plain result in the RRef and the Reply until the
    caller takes it (:func:`take`); an exception is raised as a plain ``remote`` would."""
    from torch.distributed.rpc.internal import RemoteException

    _LAST.exc = None
    reply = run_profiled(fn, args, kwargs, config)
    result = reply.result
    if not isinstance(result, RemoteException):
        reply.result = None  # the value stays in the RRef; the caller takes only the events
    with _REMOTE_LOCK:
        _REMOTE_REPLIES[key] = reply
    if isinstance(result, RemoteException) and _LAST.exc is not None:
        exc, _LAST.exc = _LAST.exc, None
        raise exc  # torch wraps it for the RRef's to_here() exactly as for a plain remote()
    return result


def take(key: str) -> Reply | None:
    """The Reply a :func:`run_remote` call left here (once)."""
    with _REMOTE_LOCK:
        return _REMOTE_REPLIES.pop(key, None)


def _plain(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], t_recv: int, name: str,
           wid: int, gap: str) -> Reply:
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - goes back to the caller as torch sends it
        result = _remote_exception(exc)
    return Reply(result, [], t_recv, now_ns(), name, wid, gap)


def _profiled(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], config: dict[str, Any],
              t_recv: int, name: str, wid: int) -> Reply:
    from torch.profiler import ProfilerActivity, profile, record_function

    from rankscope.collect.rpc import state

    label = f"rpc remote#{state.fn_name(fn)}"
    try:
        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=bool(config.get("record_shapes")),
                       profile_memory=bool(config.get("profile_memory")), with_stack=bool(config.get("with_stack")))
        prof.start()
    except Exception as exc:  # noqa: BLE001 - e.g. a profiler already running in this process
        return _plain(fn, args, kwargs, t_recv, name, wid, f"the callee could not start its profiler: {exc}"[:200])
    from rankscope.collect.rpc.calls import Recorder

    inner = Recorder(config, nested=True)
    with state.nested_scope(inner):
        try:
            with record_function(label):
                result = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - goes back to the caller as torch sends it
            result = _remote_exception(exc)
        finally:
            prof.stop()
    inner.wait()
    events = thread_events(prof, label)
    return Reply(result, events, t_recv, now_ns(), name, wid, None, inner.calls)


def thread_events(prof: Any, label: str) -> list[dict[str, Any]]:
    """The events of the thread that ran ``label`` (the profiler also sees other threads), on this
    worker's RPC clock, each with its self time and nesting depth."""
    evs = list(prof.profiler.kineto_results.events())
    tid = next((e.start_thread_id() for e in evs if e.name() == label), None)
    out = []
    for e in evs:
        if e.start_thread_id() != tid or e.device_type().name != "CPU":
            continue
        d: dict[str, Any] = {"name": e.name(), "ts": e.start_ns() + _SHIFT_NS, "dur": max(e.duration_ns(), 0)}
        shapes = [list(s) for s in e.shapes()]
        if any(shapes):
            d["shapes"] = shapes
        if e.name() == "[memory]":
            d["bytes"] = int(e.nbytes())
        out.append(d)
    out.sort(key=lambda d: (d["ts"], -d["dur"]))
    return with_self_time(out)


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
