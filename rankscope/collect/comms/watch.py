"""Every rank dumps when one rank's watchdog fires; each dump says where every thread is.

Pattern: torch's NCCL watchdog on a timeout writes a key in the job's c10d store and every rank's monitor
thread, polling that key, dumps its Flight Recorder (``TORCH_NCCL_DUMP_ON_TIMEOUT``). The recorder's
watchdog (:class:`rankscope.collect.comms.Recorder`) does the same on any backend: a rank whose collective
stays pending adds 1 to a counter key in the default process group's store and writes who and why; every
rank's watchdog thread reads the counter each poll (one ``add(key, 0)``: a single round trip that never
waits for a missing key) and dumps when it grew. So a rank with nothing pending (asleep in Python, stuck in
a data loader) dumps too, and its dump's thread stacks show where it is.

The store is never touched from the training thread. Where the store is a TCPStore, this thread opens its
own client connection to the same server with a short timeout: a dead server costs this thread a few
seconds, and the training thread's store calls never queue behind ours (a TCPStore client serializes its
operations). Every failure is swallowed and retried later.
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import threading
import time
from typing import Any

log = logging.getLogger(__name__)
TIMEOUT_S = 5.0  # this thread's store operations give up after this long
RETRY_S = 5.0  # after a failure, the store is not tried again for this long
MAX_FRAMES = 64
MAX_THREADS = 64


def _key() -> str:
    """One key space per job attempt (torchrun restarts reuse its store)."""
    return f"rankscope/comms/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/dump"


class StoreSignal:
    """"Dump now" between the ranks of one job, through a c10d store (see the module docstring)."""

    def __init__(self, store: Any) -> None:
        self.store, self.key = store, _key()
        self.seen = self._count()  # what was announced before this rank listened is not for it

    @classmethod
    def open(cls) -> StoreSignal | None:
        """A signal on the default process group's store (own connection where it is a TCPStore); None
        when there is no process group yet or the store cannot be reached (never raises)."""
        try:
            import torch.distributed as dist

            if not dist.is_available() or not dist.is_initialized():
                return None
            store = dist.distributed_c10d._get_default_store()
            return cls(_own_client(store) or store)
        except Exception:  # noqa: BLE001 - no store: the rank still dumps on its own watchdog
            log.debug("rankscope: no c10d store for the dump signal", exc_info=True)
            return None

    def _count(self) -> int:
        return int(self.store.add(f"{self.key}/n", 0))

    def announce(self, rank: int, reason: str) -> int:
        """Ask every rank to dump: who asks and why, then the counter (so a reader that sees the new count
        finds the words)."""
        self.store.set(f"{self.key}/who", json.dumps({"rank": rank, "reason": reason, "wall_ns": time.time_ns()}))
        self.seen = n = int(self.store.add(f"{self.key}/n", 1))
        return n

    def poll(self) -> dict[str, Any] | None:
        """A new request since the last poll ({"rank", "reason", "wall_ns"}), else None."""
        n = self._count()
        if n <= self.seen:
            return None
        self.seen = n
        try:
            got = json.loads(bytes(self.store.get(f"{self.key}/who")))
            return got if isinstance(got, dict) else {"rank": None}
        except Exception:  # noqa: BLE001 - the words are lost; the request stands
            return {"rank": None}


def _own_client(store: Any) -> Any:
    """A new client of the TCPStore under ``store``'s prefixes, with this module's timeout; None when the
    store is not a TCPStore (a FileStore or HashStore is local: used as it is)."""
    import torch.distributed as dist

    inner = store
    while hasattr(inner, "underlying_store"):
        inner = inner.underlying_store
    if not isinstance(inner, dist.TCPStore):
        return None
    return dist.TCPStore(inner.host, inner.port, is_master=False, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=TIMEOUT_S), use_libuv=bool(getattr(inner, "libuvBackend", True)))


class Listener:
    """The watchdog thread's side: opens the signal once the process group exists (retried until it opens,
    then kept), never raises."""

    def __init__(self) -> None:
        self.signal: StoreSignal | None = None
        self.opened = False
        self._next_try = 0.0

    def _ready(self) -> StoreSignal | None:
        if self.signal is None and not self.opened and time.monotonic() >= self._next_try:
            self._next_try = time.monotonic() + RETRY_S
            self.signal = StoreSignal.open()
            self.opened = self.signal is not None
        return self.signal

    def announce(self, rank: int, reason: str) -> bool:
        sig = self._ready()
        if sig is None:
            return False
        try:
            sig.announce(rank, reason)
            return True
        except Exception:  # noqa: BLE001
            self._failed()
            return False

    def poll(self) -> dict[str, Any] | None:
        sig = self._ready()
        if sig is None:
            return None
        try:
            return sig.poll()
        except Exception:  # noqa: BLE001 - a store that went away (rank 0 exited): try again later
            self._failed()
            return None

    def _failed(self) -> None:
        # The connection is kept, never reopened: a store that went away went with its job, and a new
        # connection to the same address could reach the next job's store (a port reused) and its requests.
        log.debug("rankscope: the dump signal's store failed", exc_info=True)


def thread_stacks(skip_current: bool = True) -> dict[str, list[str]]:
    """Every thread's Python stack, innermost frame first, as ``"file:line func"`` (the main thread under
    its name, ``MainThread``): taken from another thread, this shows where the training thread is."""
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    out: dict[str, list[str]] = {}
    for ident, frame in list(sys._current_frames().items())[:MAX_THREADS]:
        if skip_current and ident == me:
            continue
        name = names.get(ident, f"thread {ident}")
        if name in out:
            name = f"{name} ({ident})"
        frames: list[str] = []
        f: Any = frame
        while f is not None and len(frames) < MAX_FRAMES:
            code = f.f_code
            frames.append(f"{code.co_filename}:{f.f_lineno} {code.co_name}")
            f = f.f_back
        out[name] = frames
    return out
