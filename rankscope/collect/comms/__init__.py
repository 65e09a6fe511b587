"""Collective recorder control: dumps of every rank's collectives on demand, on a hang, on SIGUSR1.

The capture engine is PyTorch's Flight Recorder: its ring buffer sees every collective and
point-to-point op of every backend, including the ones DDP issues from C++ (gradient
all-reduce), which no Python-level wrapper can see. It must be sized before the process group
exists: ``enable()`` (or ``TORCH_FR_BUFFER_SIZE`` in the job's environment) before
``init_process_group``. What this module adds:

- ``Recorder.start()`` / ``stop()``: an interval; a dump keeps only the entries created inside it;
- ``dump(reason)``: one file per rank, ``<dir>/fr_rank_<rank>``, in Flight Recorder's own pickle
  format with the group membership filled in from ``torch.distributed`` (gloo's recorder leaves it
  empty, which stops torch's own analyzer), so ``rankscope hang <dir>`` and ``torchfrtrace <dir>
  --prefix fr_rank_`` both read it;
- a watchdog thread: a collective still pending after ``watchdog_s`` seconds makes the rank dump
  (every waiting rank does, so the dumps show who never arrived) and say so on stderr, "rankscope:
  watchdog fired after N s on rank R, dumps in DIR" (``where``: the run directory under rankscope.profile);
- every rank dumps when one rank's watchdog fires (a request through the job's c10d store:
  :mod:`rankscope.collect.comms.watch`); each dump carries every thread's Python stack (``rankscope_stacks``)
  and the training step marks (``rankscope_steps``: ``rankscope.profile`` marks them, or the job calls
  ``rankscope.comms.mark_step(n)``);
- SIGUSR1 (main thread only; the previous handler is chained and restored on ``stop``);
- ``at_exit=True``: a dump when the process exits normally.

Nothing here may hurt training: every failure is logged and swallowed.

Limits of Flight Recorder (torch 2.13, gloo): entries stay "scheduled" with no completion time;
completion shows only as ``retired``; no sampling. The timed engine (:func:`timed_backend`,
:mod:`rankscope.collect.comms.timed_pg`: a process-group backend wrapping the real one, chosen at
``init_process_group``) records completion times, states, sampling (time 1 in N, count all), a ring
size and optional Python stacks; when it is in use, dumps, the watchdog and the window files read it.
"""
from __future__ import annotations

import atexit
import logging
import os
import pickle
import signal
import sys
import threading
import time
from typing import Any

from rankscope.collect.comms.steps import STEPS
from rankscope.collect.comms.steps import mark as mark_step  # noqa: F401 - rankscope.comms.mark_step(n)
from rankscope.collect.comms.watch import TIMEOUT_S, Listener, thread_stacks

log = logging.getLogger(__name__)
DEFAULT_BUFFER = 2000


def enable(buffer: int = DEFAULT_BUFFER, gpu_timing: bool = True) -> None:
    """Size Flight Recorder's ring; call before ``init_process_group`` (no-op for what is already set).
    ``gpu_timing``: on NCCL, Flight Recorder also records CUDA start / end events per collective
    (``TORCH_NCCL_ENABLE_TIMING=1``): its entries then become "started" and "completed" with a
    ``duration_ms``; without it NCCL entries carry no start. No effect on gloo."""
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(buffer))
    if gpu_timing:
        os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")


def timed_backend(inner: str = "gloo", ring: int = DEFAULT_BUFFER, sample_every: int = 1, stack: bool = False,
                  poll: bool = False) -> str:
    """The timed recorder's backend name for ``init_process_group`` (see :mod:`rankscope.collect.comms.timed_pg`)."""
    from rankscope.collect.comms import timed_pg

    return timed_pg.timed_backend(inner, ring=ring, sample_every=sample_every, stack=stack, poll=poll)


def _timed() -> Any:
    """The timed engine's module when a timed backend exists in this process, else None."""
    from rankscope.collect.comms import timed_pg

    return timed_pg if timed_pg.active() else None


def _fr_entries(only_active: bool = False) -> list[dict[str, Any]]:
    """The entries of this process's recorder: the timed engine's, else Flight Recorder's."""
    t = _timed()
    if t is not None:
        return t.entries()
    return fr_doc(False, only_active).get("entries", [])


def fr_doc(stacks: bool = False, only_active: bool = False, nccl_stacks: bool | None = None) -> dict[str, Any]:
    """Flight Recorder's dump of this process: NCCL's ring and the other backends' (gloo's) are two
    recorders in torch (``_dump_nccl_trace``, in CUDA builds, and ``_dump_fr_trace``); where both hold
    entries (a job with NCCL and gloo groups) their entries are merged by creation time, each keeping its
    ring's record id (``fr_ring`` says which ring: "nccl" or "fr"). ``nccl_stacks`` (default: ``stacks``):
    NCCL's dump with stack traces waits while the GPU is busy (measured on torch 2.11, H100: 6.0 s during a
    kernel that ran 3 s more, 0.008 s without them), so a dump for a watchdog leaves them out."""
    import torch._C._distributed_c10d as c10d

    doc = pickle.loads(c10d._dump_fr_trace(True, stacks, only_active))  # type: ignore[attr-defined]
    nccl = getattr(c10d, "_dump_nccl_trace", None)
    if nccl is None:
        return doc
    try:
        other = pickle.loads(nccl(True, stacks if nccl_stacks is None else nccl_stacks, only_active))
    except Exception:  # noqa: BLE001 - no NCCL in this process
        return doc
    if not other.get("entries"):
        return doc
    if not doc.get("entries"):
        return other
    for name, d in (("fr", doc), ("nccl", other)):
        for e in d["entries"]:
            e["fr_ring"] = name
    other["entries"] = sorted(doc["entries"] + other["entries"], key=lambda e: int(e.get("time_created_ns") or 0))
    for key in ("pg_config", "pg_status"):
        if isinstance(doc.get(key), dict) and isinstance(other.get(key), dict):
            other[key] = {**doc[key], **other[key]}
    return other


def recording() -> bool:
    """Whether this process records collectives: the timed backend is in use, or Flight Recorder's ring is sized."""
    return _timed() is not None or ring_sized()


def ring_sized() -> bool:
    """Whether Flight Recorder records: its ring is sized by TORCH_FR_BUFFER_SIZE when the first collective
    is recorded (``import rankscope`` sets 2000 where nothing set it); with the variable unset, torch's own
    default decides (2000 in torch 2.13, 0 in older ones), read from a dump: a ring that exists lists the
    process groups."""
    raw = os.environ.get("TORCH_FR_BUFFER_SIZE", os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE"))
    if raw is not None:
        try:
            return int(raw or 0) > 0
        except ValueError:
            return False
    try:
        import json

        import torch._C._distributed_c10d as c10d
        import torch.distributed as dist

        if not dist.is_initialized():
            return False
        return bool(json.loads(c10d._dump_fr_trace_json(False, True)).get("pg_config"))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an older torch without the JSON dump: no ring known
        return False


def _groups() -> dict[str, dict[str, str]]:
    """{pg name: {name, desc, ranks}} of every process group this rank knows."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    out = {}
    for pg, ranks in c10d._world.pg_group_ranks.items():
        name = c10d._world.pg_names.get(pg, "")
        desc = getattr(pg, "group_desc", "") or ("default_pg" if pg is dist.group.WORLD else "undefined")
        out[str(name)] = {"name": str(name), "desc": str(desc), "ranks": str(sorted(ranks))}
    return out


class Recorder:
    """One rank's recorder control (see the module docstring)."""

    def __init__(self, out_dir: str, *, watchdog_s: float | None = None, on_signal: bool = True,
                 at_exit: bool = False, on_dump: Any = None) -> None:
        self.out_dir, self.watchdog_s, self.on_signal, self.at_exit = out_dir, watchdog_s, on_signal, at_exit
        self.on_dump = on_dump  # called (path, reason) after each dump, e.g. to publish it with the run
        self.since_ns: int | None = None
        self.until_ns: int | None = None
        self.dumps: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._old_handler: Any = None
        self._dumped_for: set[tuple[str, int]] = set()  # (ring, record id) of the entries already dumped for
        self._dump_lock = threading.RLock()  # re-entrant: SIGUSR1's handler may run inside a dump on the main thread
        self._listener = Listener()  # "every rank dumps" through the job's c10d store (comms_watch)
        self._asked_ns = 0  # when this rank last asked the others to dump, or was asked
        self.rank: int = 0
        self._pg: dict[str, dict[str, str]] = {}
        self.where: str | None = None  # what the watchdog's line names (default: out_dir)

    def start(self) -> Recorder:
        self.since_ns, self.until_ns = time.time_ns(), None
        self.rank, self._pg = 0, {}
        try:  # kept for dumps after the process group is gone (an exit dump)
            import torch.distributed as dist

            if dist.is_initialized():
                self.rank, self._pg = dist.get_rank(), _groups()
        except Exception:  # noqa: BLE001
            log.debug("no process group at start", exc_info=True)
        if self.on_signal and threading.current_thread() is threading.main_thread():
            self._old_handler = signal.signal(signal.SIGUSR1, self._on_signal)
        # Always: at exit the watchdog thread is stopped and joined first. A daemon thread caught inside
        # Flight Recorder's C++ dump while the interpreter shuts down aborts the process
        # ("terminate called without an active exception"), which the exit-dump test hit.
        atexit.register(self._on_exit)
        if self.watchdog_s:
            self._stop.clear()
            self._thread = threading.Thread(target=self._watch, name="rankscope-comms-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self.until_ns = time.time_ns()
        self._stop.set()
        atexit.unregister(self._on_exit)
        if self._thread is not None:
            self._thread.join(timeout=TIMEOUT_S + 1)  # a store call in flight ends by then
            self._thread = None
        if self._old_handler is not None:
            signal.signal(signal.SIGUSR1, self._old_handler)
            self._old_handler = None

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def dump(self, reason: str = "manual", path: str | None = None) -> str | None:
        """Write this rank's entries (inside the started interval) and return the file; None on failure.
        One dump at a time (the watchdog thread, a signal, the exit may ask at once)."""
        with self._dump_lock:
            return self._dump(reason, path)

    def _dump(self, reason: str, path: str | None) -> str | None:
        try:
            import torch.distributed as dist

            t = _timed()
            doc = ({"version": "2.10", "entries": t.entries(), "timed": {"counts": dict(t.RING.counts),
                    "timed": t.RING.timed, "ring": t.RING.size, "sample_every": t.RING.sample_every}}
                   if t is not None else fr_doc(True, False, nccl_stacks="watchdog" not in reason))
            lo, hi = self.since_ns or 0, self.until_ns or (1 << 63)
            doc["entries"] = [e for e in doc.get("entries", []) if lo <= int(e.get("time_created_ns") or 0) <= hi]
            doc["pg_config"] = _groups() if dist.is_initialized() else self._pg
            doc["rankscope"] = {"reason": reason, "wall_ns": time.time_ns(), "step": STEPS.current}
            doc["rankscope_steps"] = STEPS.as_list()
            doc["rankscope_stacks"] = thread_stacks()  # where every thread is (this one left out)
            out = path or os.path.join(self.out_dir, f"fr_rank_{self._rank()}")
            os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
            tmp = f"{out}.tmp-{os.getpid()}-{threading.get_ident()}"
            with open(tmp, "wb") as f:
                pickle.dump(doc, f)
            os.replace(tmp, out)  # whole or absent: a reader never sees half a dump
            self.dumps.append(out)
        except Exception:  # noqa: BLE001 - a failed dump must never reach the training loop
            log.warning("rankscope: collective dump failed", exc_info=True)
            return None
        try:
            if self.on_dump is not None:
                self.on_dump(out, reason)
        except Exception:  # noqa: BLE001
            log.warning("rankscope: publishing the collective dump failed", exc_info=True)
        return out

    def _on_exit(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=TIMEOUT_S + 1)  # a store call in flight ends by then
            self._thread = None
        if self.at_exit:
            self.dump("exit")

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.dump("SIGUSR1")
        old = self._old_handler
        if callable(old) and old not in (signal.SIG_IGN, signal.SIG_DFL):
            old(signum, frame)

    def _watch(self) -> None:
        """Every ~second: a pending collective older than ``watchdog_s`` makes this rank dump once and ask
        every rank to dump (through the c10d store); another rank's request makes this one dump."""
        assert self.watchdog_s is not None
        period = min(1.0, self.watchdog_s / 4)
        while not self._stop.wait(period):
            try:
                self._check_own()
            except Exception:  # noqa: BLE001 - the watchdog must never take the job down
                log.debug("comms watchdog poll failed", exc_info=True)
            try:
                req = self._listener.poll()
                if req is not None and not self._stop.is_set():
                    self._asked_ns = time.time_ns()
                    who = req.get("rank")
                    self.dump(f"watchdog of rank {who}" if who is not None else "watchdog of another rank")
            except Exception:  # noqa: BLE001
                log.debug("comms dump request failed", exc_info=True)

    def _check_own(self) -> None:
        assert self.watchdog_s is not None
        active = _fr_entries(only_active=True)
        now = time.time_ns()
        # the timed engine knows completion only for the entries it timed (sampling: 1 in N); its
        # gloo send / recv complete when the caller's wait() returns: pending from that wait on
        stuck = [e for e in active if not e.get("retired") and e.get("timed", True)
                 and now - int(_pending_since(e) or now) > self.watchdog_s * 1e9]
        new = [e for e in stuck if (str(e.get("fr_ring", "")), int(e.get("record_id") or 0)) not in self._dumped_for]
        if not new:
            return
        self._dumped_for.update((str(e.get("fr_ring", "")), int(e.get("record_id") or 0)) for e in new)
        if self.dump("watchdog") is None:
            return
        # one request per hang: not again while a request (ours or another rank's) is younger than watchdog_s
        asked = now - self._asked_ns < self.watchdog_s * 1e9 or not self._listener.announce(self._rank(), "watchdog")
        self._asked_ns = now
        age = (now - min(int(_pending_since(e) or now) for e in new)) / 1e9
        self._say(f"rankscope: watchdog fired after {age:.1f} s on rank {self._rank()}, dumps in "
                  f"{self.where or os.path.abspath(self.out_dir)}" + ("" if asked else " (every rank asked to dump)"))

    def _rank(self) -> int:
        """This process's rank: the process group's while it exists, else the one seen at start."""
        import torch.distributed as dist

        return dist.get_rank() if dist.is_initialized() else self.rank

    @staticmethod
    def _say(line: str) -> None:
        try:
            sys.stderr.write(line + "\n")  # one write: ranks' lines do not interleave
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - no, closed or broken stderr: the line is lost, never the job
            pass


def _pending_since(e: dict[str, Any]) -> int | None:
    """When an entry started to be waited for: its creation, or for a timed p2p op its caller's wait
    (an isend nobody has waited for yet is not a hang); None: not waited for."""
    return e["wait_started_ns"] if "wait_started_ns" in e else e.get("time_created_ns")


def window_json_gz(lo_ns: int, hi_ns: int) -> bytes | None:
    """The collectives this rank's recorder saw between ``lo_ns`` and ``hi_ns`` (wall clock), compact
    gzipped JSON kept beside the window's trace (``ranks/<r>/window-NNNN.collectives.json.gz``): per
    entry its process group, sequence number in that group, op and time created. On gloo the Kineto trace
    carries neither group nor sequence; the model matches each ``gloo:*`` span to its entry
    (``rankscope.model.comm_seq``), so collectives are matched across ranks by (group, sequence).
    None when the recorder is off or the dump fails (never raises)."""
    import gzip
    import json

    try:
        import torch.distributed as dist

        if not recording() or not dist.is_initialized():
            return None
        rows = []
        for e in _fr_entries():
            t = int(e.get("time_created_ns") or 0)
            if not lo_ns <= t <= hi_ns:
                continue
            pg = e.get("process_group") or ("", "")
            p2p = bool(e.get("is_p2p"))
            rows.append([str(pg[0]), int(e.get("p2p_seq_id" if p2p else "collective_seq_id") or 0), int(p2p),
                         str(e.get("profiling_name", "")).split(" ")[0], t, str(e.get("input_sizes", ""))[:200]])
        out = {"source": "timed" if _timed() else "flight_recorder", "rank": dist.get_rank(), "start_ns": lo_ns, "end_ns": hi_ns,
               "groups": _groups(), "columns": ["pg", "seq", "p2p", "op", "time_created_ns", "input_sizes"],
               "entries": rows}
        return gzip.compress(json.dumps(out).encode(), 6)
    except Exception:  # noqa: BLE001 - never the job
        log.debug("window collectives failed", exc_info=True)
        return None


def as_json_gz(path: str) -> bytes:
    """A dump file (Flight Recorder's pickle, written by ``Recorder.dump``) as gzipped JSON: the form kept
    in a run directory (``ranks/<rank>/comms.*.json.gz``), readable without unpickling."""
    import gzip
    import json

    from rankscope.store import plainpickle

    with open(path, "rb") as f:
        doc = plainpickle.load(f)
    return gzip.compress(json.dumps(doc, default=str).encode(), 6)


def from_env() -> dict[str, Any] | None:
    """``RANKSCOPE_COMMS``: "1" (record, dump at exit, on SIGUSR1 and on a trigger), or options
    "watchdog=300,exit=0" (watchdog seconds; exit dump on/off); unset, "" or "0": None."""
    raw = os.environ.get("RANKSCOPE_COMMS", "").strip()
    if raw in ("", "0", "off", "false"):
        return None
    opts: dict[str, Any] = {"watchdog_s": None, "at_exit": True}
    for part in raw.split(","):
        k, _, v = part.partition("=")
        if k.strip() == "watchdog" and v:
            opts["watchdog_s"] = float(v)
        elif k.strip() == "exit" and v:
            opts["at_exit"] = v.strip() not in ("0", "off", "false")
    return opts
