"""``rankscope.profile``: torch.profiler.profile on every rank, published to one run directory.

Example (what the demo does)::

    import rankscope, torch
    with rankscope.profile(run="s3://bucket/runs/exp1",
                           schedule=torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=2),
                           metadata={"model": "mlp"}, layout={"dp": 2, "tp": 1, "pp": 1}) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()

Each window becomes ``RUN/ranks/<rank>/window-NNNN.pt.trace.json.gz`` (exported, spooled
and uploaded on background threads: :mod:`rankscope.collect.export`), with ``meta.json``
(steps covered, clock anchors, offset to rank 0) and ``MANIFEST.json``; rank 0 writes
``run.json``. At the end the first profiled rank prints one line on stderr, "rankscope: traces written to
RUN (N windows)".
Every rank computes windows from
the same step counter and schedule, so with a schedule all ranks capture the same steps.

Idle backstop: torch's profiler cannot be stopped from another thread (it crashed with
SIGSEGV on torch 2.13 when tried), so a watchdog thread, after ``idle_timeout_s`` without
``step()``, marks the rank idle in meta.json at once and asks the main thread (via
``Py_AddPendingCall``, which runs at the next bytecode boundary, no signal involved) to close
the window. A main thread stuck inside one C call closes it when that call returns, or at exit.
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import os
import sys
import threading
import time
from dataclasses import replace
from typing import Any, Callable, Iterable

from rankscope.collect import meta as M
from rankscope.collect import worldref
from rankscope.collect.comms.live import LiveSidecar
from rankscope.collect.comms.live import options as live_options
from rankscope.collect.comms.steps import STEPS
from rankscope.collect.handler import Collector, default_run_id
from rankscope.collect.sched import SchedSampler
from rankscope.collect.settle import Settler
from rankscope.collect.sidecars import CommsSidecar, RpcSidecar, comms_options
from rankscope.collect.trigger import Plan, Watcher
from rankscope.store.uploader import UploadConfig

log = logging.getLogger(__name__)
_PENDING = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_SESSIONS: dict[str, int] = {}


def _backend(name: str) -> Any:
    """The profiler module: torch.profiler, or torch_npu.profiler (Ascend; untested here)."""
    if name == "torch_npu":
        import torch_npu  # noqa: F401 - registers the NPU device

        return torch_npu.profiler
    import torch.profiler

    return torch.profiler


def backend_is_torch(mod: Any) -> bool:
    """True for torch.profiler (RPC profiling needs torch.distributed.rpc; not tried on torch_npu)."""
    return getattr(mod, "__name__", "") == "torch.profiler"


def _run_on_main_thread(fn: Callable[[], None]) -> Any:
    def cb(_: Any) -> int:
        try:
            fn()
        except Exception:  # noqa: BLE001 - must never raise into the interpreter loop
            pass
        return 0

    handle = _PENDING(cb)
    ctypes.pythonapi.Py_AddPendingCall.argtypes = [_PENDING, ctypes.c_void_p]
    ctypes.pythonapi.Py_AddPendingCall(handle, None)
    return handle  # caller keeps it alive until it has run


def _write_json(path: str, data: bytes) -> None:
    import gzip

    with open(path, "wb") as f:
        f.write(gzip.compress(data, 3) if path.endswith(".gz") else data)


class _UserView:
    """What a user's ``on_trace_ready`` receives: the torch profiler, except that
    ``export_chrome_trace`` copies rankscope's export (torch can save a window only once)."""

    def __init__(self, prof: Any, collector: Collector) -> None:
        self._prof, self._collector = prof, collector

    def export_chrome_trace(self, path: str, *args: Any, **kw: Any) -> None:
        _write_json(path, self._collector.window_json(-1))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._prof, name)


class profile:  # noqa: N801 - mirrors torch.profiler.profile
    """torch.profiler.profile plus ``run=`` (path or fsspec URL), ``ranks=`` and ``metadata=``.

    Extra keywords: ``layout`` ({"dp","tp","pp"}), ``run_id``, ``spool_dir``, ``storage_options``,
    ``upload`` (:class:`UploadConfig`), ``host_map`` (path for the alias -> host file, rank 0,
    mode 0600), ``idle_timeout_s``, ``on_demand`` (record nothing until triggered),
    ``backend`` ("torch" or "torch_npu"), ``rpc`` (default True: while a window records, calls made with
    ``torch.distributed.rpc`` are profiled on the worker that runs them and saved with the run as
    ``ranks/<r>/rpc.<n>.json.gz``; see :mod:`rankscope.rpc`), ``live`` (default on with the collective
    recorder and 2+ ranks, ``RANKSCOPE_LIVE=0`` off: rank 0 scores every step's ranks and writes
    ``RUN/live.jsonl``, ``rankscope watch RUN`` follows it; a rank slow for 5 steps is named on stderr; see
    :mod:`rankscope.collect.comms.live`), ``auto_capture`` (or ``RANKSCOPE_AUTO_CAPTURE=1``: that alarm also
    captures the next 3 steps on every rank). Without ``run`` it behaves like torch's
    profile (the RPC calls are then in ``rpc_calls`` after ``stop()``).
    """

    def __init__(self, *, activities: Iterable[Any] | None = None, schedule: Callable[[int], Any] | None = None,
                 on_trace_ready: Callable[[Any], Any] | None = None, record_shapes: bool = True,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, experimental_config: Any = None, run: str | None = None,
                 ranks: Iterable[int] | None = None, metadata: dict[str, Any] | None = None,
                 layout: dict[str, int] | None = None, run_id: str | None = None, spool_dir: str | None = None,
                 storage_options: dict[str, Any] | None = None, upload: UploadConfig | None = None,
                 host_map: str | None = None, idle_timeout_s: float = 600.0, on_demand: bool = False,
                 backend: str = "torch", comms: bool | dict[str, Any] | None = None, rpc: bool = True,
                 live: bool | None = None, auto_capture: bool | None = None) -> None:
        self._kw = {"activities": activities, "record_shapes": record_shapes, "profile_memory": profile_memory,
                    "with_stack": with_stack, "with_flops": with_flops, "with_modules": with_modules,
                    "experimental_config": experimental_config}
        self._user_schedule, self._user_ready = schedule, on_trace_ready
        self.run, self.ranks = run, (sorted(set(ranks)) if ranks is not None else None)
        self.metadata, self.layout, self.run_id = dict(metadata or {}), layout, run_id
        self._spool_dir, self._storage_options, self._upload = spool_dir, storage_options, upload
        self.host_map, self.idle_timeout_s, self.on_demand = host_map, idle_timeout_s, on_demand
        self._mod = _backend(backend)
        self._comms = CommsSidecar(comms_options(comms))  # comms=True / {...} / RANKSCOPE_COMMS
        self._rpc = RpcSidecar(rpc)
        self._live = LiveSidecar(live_options(live, auto_capture))  # RUN/live.jsonl (comms_live)
        self._settle = Settler()  # before a profiler stop, gloo's workers end their events (settle.py)
        self.step_num = 0
        self.collector: Collector | None = None
        self._prof: Any = None
        self._actions: dict[int, Any] = {}
        self._win_steps: list[int] = []
        self._sched = SchedSampler()
        self._sched_mark: tuple[int, int | None] | None = None
        self._win_sched: list[list[int | None]] = []
        self._win_start_ns: int | None = None
        self._plans: list[Plan] = []
        self._watcher: Watcher | None = None
        self._last_step = time.monotonic()
        self._step_time = 1.0
        self._stop_evt = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._idle_handle: Any = None
        self._done_prof: Any = None
        self._trace_meta: dict[str, str] = {}
        self._running = False
        self.active = True

    # ---- schedule: user schedule, overridden by trigger plans ----------------------------
    def _schedule(self, step: int) -> Any:
        action = self._action_at(step)
        self._actions[step] = action
        return action

    def _action_at(self, step: int, plans: list[Plan] | None = None) -> Any:
        """What ``step`` does: a trigger plan's action where one covers it, else the user's schedule."""
        A = self._mod.ProfilerAction
        for plan in self._plans if plans is None else plans:
            act = plan.action(step)
            if act is not None and (plan.ranks is None or self._ident_rank() in plan.ranks):
                return {"warmup": A.WARMUP, "record": A.RECORD, "save": A.RECORD_AND_SAVE}[act]
        if self._user_schedule is not None:
            return self._user_schedule(step)
        return A.NONE if self.on_demand else A.RECORD

    def _safe_start(self, start: int) -> int | None:
        """The first step from ``start`` at which a trigger's warm-up may begin.

        torch's profiler cannot go from RECORD to WARMUP: its action map stops the trace without
        saving it, and the next start_trace without prepare_trace crashed every rank (SIGSEGV) when
        a trigger landed inside the job's own ``schedule=`` window. Entering from NONE, WARMUP (the
        job's warm-up is merged with the trigger's) or RECORD_AND_SAVE (its window just saved) is
        safe, so a trigger that lands while the job records is deferred to the end of that window.
        Every rank computes the same step from the same schedule and plan. None when the job
        records every step (no schedule): there is nothing to add then.
        """
        try:
            record = self._mod.ProfilerAction.RECORD
            for s in range(start, start + 100_000):
                if s <= 0:  # no step before the first: the profiler enters from nothing
                    return s
                prev = self._actions[s - 1] if s - 1 in self._actions else self._action_at(s - 1)
                if prev != record:
                    return s
        except Exception:  # a user schedule that raises: never let it reach the training loop
            log.debug("schedule probe failed", exc_info=True)
        return None

    def _ident_rank(self) -> int:
        return self.collector.ident.rank if self.collector else 0

    def _recording(self, step: int) -> bool:
        A = self._mod.ProfilerAction
        return self._actions.get(step) in (A.RECORD, A.RECORD_AND_SAVE)

    def _make_prof(self) -> Any:
        p = self._mod.profile(schedule=self._schedule, on_trace_ready=self._on_ready, **self._kw)
        preset = getattr(p, "preset_metadata_json", None)  # torch >= 2.1; other backends may lack it
        for key, value in self._trace_meta.items():
            if preset is not None:
                preset(key, value)
        p.step_num = self.step_num
        p.current_action = self._schedule(self.step_num)
        return p

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Open the run directory (errors raise here), handshake, start profiling and uploads."""
        ident = M.identify()
        self.active = self.ranks is None or ident.rank in self.ranks
        if self.run is not None:
            run_id = self.run_id or default_run_id(self.run)
            n = _SESSIONS[run_id] = _SESSIONS.get(run_id, -1) + 1
            ranks = self.ranks if self.ranks is not None else list(range(ident.world_size))
            M.handshake(ident, f"{run_id}/{n}", ranks)
            self.collector = Collector(self.run, ident, run_id=run_id, spool_dir=self._spool_dir,
                                       storage_options=self._storage_options, upload=self._upload,
                                       metadata=self.metadata, layout=self.layout, ranks_expected=ranks)
            if ident.rank == 0 and self.host_map:
                M.write_host_map(self.host_map, ident.host_map)
            self.collector.open()
            dist = M._dist()
            store = dist.distributed_c10d._get_default_store() if dist else None
            self._comms.start(self.collector)
            self._watcher = Watcher(self.collector.target, ident.rank, store, f"rankscope/{run_id}/{n}/trigger",
                                    since_ns=time.time_ns(),
                                    on_dump=lambda reason: self._comms.dump(self.collector, reason)).start(self.step_num)
            self._live.start(self.collector, f"rankscope/{run_id}/{n}/live", self.step_num)
        STEPS.mark(self.step_num)
        self._running = True
        self._last_step = time.monotonic()
        self._sched_mark = self._sched.sample()
        if self.active:
            if backend_is_torch(self._mod):
                worldref.release()  # before torch.profiler's first start imports what would pin the group
            self._prof = self._make_prof()
            self._prof.start()
            if self._recording(self.step_num):
                self._win_start_ns = time.time_ns()
            if backend_is_torch(self._mod):
                self._rpc.start(self._kw)
            self._rpc_follow()
        atexit.register(self._atexit)
        if self.idle_timeout_s and self.collector is not None:
            self._stop_evt.clear()
            self._watchdog = threading.Thread(target=self._watch, name="rankscope-idle", daemon=True)
            self._watchdog.start()

    def step(self) -> None:
        """Mark the end of a training step (same meaning as torch.profiler's ``step()``)."""
        now = time.monotonic()
        self._step_time = 0.8 * self._step_time + 0.2 * (now - self._last_step)
        self._last_step = now
        if self.collector is not None:
            self.collector.extra.pop("idle", None)
        if self._watcher is not None:
            plan = self._watcher.poll(self.step_num, self._step_time)
            if plan is not None:
                self._adopt(plan)
        if self.active and self._prof is None and self._running:
            self._prof = self._make_prof()  # reopened after an idle close
            self._prof.start()
        # this step's CPU time and run-queue wait, from the end of the previous step() call (the
        # profiler's own step transition, e.g. stop_trace at a window's end, is not counted)
        sched = self._sched.delta(self._sched_mark, self._sched.sample()) if self._sched_mark else None
        if self._prof is not None and self._recording(self.step_num):
            self._win_steps.append(self.step_num)
            if sched is not None:
                self._win_sched.append([self.step_num, *sched])
        self._live.step(self.step_num, sched)
        self.step_num += 1
        STEPS.mark(self.step_num)
        if self._prof is not None:
            self._settle(self._prof, self.collector)
            self._prof.step()
            if self._recording(self.step_num) and self._win_start_ns is None:
                self._win_start_ns = time.time_ns()
        self._rpc_follow()
        self._sched_mark = self._sched.sample()

    def _rpc_follow(self) -> None:
        self._rpc.follow(self._prof is not None and self._recording(self.step_num))

    def _adopt(self, plan: Plan) -> None:
        """Follow ``plan`` from its agreed start, or from the next step when this rank saw it late.

        Every rank derives the same start from the plan and the job's schedule. A rank whose
        trigger thread was starved past the lead (a loaded host) joins the plan's remaining steps,
        never other ones: its window is a tail of the other ranks' windows, the steps it missed are
        kept in its meta ("missed_steps"), and a rank that saw the plan after its end records nothing.
        """
        asked = plan
        start = self._safe_start(plan.start)
        note: dict[str, Any] = {}
        follow: Plan | None = None
        if start is None:
            note = {"ignored": "the job records every step already (no schedule)"}
        else:
            if start != plan.start:
                note = {"deferred_from_step": plan.start,
                        "reason": "the job's own profiling window was recording; the trigger starts when it ends"}
                plan = replace(plan, start=start)
            mine = plan.ranks is None or self._ident_rank() in plan.ranks
            follow = self._late_join(plan) if mine else plan  # a plan for other ranks: nothing to be late for
            if follow is not plan:
                kept = follow.recorded_steps() if follow is not None else []
                note["missed_steps"] = [s for s in plan.recorded_steps() if s not in kept]
                note["late"] = "this rank saw the plan after its start (its trigger thread was late)"
            if follow is not None:
                self._plans = [p for p in self._plans if p.end > self.step_num] + [follow]
        if self.collector is not None and (self.collector.ident.rank == 0 or note):
            self.collector.extra.setdefault("triggers", []).append(
                {"id": asked.id, "start_step": plan.start if start is not None else None,
                 "seen_wall_ns": time.time_ns(), "created_ns": asked.created_ns, **note})

    def _late_join(self, plan: Plan) -> Plan | None:
        """``plan`` from the first step this rank can still shape (itself when on time), at a step the
        profiler may enter: a late rank's previous step followed its own schedule, and a tail that began
        after one of the job's RECORD steps would break torch's profiler (see :meth:`_safe_start`)."""
        first = self.step_num + 1
        while (follow := plan.from_step(first)) is not None and follow is not plan:
            safe = self._safe_start(follow.start)
            if safe is None or safe == follow.start:
                return follow if safe is not None else None
            first = safe
        return follow

    def _on_ready(self, prof: Any) -> None:
        steps, self._win_steps = self._win_steps, []
        start_ns, self._win_start_ns = self._win_start_ns, None
        extra: dict[str, Any] = {}
        sched, self._win_sched = self._win_sched, []
        if sched:
            # per captured step of this thread: CPU time and time runnable but waiting for a CPU
            extra["sched"] = {"source": self._sched.source, "step": [s[0] for s in sched],
                              "cpu_ns": [s[1] for s in sched], "runq_wait_ns": [s[2] for s in sched],
                              "intra_op_threads": _intra_op_threads()}
        trig = [p.id for p in self._plans if steps and p.action(steps[-1]) == "save"]
        if trig:
            extra["trigger"] = trig[0]
        if self.collector is not None and self.collector.extra.get("idle"):
            extra["closed_by"] = "idle_timeout"
        if self.collector is not None:
            # With a user handler, export here first: a Kineto result can be saved only once, and the
            # user's handler may read it (key_averages, ...) while a background save would run.
            try:
                self.collector.add_window(prof, steps, start_ns, sync=self._user_ready is not None, **extra)
                if start_ns is not None:
                    self._comms.window(self.collector, len(self.collector.windows) - 1, start_ns, time.time_ns())
            except Exception as exc:  # disk full, spool unwritable...: the window is lost, never the job
                log.warning("rankscope: the window of steps %s could not be saved (%s: %s); training goes on",
                            steps, type(exc).__name__, exc)
                self.collector.extra.setdefault("lost_windows", []).append(
                    {"steps": steps, "error": f"{type(exc).__name__}: {exc}"[:300]})
        if self._user_ready is not None:
            self._user_ready(prof if self.collector is None else _UserView(prof, self.collector))

    def stop(self) -> None:
        """Stop profiling (closing an open window), write final metadata, bounded wait for uploads."""
        if not self._running:
            return
        self._running = False
        self._stop_evt.set()
        atexit.unregister(self._atexit)
        self._note_no_steps()
        self._rpc.stop(self.collector)
        self._close_window()
        if self._watchdog is not None:
            self._watchdog.join(timeout=2.0)
            self._watchdog = None
        if self._watcher is not None:
            self._watcher.close()
        self._live.stop()
        self._comms.stop()  # the exit dump goes out with the run, before the uploads close
        if self.collector is not None:
            self._say_where(self.collector.close())

    def _say_where(self, left: int) -> None:
        """One line on stderr at the end, from the first profiled rank only (rank 0 unless ``ranks=``
        leaves it out; a 1,000-rank job prints it once): where the traces are and how many windows this
        rank saved (lost ones counted: their warnings said why), or how many files are still in the spool."""
        col = self.collector
        if col is None or col.ident.rank != min(col.ranks_expected or [0]):
            return
        where = col.run if "://" in col.run else os.path.abspath(col.run)
        lost = len(col.extra.get("lost_windows", [])) + sum(1 for w in col.windows if "error" in w)
        n = len(col.windows) - lost
        counts = f"{n} window{'' if n == 1 else 's'}" + (f", {lost} lost" if lost else "")
        line = (f"rankscope: traces written to {where} ({counts})" if not left else
                f"rankscope: {counts}; {left} file(s) not yet in {where}, kept in spool {col.spool.dir}")
        try:
            sys.stderr.write(line + "\n")  # one write: ranks' lines do not interleave
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - no, closed or broken stderr: the line is lost, never the job
            pass

    NO_STEPS = ("prof.step() was never called: with schedule=... nothing is recorded until the training "
                "loop calls prof.step() once per step")

    def _note_no_steps(self) -> None:
        """A schedule and no step() at all: the common way to profile nothing. One warning line, and
        a note in meta.json so that the analysis of the (trace-less) run can say why."""
        if self._user_schedule is None or self.step_num > 0 or self.on_demand:
            return
        log.warning("rankscope: %s", self.NO_STEPS)
        if self.collector is not None:
            self.collector.extra["no_steps"] = self.NO_STEPS

    def _atexit(self) -> None:
        self.stop()

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- idle backstop --------------------------------------------------------------------
    def _watch(self) -> None:
        period = min(1.0, self.idle_timeout_s / 4)
        while not self._stop_evt.wait(period):
            idle = time.monotonic() - self._last_step
            col = self.collector
            if col is None or idle < self.idle_timeout_s or col.extra.get("idle"):
                continue
            col.extra["idle"] = {"since_step": self.step_num, "idle_s": round(idle, 3),
                                 "window_steps_so_far": list(self._win_steps), "wall_ns": time.time_ns()}
            col.write_meta()
            if self._prof is not None:
                self._idle_handle = _run_on_main_thread(self._close_idle)

    def _close_idle(self) -> None:
        if self._prof is None or time.monotonic() - self._last_step < self.idle_timeout_s:
            return
        self._close_window()

    def _close_window(self) -> None:
        """Stop the backend profiler on this (main) thread; the current step counts as captured."""
        if self._prof is None:
            return
        if self._recording(self.step_num) and self.step_num not in self._win_steps:
            self._win_steps.append(self.step_num)
        prof, self._prof = self._prof, None
        self._done_prof = prof
        self._settle(prof, self.collector, stopping=True)
        prof.stop()
        self._win_steps, self._win_start_ns = [], None

    @property
    def rpc_calls(self) -> list[dict[str, Any]]:
        """The RPC calls profiled by this profile (after ``stop()``; with ``run=`` they are also in the run)."""
        return self._rpc.calls

    # ---- torch.profiler API passthrough -------------------------------------------------
    def add_metadata(self, key: str, value: str) -> None:
        """Add a string key/value to meta.json's metadata and to the trace of this and every later window."""
        import json

        self.add_metadata_json(key, json.dumps(str(value)))

    def add_metadata_json(self, key: str, value: str) -> None:
        """Add a JSON-encoded value to meta.json's metadata (decoded) and to this and every later window's trace."""
        import json

        decoded = json.loads(value)  # invalid JSON raises here, not inside torch
        self.metadata[key] = decoded
        self._trace_meta[key] = value
        if self.collector is not None:
            self.collector.metadata[key] = decoded
        if self._prof is not None:
            if hasattr(self._prof, "preset_metadata_json"):
                self._prof.preset_metadata_json(key, value)  # torch adds presets at each window's start
            if self._recording(self.step_num):  # the window now recording started without it
                self._prof.add_metadata_json(key, value)

    def export_chrome_trace(self, path: str) -> None:
        """Export the last window's trace (like torch's; ``.gz`` paths are gzipped)."""
        if self.collector is not None and self.collector.windows:
            _write_json(path, self.collector.window_json(-1))
        else:
            self._last().export_chrome_trace(path)

    def export_stacks(self, path: str, metric: str = "self_cpu_time_total") -> None:
        """Folded stacks (``frame;frame;frame value`` lines) for flamegraph.pl and speedscope.

        Needs ``with_stack=True`` and, on torch 2.x, ``experimental_config=
        torch._C._profiler._ExperimentalConfig(verbose=True)`` (else torch writes an empty file).
        """
        if self.collector is not None:
            self.collector.exporter.wait(self.collector.cfg.exit_timeout_s)  # no parse during a background save
        self._last().export_stacks(path, metric)

    def _last(self) -> Any:
        if self._prof is None and self._done_prof is not None:
            return self._done_prof
        if self._prof is None:
            raise RuntimeError("rankscope.profile: no profiler on this rank (not started, or ranks= excludes it)")
        return self._prof


def _intra_op_threads() -> int | None:
    """torch's intra-op threads (``torch.get_num_threads``): with one, an operator on the CPU runs on the thread
    that called it, so that thread's CPU time is the operators' work."""
    try:
        import torch

        return int(torch.get_num_threads())
    except Exception:  # noqa: BLE001 - a field for the analysis; never the job's problem
        return None
