"""A timed collective recorder: a process-group backend that wraps a real one (gloo, nccl, ...).

Flight Recorder (``rankscope.collect.comms``' default engine) on torch 2.13 with gloo leaves every entry
"scheduled", with no completion time, and has no sampling. This backend adds both. Registered under
its own name, it is what ``init_process_group`` creates; every call of the process-group API reaches
it, **including DDP's gradient all-reduce, which DDP's reducer issues from C++** (measured: a DDP job on
2 gloo ranks logged its construction all_gather and broadcasts and one all_reduce per bucket per step),
FSDP2's all-gathers and reductions, the tensor API (``all_gather_into_tensor`` -> ``all_gather_single``,
``reduce_scatter_tensor``, ``all_to_all_single``), ``_coalescing_manager`` and the functional collectives of
DTensor / torch.compile (tests/e2e/test_comms_timed.py checks all of them against Flight Recorder's record of
the same job). How: a ProcessGroup subclass overrides every method torch's Python API calls, and torch's C++
callers reach it through ProcessGroup's virtual methods (allreduce, allgather, broadcast, the *_coalesced ones,
send / recv, ...). The real backend is also registered on it, so that ``group_name`` and DeviceMesh work; a C++
caller of one of ProcessGroup's non-virtual methods would reach the real backend directly, unrecorded (none
seen in DDP, FSDP2 or the functional collectives of torch 2.13).
It forwards each call to the real backend unchanged and records, per entry: process group (name, desc,
member ranks), sequence number in the group (collectives and point-to-point counted apart, as Flight
Recorder does), op, dtypes, sizes in and out, bytes, peer for p2p, enqueue time, start and completion
time, state (scheduled / started / completed / failed) and, if asked, the Python stack. Completion:
on gloo the ``Work.get_future()`` callback (run when gloo finishes), or for gloo's send / recv, whose Work
has no future, the caller's ``wait()`` returning; on NCCL, whose future completes at enqueue, CUDA events
around the collective polled off the training thread (start, completion and the GPU's ``duration_ms``;
:mod:`rankscope.collect.comms.timed_gpu`).

- ring: a bounded deque per process (``ring`` entries, oldest dropped); counters per op keep counting;
- ``sample_every=N``: every call is counted and kept, one in N gets a completion callback (the others
  stay "scheduled", untimed): the cost of the callbacks drops N-fold;
- ``stack=True``: the caller's Python frames (at most 16) with each entry.

Use::

    name = rankscope.comms.timed_backend("gloo", ring=2000, sample_every=1)
    torch.distributed.init_process_group(name)          # instead of "gloo"; DDP etc. unchanged

or with no code change: ``-m rankscope.collect.comms.run --timed`` / ``RANKSCOPE_COMMS_TIMED=1`` (:mod:`timed_setup`, see
``comms_run``). ``rankscope.comms.Recorder`` dumps these entries (Flight Recorder's own format, states
and completion times filled in) instead of Flight Recorder's when this backend is in use, so
``rankscope hang`` reports each rank's last *completed* sequence, and torch's own analyzer reads them.

Nothing here may break a collective: a failure inside the recorder is logged once and swallowed; an
error of the collective itself reaches the caller unchanged.
"""
from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
import traceback
from typing import Any, Callable

from rankscope.collect.comms.steps import STEPS
from rankscope.collect.comms.timed_gpu import GPU
from rankscope.collect.comms.timed_work import failed, finish, work_class

log = logging.getLogger(__name__)

# method -> (Flight Recorder op name, index of the inputs, index of the outputs, peer argument index or None)
OPS: dict[str, tuple[str, int | None, int | None, int | None]] = {
    "allreduce": ("all_reduce", 0, 0, None),
    "allreduce_coalesced": ("all_reduce", 0, 0, None),
    "broadcast": ("broadcast", 0, 0, None),
    "reduce": ("reduce", 0, 0, None),
    "allgather": ("all_gather", 1, 0, None),
    "_allgather_base": ("all_gather", 1, 0, None),
    "allgather_into_tensor_coalesced": ("all_gather", 1, 0, None),
    "allgather_coalesced": ("all_gather", 1, 0, None),
    "reduce_scatter": ("reduce_scatter", 1, 0, None),
    "_reduce_scatter_base": ("reduce_scatter", 1, 0, None),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 1, 0, None),
    "gather": ("gather", 1, 0, None),
    "scatter": ("scatter", 1, 0, None),
    "alltoall_base": ("all_to_all", 1, 0, None),
    "alltoall": ("all_to_all", 1, 0, None),
    # the names torch 2.13's Python API calls (dist.all_gather_into_tensor -> group.all_gather_single, ...)
    "all_gather_single": ("all_gather", 1, 0, None),
    "all_gather_single_coalesced": ("all_gather", 1, 0, None),
    "reduce_scatter_single": ("reduce_scatter", 1, 0, None),
    "reduce_scatter_single_coalesced": ("reduce_scatter", 1, 0, None),
    "all_to_all_single": ("all_to_all", 1, 0, None),
    "barrier": ("barrier", None, None, None),
    "send": ("send", 0, None, 1),
    "recv": ("recv", None, 0, 1),
    "recv_anysource": ("recv", None, 0, None),
}
P2P = ("send", "recv")
# the real backend's own name for a method, where it differs; a method the backend's Python binding lacks
# (the *_coalesced ones of gloo) goes through a plain ProcessGroup holding the real backend
INNER = {"all_gather_single": "_allgather_base", "reduce_scatter_single": "_reduce_scatter_base",
         "all_to_all_single": "alltoall_base"}
GPU_BACKENDS = ("nccl",)  # their Work's future completes at enqueue: timed with CUDA events (timed_gpu)
MAX_FRAMES = 16


class _T:  # torch.Tensor once torch is imported (isinstance is ~30x cheaper than hasattr on a list)
    Tensor: Any = type(None)


_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
          "int32": "Int", "uint8": "Byte", "bool": "Bool"}
_DTYPES: dict[Any, str] = {}  # torch.dtype -> Flight Recorder's name ("Float"), filled on first sight


def _dtype(d: Any) -> str:
    name = _DTYPES.get(d)
    if name is None:
        short = str(d).removeprefix("torch.")
        name = _DTYPES[d] = _NAMES.get(short, short)
    return name


def _sizes(x: Any) -> tuple[list[list[int]], list[str], int]:
    """Sizes, dtypes and bytes of one argument as Flight Recorder writes them: a list of tensors per
    rank (all_gather's outputs, scatter's inputs) is one stacked size [n, *shape]. On the hot path of
    every collective: plain loops, no recursion (measured: 3.6 µs for one tensor before, under 2 now)."""
    T: Any = _T.Tensor
    sizes, dtypes, nbytes = [], [], 0
    for v in ([x] if isinstance(x, T) else x if isinstance(x, (list, tuple)) else ()):
        if isinstance(v, T):
            d = v.dtype
            sizes.append(list(v.shape))
            dtypes.append(_dtype(d))
            nbytes += v.numel() * d.itemsize
        elif isinstance(v, (list, tuple)) and v and isinstance(v[0], T):
            d = v[0].dtype
            sizes.append([len(v), *v[0].shape])
            dtypes.append(_dtype(d))
            nbytes += sum(u.numel() for u in v if isinstance(u, T)) * d.itemsize
    return sizes, dtypes, nbytes


class Ring:
    """One process's timed entries (all its groups): bounded, thread-safe, cheap to append to."""

    def __init__(self, size: int = 2000, sample_every: int = 1, stack: bool = False, poll: bool = False) -> None:
        self.size, self.sample_every, self.stack = max(1, int(size)), max(1, int(sample_every)), stack
        # poll: completion found by asking the futures (next call, snapshot) instead of a callback on gloo's thread
        self.poll = poll
        self.pending: collections.deque[tuple[dict[str, Any], Any]] = collections.deque()
        self.entries: collections.deque[dict[str, Any]] = collections.deque(maxlen=self.size)
        self.counts: collections.Counter[str] = collections.Counter()
        self.timed = 0
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._warned = False
        self.recording = True  # False: calls pass straight through, counted and numbered (set_recording)

    def snapshot(self) -> list[dict[str, Any]]:
        """A copy of the entries, oldest first (safe while collectives run); GPU entries' events looked at first."""
        if GPU.pending:
            GPU.poll()
        if self.pending:
            self.reap()
        with self._lock:
            return [dict(e) for e in self.entries]

    def reap(self) -> None:
        """Poll mode: entries whose future is done become completed (or failed), at the time this sees it."""
        now = time.time_ns()
        with self._lock:
            keep: collections.deque[tuple[dict[str, Any], Any]] = collections.deque()
            for e, fut in self.pending:
                if not fut.done():
                    keep.append((e, fut))
                    continue
                finish(e, failed(fut), now)
            self.pending = keep

    def hold(self, e: dict[str, Any], fut: Any) -> None:
        """Poll mode: keep the future until it is seen done (bounded: the oldest is given up, untimed)."""
        with self._lock:
            self.pending.append((e, fut))
            if len(self.pending) > self.size:
                self.pending.popleft()[0]["timed"] = False

    def warn_once(self) -> None:
        if not self._warned:
            self._warned = True
            log.warning("rankscope: the timed collective recorder failed on an entry (the collective ran)",
                        exc_info=True)


RING = Ring()
# Backends created in this process, counted, never referenced: a module-level reference kept the wrapped
# ProcessGroupGloo alive past destroy_process_group, to be destroyed during interpreter teardown, which
# aborted 1 run in ~10 ("terminate called without an active exception", tests/unit/test_timed_pg.py).
CREATED = [0]


class TimedBackend:  # the ProcessGroup base is added at registration (torch imported lazily)
    """Forwards every process-group call to ``inner`` and records it in ``RING``."""

    inner: Any
    group: tuple[str, str]
    members: list[int]

    def _setup(self, inner: Any, group: str, members: list[int], ring: Ring) -> None:
        self.inner, self.group, self.members, self.ring = inner, (group, "undefined"), members, ring
        self.seq = {"coll": 0, "p2p": 0}
        self.desc_known = False
        self.inner_name = str(inner.name() if hasattr(inner, "name") else "backend")
        self.gpu = self.inner_name.lower() in GPU_BACKENDS
        self.fns: dict[str, Callable[..., Any]] = {}
        self.plain: Any = None

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return f"rankscope_{self.inner_name}"

    def _fn(self, method: str) -> Callable[..., Any]:
        fn = self.fns.get(method)
        if fn is None:
            fn = self.fns[method] = getattr(self.inner, INNER.get(method, method), None) or getattr(self.plain, method)
        return fn

    def _call(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        fn = self._fn(method)
        if not self.ring.recording:  # paused: sequence numbers and counts stay in step with the other ranks
            op = OPS[method][0]
            self.seq["p2p" if op in P2P else "coll"] += 1
            self.ring.counts[op] += 1
            return fn(*args, **kwargs)
        entry = start = None
        try:
            if self.ring.pending:  # poll mode: what finished since the last call
                self.ring.reap()
            entry = self._entry(method, args)
            if self.gpu and entry is not None and not entry["record_id"] % self.ring.sample_every:
                start = GPU.start_event()  # on the current stream, before the collective is enqueued
        except Exception:  # noqa: BLE001 - the recorder, never the collective
            self.ring.warn_once()
        try:
            work = fn(*args, **kwargs)  # the collective's own errors reach the caller unchanged
        except BaseException:
            if entry is not None:  # refused before it was issued: no sequence number used (as Flight Recorder)
                kind = "p2p" if entry["is_p2p"] else "coll"
                self.seq[kind] -= 1
                entry.update(state="failed", retired=True, collective_seq_id=None, p2p_seq_id=None)
            raise
        if entry is not None:
            try:
                return self._track(entry, work, start)
            except Exception:  # noqa: BLE001
                self.ring.warn_once()
        return work

    def _entry(self, method: str, args: tuple[Any, ...]) -> dict[str, Any] | None:
        op, i_in, i_out, i_peer = OPS[method]
        if not self.desc_known:  # set by init_process_group / new_group after the backend was created
            self.desc_known = True
            self.group = (self.group[0], str(getattr(self, "group_desc", "") or "undefined"))
        p2p = op in P2P
        kind = "p2p" if p2p else "coll"
        self.seq[kind] += 1
        ins = _sizes(args[i_in]) if i_in is not None and len(args) > i_in else ([], [], 0)
        outs = _sizes(args[i_out]) if i_out is not None and len(args) > i_out else ([], [], 0)
        ring = self.ring
        ring.counts[op] += 1
        rid = next(ring._ids)
        e: dict[str, Any] = {
            "record_id": rid, "pg_id": 0, "process_group": self.group, "collective_seq_id": 0 if p2p else self.seq[kind],
            "p2p_seq_id": self.seq[kind] if p2p else 0, "op_id": rid + 1,
            "profiling_name": f"{self.inner_name}:{op}", "time_created_ns": time.time_ns(),
            "input_sizes": ins[0], "input_dtypes": ins[1], "output_sizes": outs[0], "output_dtypes": outs[1],
            "bytes_in": ins[2], "bytes_out": outs[2], "state": "scheduled", "retired": False,
            "time_discovered_started_ns": None, "time_discovered_completed_ns": None, "timeout_ms": 0,
            "is_p2p": p2p, "frames": [], "thread_id": str(threading.get_ident()),
            "thread_name": threading.current_thread().name, "members": self.members, "timed": False,
            "step": STEPS.current}
        if p2p:  # Flight Recorder's form, which torch's analyzer parses: "gloo:send 0->1", "gloo:recv 1<-0"
            peer = int(args[i_peer]) if i_peer is not None and len(args) > i_peer else -1
            g = lambda r: self.members[r] if 0 <= r < len(self.members) else r  # noqa: E731 - group -> global rank
            me, other = g(self.rank()), g(peer)  # type: ignore[attr-defined]
            e["peer"] = other
            e["profiling_name"] = f"{self.inner_name}:send {me}->{other}" if op == "send" else \
                f"{self.inner_name}:recv {me}<-{other}"
            if op == "recv":  # the tensor received, where Flight Recorder puts it
                e["input_sizes"], e["input_dtypes"] = outs[0], outs[1]
        if ring.stack:
            e["frames"] = [{"name": f.name, "filename": f.filename, "line": f.lineno}
                           for f in traceback.extract_stack(limit=MAX_FRAMES + 3)[:-3]]
        with ring._lock:
            ring.entries.append(e)
        return e

    def _track(self, e: dict[str, Any], work: Any, start: Any = None) -> Any:
        """The Work to hand back: ``work`` itself (a completion callback on its future), or for an op whose
        Work has no future (gloo's send / recv, and its reduce_scatter_tensor, run as an all_reduce whose Work
        finishes in ``wait()``) a wrapper that notes completion when the caller's ``wait()`` (or
        ``is_completed()``) sees it. On a GPU backend the callback only
        records the end event; completion comes from the events (:mod:`rankscope.collect.comms.timed_gpu`)."""
        ring = self.ring
        if e["record_id"] % ring.sample_every:
            return work  # counted and kept, not timed
        if self.gpu:
            return self._track_gpu(e, work, start)
        try:
            fut = work.get_future()
        except RuntimeError:  # gloo's send / recv and reduce_scatter_tensor Work have no future: done in wait()
            e.update(timed=True, time_discovered_started_ns=e["time_created_ns"], wait_started_ns=None)
            ring.timed += 1
            return _CLASSES["work"](work, e, self)
        e["timed"] = True
        ring.timed += 1
        e["time_discovered_started_ns"] = e["time_created_ns"]  # gloo starts on enqueue; no GPU start event here
        if ring.poll:
            ring.hold(e, fut)
            return work

        def done(fut: Any) -> None:
            try:
                finish(e, failed(fut))
            except Exception:  # noqa: BLE001
                ring.warn_once()

        fut.add_done_callback(done)
        return work

    def _track_gpu(self, e: dict[str, Any], work: Any, start: Any) -> Any:
        if start is None:
            return work
        if work is None:
            # a blocking call (async_op=False): torch >= 2.10's NCCL runs it on the caller's stream and hands
            # back no Work (measured on torch 2.11, H100); an end event recorded now on that stream follows it
            e.update(timed=True, time_discovered_started_ns=None, duration_ms=None)
            self.ring.timed += 1
            GPU.on_enqueued(e, start)
            return work
        try:
            fut = work.get_future()
        except RuntimeError:
            return work
        e.update(timed=True, time_discovered_started_ns=None, duration_ms=None)
        self.ring.timed += 1

        def enqueued(fut: Any) -> None:  # runs at once, on a stream that waits on the collective's end
            try:
                if failed(fut):
                    finish(e, True)
                    return
                GPU.on_enqueued(e, start)
            except Exception:  # noqa: BLE001
                self.ring.warn_once()

        fut.add_done_callback(enqueued)
        return work


def _method(name: str) -> Callable[..., Any]:
    def call(self: TimedBackend, *args: Any, **kwargs: Any) -> Any:
        return self._call(name, args, kwargs)

    call.__name__ = name
    return call


_CLASSES: dict[str, type] = {}


def _backend_class() -> type:
    """TimedBackend as a subclass of torch's ProcessGroup (so that init_process_group takes it)."""
    if "pg" not in _CLASSES:
        import torch
        import torch.distributed as dist

        _T.Tensor = torch.Tensor
        body: dict[str, Any] = {name: _method(name) for name in OPS}

        def __init__(self: Any, inner: Any, group: str, members: list[int], ring: Ring) -> None:  # noqa: N807
            dist.ProcessGroup.__init__(self, inner.rank(), inner.size())  # type: ignore[call-arg]
            TimedBackend._setup(self, inner, group, members, ring)
            # A ProcessGroup answers group_name (and the group description) from its registered backends:
            # with none, DeviceMesh (FSDP2, DTensor) stopped with "ProcessGroup name not set". Calls still
            # come here (the methods above override the C++ ones); the inner backend is only named.
            kind = dist.ProcessGroup.BackendType.NCCL if self.gpu else dist.ProcessGroup.BackendType.GLOO
            device = torch.device("cuda" if self.gpu else "cpu")
            self._register_backend(device, kind, inner)
            # the methods the real backend's binding lacks are called on a plain ProcessGroup holding it
            # (calling the C++ base of this object instead would come back here)
            self.plain = dist.ProcessGroup(inner.rank(), inner.size())  # type: ignore[call-arg]
            self.plain._register_backend(device, kind, inner)
            self.plain._set_default_backend(kind)

        body["__init__"] = __init__
        _CLASSES["pg"] = type("RankscopeTimedPG", (TimedBackend, dist.ProcessGroup), body)
        _CLASSES["work"] = work_class(dist.Work)
    return _CLASSES["pg"]


def _inner(kind: str, opts: Any) -> Any:
    import torch.distributed as dist

    pg: Any
    if kind == "gloo":
        pg = dist.ProcessGroupGloo(opts.store, opts.group_rank, opts.group_size, opts.timeout)
    elif kind == "nccl":  # as init_process_group builds it (not run here: no GPU on this project's machines)
        o = dist.ProcessGroupNCCL.Options()
        o._timeout, o.global_ranks_in_group, o.group_name = opts.timeout, list(opts.global_ranks_in_group), (
            opts.group_id)
        pg = dist.ProcessGroupNCCL(opts.store, opts.group_rank, opts.group_size, o)
    else:
        raise ValueError(f"rankscope: no timed wrapper for backend {kind!r} (gloo, nccl)")
    if hasattr(pg, "_set_sequence_number_for_group"):
        pg._set_sequence_number_for_group()
    return pg


def timed_backend(inner: str = "gloo", ring: int = 2000, sample_every: int = 1, stack: bool = False,
                  poll: bool = False) -> str:
    """Register the timed wrapper of ``inner`` and return the name to give ``init_process_group``
    ("rankscope_gloo"). Sets the process's ring size, sampling, stack and completion option (the last call
    wins). ``poll``: a collective's completion is found when the next one is issued (or a dump looks) instead
    of by a callback on gloo's thread, which must take the GIL in the middle of the next step; its
    completion time is then when it was seen done, not when it finished."""
    import torch.distributed as dist

    RING.size, RING.sample_every, RING.stack, RING.poll = max(1, int(ring)), max(1, int(sample_every)), stack, poll
    if RING.entries.maxlen != RING.size:
        with RING._lock:
            RING.entries = collections.deque(RING.entries, maxlen=RING.size)
    name = f"rankscope_{inner}"
    if name.upper() not in dist.Backend._plugins:
        cls = _backend_class()

        def create(opts: Any, _options: Any) -> Any:
            pg = cls(_inner(inner, opts), str(opts.group_id), sorted(int(r) for r in opts.global_ranks_in_group), RING)
            CREATED[0] += 1
            return pg

        dist.Backend.register_backend(name, create, extended_api=True,
                                      devices=["cuda"] if inner == "nccl" else ["cpu"])
    return name


def set_recording(on: bool) -> bool:
    """Pause (False) or resume (True) this process's timed recording; returns the previous setting.
    While paused, calls go straight to the real backend: no entry, no callback; they are still counted and
    numbered, so sequence numbers stay in step with ranks that keep recording (a failed call, paused,
    uses its number)."""
    prev, RING.recording = RING.recording, bool(on)
    return prev


def active() -> bool:
    """Whether a timed backend exists in this process (then dumps come from ``RING``)."""
    return CREATED[0] > 0


def entries(lo_ns: int = 0, hi_ns: int = 1 << 63) -> list[dict[str, Any]]:
    """The ring's entries created between ``lo_ns`` and ``hi_ns``, with each group's description."""
    return [e for e in RING.snapshot() if lo_ns <= e["time_created_ns"] <= hi_ns]


def since(record_id: int) -> list[dict[str, Any]]:
    """The ring's entries newer than ``record_id``, oldest first (read from the newest back: cheap to call
    often; the live signal does, off the training thread)."""
    if RING.pending:
        RING.reap()
    out = []
    with RING._lock:
        for e in reversed(RING.entries):
            if e["record_id"] <= record_id:
                break
            out.append(dict(e))
    out.reverse()
    return out
