"""The switch and the patches: who is recording RPC calls, and torch's RPC functions while they do.

``rpc_sync``, ``rpc_async`` and ``remote`` here have torch's signatures. With no recorder active they
call torch's function after one flag check; with one active (a profile on this process, or a profiled
call running on this thread of a callee: nested RPC) the call is sent through
:func:`rankscope.collect.rpc.callee.run_profiled` and its reply merged by :mod:`.calls`.

:func:`install` puts these wrappers in place of ``torch.distributed.rpc.{rpc_sync,rpc_async,remote}``
(and the same names in ``torch.distributed.rpc.api``), counted, and :func:`uninstall` puts torch's
back when the last user is done. Code that imported the functions by name before the profile
started (``from torch.distributed.rpc import rpc_sync``) keeps torch's own: use the wrappers there.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import torch.distributed.rpc as _rpc
from torch.distributed.rpc import api as _api
from torch.distributed.rpc.constants import UNSET_RPC_TIMEOUT

NAMES = ("rpc_sync", "rpc_async", "remote")
TORCH: dict[str, Callable[..., Any]] = {n: getattr(_api, n) for n in NAMES}
_ACTIVE: Any = None  # the process's recorder (calls.Recorder) while a profile records
# The sending side, given by the package's ``__init__`` (``connect``): the wrappers here and the callee's
# nested calls reach :mod:`.calls` through it, so neither imports it (calls imports both of them).
PARTS: dict[str, Callable[..., Any]] = {}


class _Local(threading.local):
    scope: Any = None  # a class default: reading it on a thread that never set it costs no exception


_LOCAL = _Local()  # .scope: a nested recorder while this thread runs a profiled call
_PATCH_LOCK = threading.Lock()
_PATCH_USERS = 0
_OWN_PROFILERS = 0  # rankscope profiles running torch's profiler in this process (it answers calls unprofiled)
_SAVED: dict[tuple[Any, str], Any] = {}
# why a callee runs a call unprofiled (own_profiler_reason; the caller's gap quotes them)
OWN_RANKSCOPE = "a rankscope profile of its own is running there"
OWN_TORCH = "its own torch profiler is running (torch.profiler / torch.autograd.profiler)"
OWN_THREAD = "a profiler is enabled on the thread that runs the call"


def own_profiler(delta: int) -> None:
    """Count a rankscope profile that runs torch's profiler in this process (+1 at start, -1 at stop):
    while one runs, this process answers profiled calls for others unprofiled (:func:`own_profiler_reason`)."""
    global _OWN_PROFILERS
    with _PATCH_LOCK:
        _OWN_PROFILERS = max(_OWN_PROFILERS + delta, 0)


def own_profiler_running() -> bool:
    return _OWN_PROFILERS > 0


def own_profiler_reason() -> str | None:
    """Why this process profiles no call for a caller now (a profiler of its own runs), or None.

    ``torch.autograd.profiler._is_profiler_enabled`` is torch's process-wide flag: every profiler torch
    starts from Python sets it (``torch.profiler.profile``, ``torch.autograd.profiler.profile``,
    emit_nvtx / emit_itt, and so ``record_function`` under any of them). Not seen from here: a profiler
    started with the private ``_enable_profiler`` on another thread, and Kineto's on-demand (global)
    profiler; the callee's recorder (:mod:`.threadrec`) leaves both whole as well."""
    import torch
    import torch.autograd.profiler as autograd_profiler

    if _OWN_PROFILERS > 0:
        return OWN_RANKSCOPE
    if autograd_profiler._is_profiler_enabled:
        return OWN_TORCH
    if torch._C._autograd._profiler_enabled():
        return OWN_THREAD
    return None


def fn_name(fn: Any) -> str:
    """How a function is named in call spans: its qualified name (torch's choice too)."""
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__)


def rpc_sync(to: Any, func: Callable[..., Any], args: Any = None, kwargs: Any = None,
             timeout: float = UNSET_RPC_TIMEOUT) -> Any:
    """``torch.distributed.rpc.rpc_sync``, profiled on the callee while a recorder is active."""
    rec = _ACTIVE if _ACTIVE is not None and _ACTIVE.enabled else _LOCAL.scope
    if rec is None:
        return TORCH["rpc_sync"](to, func, args, kwargs, timeout)
    return PARTS["send"](rec, "rpc_sync", to, func, args, kwargs, timeout).wait()


def rpc_async(to: Any, func: Callable[..., Any], args: Any = None, kwargs: Any = None,
              timeout: float = UNSET_RPC_TIMEOUT) -> Any:
    """``torch.distributed.rpc.rpc_async``, profiled on the callee while a recorder is active."""
    rec = _ACTIVE if _ACTIVE is not None and _ACTIVE.enabled else _LOCAL.scope
    if rec is None:
        return TORCH["rpc_async"](to, func, args, kwargs, timeout)
    return PARTS["send"](rec, "rpc_async", to, func, args, kwargs, timeout)


def remote(to: Any, func: Callable[..., Any], args: Any = None, kwargs: Any = None,
           timeout: float = UNSET_RPC_TIMEOUT) -> Any:
    """``torch.distributed.rpc.remote``, profiled on the owner while a recorder is active."""
    rec = _ACTIVE if _ACTIVE is not None and _ACTIVE.enabled else _LOCAL.scope
    if rec is None:
        return TORCH["remote"](to, func, args, kwargs, timeout)
    return PARTS["send_remote"](rec, to, func, args, kwargs, timeout)


WRAPPERS: dict[str, Callable[..., Any]] = {"rpc_sync": rpc_sync, "rpc_async": rpc_async, "remote": remote}


def connect(*, send: Callable[..., Any], send_remote: Callable[..., Any], recorder: Callable[..., Any]) -> None:
    """Wire in the sending side (called once, by ``rankscope.collect.rpc``'s ``__init__``)."""
    PARTS.update(send=send, send_remote=send_remote, recorder=recorder)


def install() -> None:
    """Put the wrappers in torch's place (counted: the last :func:`uninstall` restores torch's)."""
    global _PATCH_USERS
    with _PATCH_LOCK:
        _PATCH_USERS += 1
        if _PATCH_USERS > 1:
            return
        for mod in (_rpc, _api):
            for n in NAMES:
                _SAVED[(mod, n)] = getattr(mod, n)
                setattr(mod, n, WRAPPERS[n])


def uninstall() -> None:
    """Undo one :func:`install`; the last one puts back exactly what was there before."""
    global _PATCH_USERS
    with _PATCH_LOCK:
        if _PATCH_USERS == 0:
            return
        _PATCH_USERS -= 1
        if _PATCH_USERS:
            return
        for (mod, n), fn in _SAVED.items():
            setattr(mod, n, fn)
        _SAVED.clear()


def patched() -> bool:
    """True while torch's RPC functions are replaced by the wrappers."""
    return any(getattr(_rpc, n) is WRAPPERS[n] or getattr(_api, n) is WRAPPERS[n] for n in NAMES)


def activate(recorder: Any) -> None:
    """Make ``recorder`` the process's RPC recorder and patch torch's functions."""
    global _ACTIVE
    if _ACTIVE is not None:
        raise RuntimeError("rankscope: an RPC profile is already active in this process")
    _ACTIVE = recorder
    install()


def deactivate(recorder: Any) -> None:
    """Stop recording with ``recorder`` and restore torch's functions."""
    global _ACTIVE
    if _ACTIVE is recorder:
        _ACTIVE = None
        uninstall()


@contextlib.contextmanager
def nested_scope(recorder: Any) -> Iterator[None]:
    """While a callee thread runs a profiled call: its own RPC calls are profiled too (nested RPC)."""
    prev = _LOCAL.scope
    _LOCAL.scope = recorder
    install()
    try:
        yield
    finally:
        _LOCAL.scope = prev
        uninstall()
