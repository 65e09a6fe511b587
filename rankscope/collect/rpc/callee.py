"""The callee's side of a profiled RPC: run the function under a recorder of the RPC thread.

The caller sends :func:`run_profiled` (a module-level function: it pickles by name) with the user's
function, its arguments and the caller's profiling options. The callee records when the request
arrived and when the reply left (``now_ns``: its own wall clock), runs the function under
:class:`.threadrec.ThreadRecorder` (torch's thread-local profiler: this thread only, no Kineto, so
it never disturbs a profiler of the process's own) and returns a :class:`Reply`: the function's
result, or torch's own ``RemoteException`` (the caller raises it exactly as a plain RPC would), the
events of this thread, and the two timestamps. Calls the function made to further workers through a
patched or wrapped RPC (nested RPC) come back in ``nested``.

A callee whose own profiler runs (:func:`.state.own_profiler_reason`), or with
``RANKSCOPE_RPC_CALLEE=0`` in its environment, runs the function plainly, says why once on its log
(one line) and in each reply's ``gap``, and leaves its own profile as it was.

``RANKSCOPE_RPC_CLOCK_SHIFT_NS`` shifts this process's RPC clock (timestamps and events) by that many
ns: the tests use it to check that a known offset is recovered.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from rankscope.collect.rpc.threadrec import ThreadRecorder, with_self_time

log = logging.getLogger(__name__)
_SHIFT_NS = int(os.environ.get("RANKSCOPE_RPC_CLOCK_SHIFT_NS", "0") or 0)
_SAID: set[str] = set()  # reasons for unprofiled calls already said on this worker's log
GAP = "not profiled on the callee: "  # + the reason, in the caller's call record
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
    """Answered by a callee that can run :func:`run_profiled` (protocol version)."""
    return 1


def refusal() -> str | None:
    """Why this worker runs calls unprofiled now, or None (see the module docstring)."""
    from rankscope.collect.rpc import state

    if os.environ.get("RANKSCOPE_RPC_CALLEE", "1") == "0":
        return "RANKSCOPE_RPC_CALLEE=0 in its environment"
    try:
        return state.own_profiler_reason()
    except Exception as exc:  # noqa: BLE001 - a torch without the flag: unprofiled is the safe answer
        return f"it could not tell whether a profiler of its own runs ({type(exc).__name__})"


def _say_once(name: str, reason: str) -> None:
    with _REMOTE_LOCK:
        if reason in _SAID:
            return
        _SAID.add(reason)
    log.warning("rankscope: %s answers profiled RPC calls unprofiled: %s; its own profile is left whole "
                "(said once)", name, reason)


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
    """Run ``fn(*args, **kwargs)`` recorded on this thread; see the module docstring."""
    t_recv = now_ns()
    name, wid = _worker()
    why = refusal()
    if why is not None:
        _say_once(name, why)
        return _plain(fn, args, kwargs, t_recv, name, wid, GAP + why)
    return _profiled(fn, args, kwargs, config, t_recv, name, wid)


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
    from torch.profiler import record_function

    from rankscope.collect.rpc import state

    label = f"rpc remote#{state.fn_name(fn)}"
    rec = ThreadRecorder(config)
    try:
        rec.start()
    except Exception as exc:  # noqa: BLE001 - e.g. a profiler enabled on this thread already
        return _plain(fn, args, kwargs, t_recv, name, wid, f"the callee could not record the call: {exc}"[:200])
    inner = state.PARTS["recorder"](config, nested=True)
    with state.nested_scope(inner):
        try:
            with record_function(label):
                result = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - goes back to the caller as torch sends it
            result = _remote_exception(exc)
        finally:
            rec.stop()
    inner.wait()
    return Reply(result, rec.events(label, _SHIFT_NS), t_recv, now_ns(), name, wid, None, inner.calls)


__all__ = ["GAP", "Reply", "probe", "run_profiled", "run_remote", "take", "now_ns", "with_self_time"]
