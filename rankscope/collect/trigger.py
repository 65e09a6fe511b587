"""On-demand capture: a request file in the run directory starts a window on running ranks.

``rankscope trigger RUN --steps N`` writes ``RUN/control/trigger-<id>.json``. Rank 0 lists
``RUN/control/`` at most once per ``poll_s`` (1 s) at a step boundary (one LIST per second for
the whole job, not one per rank), picks a start step a little ahead and publishes the plan
under one key of the c10d store; the other ranks look at that key at most every
``store_poll_s`` (0.25 s). The lead of ``margin`` steps covers that polling, so every rank
starts at the same step. Without torch.distributed every process reads the file itself.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
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


def request_doc(request_id: str, steps: int, warmup: int = 1, ranks: list[int] | None = None) -> dict[str, Any]:
    """Body of a trigger request file."""
    return {"format": L.TRIGGER_FORMAT, "id": request_id, "steps": int(steps), "warmup": int(warmup),
            "ranks": ranks, "created_ns": time.time_ns()}


class Watcher:
    """Checks for trigger requests at step boundaries; cheap when there is nothing to do."""

    def __init__(self, target: Any, rank: int, store: Any | None, key: str, since_ns: int,
                 poll_s: float = 1.0, store_poll_s: float = 0.25) -> None:
        self.target, self.rank, self.store, self.key = target, rank, store, key
        self.since_ns, self.poll_s, self.store_poll_s = since_ns, poll_s, store_poll_s
        self.seen: set[str] = set()
        self._next = 0.0

    def poll(self, step: int, step_time_s: float) -> Plan | None:
        """Call at the end of ``step``; returns a new plan to follow (start > step) or None."""
        now = time.monotonic()
        reads_file = self.store is None or self.rank == 0
        if now < self._next:
            return None
        self._next = now + (self.poll_s if reads_file else self.store_poll_s)
        try:
            return self._from_file(step, step_time_s) if reads_file else self._from_store()
        except Exception:  # noqa: BLE001 - a broken request must never stop training
            return None

    def _from_file(self, step: int, step_time_s: float) -> Plan | None:
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
            # Enough steps ahead that ranks polling the store every store_poll_s see it in time.
            margin = 1 + min(50, math.ceil(2 * self.store_poll_s / max(step_time_s, 1e-3)))
            ranks = tuple(req["ranks"]) if req.get("ranks") is not None else None
            plan = Plan(req["id"], step + 1 + (margin if self.store is not None else 0), int(req.get("warmup", 1)),
                        int(req["steps"]), ranks, int(req["created_ns"]))
            if self.store is not None:
                self.store.set(self.key, json.dumps(asdict(plan)))
            return plan
        return None

    def _from_store(self) -> Plan | None:
        if not self.store.check([self.key]):
            return None
        d = json.loads(bytes(self.store.get(self.key)))
        if d["id"] in self.seen:
            return None
        self.seen.add(d["id"])
        d["ranks"] = tuple(d["ranks"]) if d.get("ranks") is not None else None
        return Plan(**d)


def write_request(run: str, steps: int, warmup: int = 1, ranks: list[int] | None = None,
                  storage_options: dict[str, Any] | None = None) -> tuple[str, str]:
    """Leave a trigger request in ``run``; returns (request id, path written)."""
    import uuid

    from rankscope.store.fs import open_target
    from rankscope.store.uploader import publish_file

    target = open_target(run, storage_options)
    rid = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    rel = L.trigger_rel(rid)
    data = json.dumps(request_doc(rid, steps, warmup, ranks)).encode()
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        tmp.write(data)
        tmp.flush()
        publish_file(target, tmp.name, rel, len(data))
    return rid, target.path(rel)
