"""Live straggler signal: every rank reports its steps through the c10d store, rank 0 scores them and
writes ``RUN/live.jsonl`` (one line per scored step; :mod:`rankscope.collect.comms.livescore` scores).

On the training thread ``step()`` only appends (step, wall time, CPU samples) to a deque. A background
thread per rank (``rankscope-live``), every ``period_s``:

1. reads the collectives created since its last look: the timed engine's ring from its newest entries back
   (cheap), or Flight Recorder's whole ring, which costs tens of ms for 2000 entries, so it is read at most
   once per ``FR_DUTY`` of the time that read took (about every 4 s on this project's machines);
2. gives each finished step the collectives it issued and, once the ring has been read past the step's end,
   publishes the steps that became ready in its last two looks (at most ``KEEP`` each) under one key of the
   job's store (own client connection:
   :mod:`rankscope.collect.comms.watch`);
3. on rank 0, reads every rank's key (a ``check`` first: never a wait on a missing key), scores each step all
   ranks have reported, appends its line to ``RUN/live.jsonl``, prints an alarm once per episode on stderr and,
   with ``auto_capture``, asks every rank to capture the next steps (a trigger request:
   :mod:`rankscope.collect.trigger`).

Never a collective, never the store on the training thread; every failure is swallowed.
"""
from __future__ import annotations

import bisect
import collections
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from rankscope.collect.comms.livescore import StepReport, Streaks, score_step

log = logging.getLogger(__name__)
LIVE_FILE = "live.jsonl"
KEEP = 512  # steps per batch: a Flight Recorder read every ~4 s readies ~100 steps of 40 ms at once
MAX_COLLECTIVES = 64  # per step and rank: the first ones by sequence, the same on every rank
FR_DUTY = 0.005  # Flight Recorder's ring is read at most 0.5 % of the time
STOP_WAIT_S = 1.0  # at the end, how long rank 0 waits for the other ranks' last steps
MAX_LINES = 20_000  # live.jsonl on an object store keeps the last 20,000 steps (the whole file is rewritten)


def options(live: bool | None, auto_capture: bool | None, slow_steps: int | None = None) -> dict[str, Any] | None:
    """``live=None``: on unless ``RANKSCOPE_LIVE=0``; ``auto_capture=None``: ``RANKSCOPE_AUTO_CAPTURE=1``."""
    env = os.environ.get("RANKSCOPE_LIVE", "").strip().lower()
    if live is False or (live is None and env in ("0", "off", "false", "no")):
        return None
    if auto_capture is None:
        auto_capture = os.environ.get("RANKSCOPE_AUTO_CAPTURE", "").strip().lower() in ("1", "on", "true", "yes")
    n = slow_steps or int(os.environ.get("RANKSCOPE_LIVE_STEPS", "5") or 5)
    return {"auto_capture": bool(auto_capture), "slow_steps": max(1, n), "capture_steps": 3}


class Arrivals:
    """The collectives this rank issued since the last look: (group, seq, created ns)."""

    def __init__(self) -> None:
        self.last_id, self.last_ns = -1, 0
        self.next_fr = 0.0

    def due(self, force: bool = False) -> bool:
        return force or _timed() is not None or time.monotonic() >= self.next_fr

    def read(self) -> list[tuple[str, int, int]]:
        t = _timed()
        if t is not None:
            got = t.since(self.last_id)
            self.last_id = max([self.last_id] + [int(e.get("record_id") or 0) for e in got])
        else:  # two rings (NCCL's, gloo's) number their entries apart: new ones are found by creation time
            from rankscope.collect.comms import fr_doc

            t0 = time.perf_counter()
            got = [e for e in fr_doc().get("entries", []) if int(e.get("time_created_ns") or 0) > self.last_ns]
            self.next_fr = time.monotonic() + (time.perf_counter() - t0) / FR_DUTY
            self.last_ns = max([self.last_ns] + [int(e.get("time_created_ns") or 0) for e in got])
        out = []
        for e in got:
            if e.get("is_p2p") or e.get("collective_seq_id") is None:
                continue
            pg = e.get("process_group") or ("", "")
            out.append((str(pg[0]), int(e["collective_seq_id"]), int(e.get("time_created_ns") or 0)))
        return out


def _timed() -> Any:
    from rankscope.collect.comms import timed_pg

    return timed_pg if timed_pg.active() else None


class LiveSidecar:
    """The live signal of one ``rankscope.profile`` (off when ``opts`` is None)."""

    def __init__(self, opts: dict[str, Any] | None) -> None:
        self.opts = opts
        self._q: collections.deque[tuple[int, int, int | None, int | None]] = collections.deque(maxlen=4096)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ---- training thread -------------------------------------------------------------------------
    def step(self, step: int, sched: tuple[int, int | None] | None) -> None:
        """Step ``step`` ended now (its CPU time and run-queue wait, or None): one append."""
        if self._thread is not None:
            self._q.append((step, time.time_ns(), sched[0] if sched else None, sched[1] if sched else None))

    def start(self, collector: Any, key: str, step: int) -> None:
        if not self.opts or collector is None or collector.ident.world_size < 2:
            return
        try:
            from rankscope.collect import comms

            if not comms.recording():
                return
            self._w = _Worker(collector, key, step, self.opts, self._q)
            self._thread = threading.Thread(target=self._run, name="rankscope-live", daemon=True)
            self._thread.start()
        except Exception:  # noqa: BLE001 - never the job
            log.debug("rankscope: the live signal could not start", exc_info=True)
            self._thread = None

    def stop(self) -> None:
        """A last look (every step so far), then the thread ends."""
        th, self._thread = self._thread, None
        if th is None:
            return
        self._stop.set()
        th.join(timeout=10)

    def _run(self) -> None:
        w = self._w
        while not self._stop.wait(w.period_s):
            w.tick()
        w.tick(final=True)
        w.close()


class _Worker:
    """The ``rankscope-live`` thread's state (one per rank)."""

    def __init__(self, collector: Any, key: str, step: int, opts: dict[str, Any],
                 q: collections.deque[tuple[int, int, int | None, int | None]]) -> None:
        ident = collector.ident
        self.collector, self.key, self.opts, self.q = collector, key, opts, q
        self.rank, self.world = ident.rank, ident.world_size
        off, err = ident.offset_to_rank0_ns, ident.offset_error_ns
        # rank 0's clock; an offset within its own error bound (same host) is noise, not a correction
        self.offset = int(off) if off is not None and abs(off) > max(1_000_000, 2 * (err or 0)) else 0
        self.period_s = 0.5
        self.prev: tuple[int, int] = (step, time.time_ns())
        self.pending: list[StepReport] = []
        self.ready: list[StepReport] = []  # ready since the last publish (rank 0: since the last scoring)
        self.batches: collections.deque[list[StepReport]] = collections.deque(maxlen=2)  # a missed look tolerated
        self.loose: list[tuple[str, int, int]] = []  # collectives read but not yet in a finished step
        self.arrivals = Arrivals()
        self.signal: Any = None
        self.next_store = 0.0
        if self.rank == 0:
            self.reports: dict[int, dict[int, StepReport]] = collections.defaultdict(dict)
            self.scored = -1
            self.streaks = Streaks(n=int(opts["slow_steps"]))
            # lines not yet appended (a file system), or the file's last MAX_LINES lines (an object store
            # rewrites the whole file): bounded either way
            self.lines: collections.deque[str] = collections.deque(maxlen=MAX_LINES)
            self.dirty = False
            self.last_write = 0.0

    # ---- every rank ----------------------------------------------------------------------------------
    def tick(self, final: bool = False) -> None:
        try:
            self._collect(final)
            self._publish()
            if self.rank == 0:
                self._score(final)
        except Exception:  # noqa: BLE001 - the live signal must never take the job down
            log.debug("rankscope: live signal tick failed", exc_info=True)

    def _collect(self, final: bool) -> None:
        while self.q:
            step, t1, cpu, rq = self.q.popleft()
            t0 = self.prev[1] if self.prev[0] == step else t1
            self.prev = (step + 1, t1)
            self.pending.append(StepReport(step, t0 + self.offset, t1 + self.offset, cpu, rq))
        if not self.pending or not self.arrivals.due(final):
            return
        now = time.time_ns() + self.offset
        self.loose += [(g, s, t + self.offset) for g, s, t in self.arrivals.read()]
        self.loose.sort(key=lambda a: a[2])
        ends = [r.t1 for r in self.pending]
        for g, s, t in self.loose:
            i = bisect.bisect_right(ends, t)
            if i < len(ends) and self.pending[i].t0 <= t and len(self.pending[i].arrivals) < MAX_COLLECTIVES:
                self.pending[i].arrivals.setdefault((g, s), t)
        self.loose = [a for a in self.loose if a[2] >= ends[-1]]  # the step in progress: kept for later
        self.ready = (self.ready + [r for r in self.pending if r.t1 <= now])[-KEEP:]
        self.pending = [r for r in self.pending if r.t1 > now]

    def _store(self) -> Any:
        if self.signal is None and time.monotonic() >= self.next_store:  # opened once, then kept
            from rankscope.collect.comms.watch import RETRY_S, StoreSignal

            self.next_store = time.monotonic() + RETRY_S
            sig = StoreSignal.open()
            self.signal = sig.store if sig is not None else None
        return self.signal

    def _publish(self) -> None:
        if self.rank == 0 or not self.ready:
            return
        store = self._store()
        if store is None:
            return
        try:
            store.set(f"{self.key}/{self.rank}", json.dumps([r.to_json() for b in [*self.batches, self.ready]
                                                             for r in b][-KEEP:]))
            self.batches.append(self.ready)
            self.ready = []
        except Exception:  # noqa: BLE001 - the store is busy or gone: try later (same connection)
            pass

    # ---- rank 0 --------------------------------------------------------------------------------------
    def _score(self, final: bool) -> None:
        for rep in self.ready:
            self.reports[rep.step][0] = rep
        deadline = time.monotonic() + (STOP_WAIT_S if final else 0.0)
        while True:
            self._gather()
            if not final or time.monotonic() >= deadline or self._complete_upto(self.ready[-1].step if self.ready
                                                                                 else -1):
                break
            time.sleep(0.1)
        for step in sorted(self.reports):
            reps = self.reports[step]
            if step <= self.scored or len(reps) < self.world:
                continue
            self.scored = step
            line, alarm = self.streaks.add(score_step(reps))
            if alarm:
                _say(alarm)
                if self.opts.get("auto_capture"):
                    self._capture(line)
            line["wall_ns"] = time.time_ns()
            self.lines.append(json.dumps(line))
            self.dirty = True
        for step in [s for s in self.reports if s <= self.scored]:
            del self.reports[step]
        self._write(final)

    def _complete_upto(self, step: int) -> bool:
        return step < 0 or step <= self.scored or len(self.reports.get(step, {})) >= self.world

    def _gather(self) -> None:
        store = self._store()
        if store is None:
            return
        keys = [f"{self.key}/{r}" for r in range(1, self.world)]
        try:  # every key at once; one by one only while some rank has published nothing yet
            have = keys if store.check(keys) else [k for k in keys if store.check([k])]
            vals = store.multi_get(have) if have else []
        except Exception:  # noqa: BLE001
            return
        for k, v in zip(have, vals):
            r = int(k.rsplit("/", 1)[1])
            for d in json.loads(bytes(v)):
                rep = StepReport.from_json(d)
                if rep.step > self.scored:
                    self.reports[rep.step][r] = rep

    def _capture(self, line: dict[str, Any]) -> None:
        from rankscope.collect.trigger import write_request

        try:
            steps = int(self.opts.get("capture_steps", 3))
            rid, _ = write_request(self.collector.run, steps, 1, storage_options=self.collector.target.options)
            line["capture"] = rid
            self.collector.extra.setdefault("auto_captures", []).append(
                {"id": rid, "step": line["step"], "rank": line["straggler"], "cause": line["cause"]})
        except Exception:  # noqa: BLE001
            log.debug("rankscope: auto capture request failed", exc_info=True)

    def _write(self, final: bool) -> None:
        """Append the new lines to RUN/live.jsonl (object stores: the whole file, at most every 5 s)."""
        if not self.dirty:
            return
        t = self.collector.target
        path = t.path(LIVE_FILE)
        try:
            if not t.object_store:
                with t.fs.open(path, "ab") as fh:
                    fh.write("".join(x + "\n" for x in self.lines).encode())
                self.lines.clear()
            elif final or time.monotonic() - self.last_write >= 5.0:
                t.fs.pipe_file(path, "".join(x + "\n" for x in self.lines).encode())
                self.last_write = time.monotonic()
            else:
                return
            self.dirty = False
        except Exception:  # noqa: BLE001 - storage trouble: the lines stay in memory, tried again next tick
            log.debug("rankscope: writing %s failed", LIVE_FILE, exc_info=True)

    def close(self) -> None:
        self.signal = None


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
