"""On-demand capture: a request file in the run directory starts a window on running ranks.

``rankscope trigger RUN --steps N`` writes ``RUN/control/trigger-<id>.json``. On rank 0 a
background thread lists ``RUN/control/`` once per ``poll_s`` (1 s; one LIST per second for the
whole job, not one per rank, and never on the training thread), picks a start step a little
ahead and publishes the plan under one key of the c10d store; the other ranks' threads look
at that key every ``store_poll_s`` (0.25 s). At a step boundary the training thread only
takes a plan a thread found (no I/O). The lead in steps covers the other ranks' polling, so
every rank starts at the same step; a rank whose thread was later than that records the rest of
the same steps and lists the ones it missed (``Plan.from_step``). Without torch.distributed
every process reads the file itself (no alignment between processes then).
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from rankscope.store import layout as L


@dataclass(frozen=True)
class Plan:
    """An agreed capture: warm up from ``start``, record ``steps`` steps after the warm-up."""

    id: str
    start: int
    warmup: int
    steps: int
    ranks: tuple[int, ...] | None
    created_ns: int
    dump: bool = False  # also dump the collective recorder (on the trigger thread, at once)

    def action(self, step: int) -> str | None:
        """'warmup', 'record', 'save' (last recorded step) or None outside the plan."""
        k = step - self.start
        if k < 0 or k >= self.warmup + self.steps:
            return None
        if k < self.warmup:
            return "warmup"
        return "save" if k == self.warmup + self.steps - 1 else "record"

    @property
    def end(self) -> int:
        return self.start + self.warmup + self.steps

    def recorded_steps(self) -> list[int]:
        return list(range(self.start + self.warmup, self.end))

    def from_step(self, first: int) -> Plan | None:
        """This plan for a rank that can start no earlier than ``first``: itself, its tail, or None.

        The tail keeps the plan's step numbers (a late rank records the same steps as the others,
        fewer of them) and what is left of the warm-up."""
        if first <= self.start:
            return self
        if first >= self.end:
            return None
        warmup = max(0, self.start + self.warmup - first)
        return replace(self, start=first, warmup=warmup, steps=self.end - first - warmup)


def request_doc(request_id: str, steps: int, warmup: int = 1, ranks: list[int] | None = None,
                dump: bool = False) -> dict[str, Any]:
    """Body of a trigger request file (``steps`` 0 with ``dump``: a collective dump only)."""
    return {"format": L.TRIGGER_FORMAT, "id": request_id, "steps": int(steps), "warmup": int(warmup),
            "ranks": ranks, "created_ns": time.time_ns(), "dump": bool(dump)}


class Watcher:
    """Looks for trigger requests on a background thread; the training thread only picks up plans.

    Rank 0 (or every process without a c10d store) lists ``RUN/control/`` every ``poll_s``;
    the other ranks check one store key every ``store_poll_s``. No storage or store I/O
    happens on the training thread: :meth:`poll` at a step boundary only takes a plan the
    thread found. Rank 0 picks the start step from the step in progress: the next step when
    enough of the current one is left for the other ranks to see the plan (3 x
    ``store_poll_s``), else as many steps later as that time needs. Latency from request to
    the start of the warm-up: at most ``poll_s`` plus about one step.
    """

    def __init__(self, target: Any, rank: int, store: Any | None, key: str, since_ns: int,
                 poll_s: float = 1.0, store_poll_s: float = 0.25, on_dump: Any = None) -> None:
        self.on_dump = on_dump  # called (reason) on this thread for a request with "dump": a hung rank dumps too
        self.target, self.rank, self.store, self.key = target, rank, store, key
        self.since_ns, self.poll_s, self.store_poll_s = since_ns, poll_s, store_poll_s
        self.seen: set[str] = set()
        self._found: list[Plan] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cur, self._step_start, self._step_time = 0, time.monotonic(), 1.0

    @property
    def reads_file(self) -> bool:
        return self.store is None or self.rank == 0

    def start(self, step: int = 0) -> Watcher:
        """Start the background thread; ``step`` is the step now in progress."""
        self._cur, self._step_start = step, time.monotonic()
        self._thread = threading.Thread(target=self._run, name="rankscope-trigger", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def poll(self, step: int, step_time_s: float) -> Plan | None:
        """Call at the end of ``step`` (training thread, no I/O); a plan to follow or None."""
        self._cur, self._step_start, self._step_time = step + 1, time.monotonic(), step_time_s
        with self._lock:
            return self._found.pop(0) if self._found else None

    def _run(self) -> None:
        period = self.poll_s if self.reads_file else self.store_poll_s
        while not self._stop.wait(period):
            try:
                plan = self._from_file() if self.reads_file else self._from_store()
            except Exception:  # noqa: BLE001 - a broken request or a dead store must never stop training
                plan = None
            if plan is not None and plan.dump and self.on_dump is not None:
                try:
                    self.on_dump(f"trigger {plan.id}")
                except Exception:  # noqa: BLE001 - never the job
                    pass
            if plan is not None and plan.steps > 0:
                with self._lock:
                    self._found.append(plan)

    def start_step(self) -> int:
        """First step of a plan found now: the next one if the other ranks have time to see it."""
        cur = self._cur
        if self.store is None:
            return cur + 1
        # the other ranks' threads look every store_poll_s; the lead covers two missed looks (a loaded
        # host). A rank later than that joins the plan's remaining steps (Plan.from_step).
        need = 3.0 * self.store_poll_s
        left = self._step_time - (time.monotonic() - self._step_start)
        if left >= need:
            return cur + 1
        return cur + 1 + min(50, math.ceil((need - max(left, 0.0)) / max(self._step_time, 1e-3)))

    def _from_file(self) -> Plan | None:
        fs, cdir = self.target.fs, self.target.path(L.CONTROL_DIR)
        fs.invalidate_cache(cdir)
        try:
            names = sorted(fs.ls(cdir, detail=False))
        except FileNotFoundError:
            return None
        for name in names:
            base = name.rsplit("/", 1)[-1]
            if not (base.startswith("trigger-") and base.endswith(".json")) or base.endswith(".started.json"):
                continue
            req = json.loads(fs.cat_file(name))
            if req.get("id") in self.seen or int(req.get("created_ns", 0)) < self.since_ns:
                continue
            self.seen.add(req["id"])
            ranks = tuple(req["ranks"]) if req.get("ranks") is not None else None
            plan = Plan(req["id"], self.start_step(), int(req.get("warmup", 1)), int(req["steps"]), ranks,
                        int(req["created_ns"]), bool(req.get("dump", False)))
            if self.store is not None:
                self.store.set(self.key, json.dumps(asdict(plan)))
            return plan
        return None

    def _from_store(self) -> Plan | None:
        if self.store is None or not self.store.check([self.key]):
            return None
        d = json.loads(bytes(self.store.get(self.key)))
        if d["id"] in self.seen:
            return None
        self.seen.add(d["id"])
        d["ranks"] = tuple(d["ranks"]) if d.get("ranks") is not None else None
        return Plan(**d)


def write_request(run: str, steps: int, warmup: int = 1, ranks: list[int] | None = None,
                  storage_options: dict[str, Any] | None = None, dump: bool = False) -> tuple[str, str]:
    """Leave a trigger request in ``run``; returns (request id, path written)."""
    import uuid

    from rankscope.store.fs import open_target
    from rankscope.store.uploader import publish_file

    target = open_target(run, storage_options)
    rid = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    rel = L.trigger_rel(rid)
    data = json.dumps(request_doc(rid, steps, warmup, ranks, dump)).encode()
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        tmp.write(data)
        tmp.flush()
        publish_file(target, tmp.name, rel, len(data))
    return rid, target.path(rel)
