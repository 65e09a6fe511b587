"""Drive a 2-rank torchrun job (gloo) in ``trigger`` mode and fire ``rankscope trigger`` at it.

Used by the e2e test and by ``bench/trigger_latency.py``. The job runs on-demand only (records
nothing until triggered), steps every ~50 ms, and stops when the stop file appears.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fixtures_s3 import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "e2e", "collect_worker.py")


@dataclass
class Capture:
    """One trigger and what each rank captured for it."""

    id: str
    created_ns: int
    windows: dict[int, dict[str, Any]]  # rank -> meta.json window
    seen_ns: int | None  # rank 0 adopted the request (read the file)

    notes: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its meta "triggers" entry, if any

    def steps(self, rank: int) -> list[int]:
        return list(self.windows[rank]["steps"]) if rank in self.windows else []

    def check_aligned(self, n: int, warmup: int) -> None:
        """Every rank recorded the plan's ``n`` steps (from the start rank 0 published, after ``warmup``
        steps), less the ones its own meta says it missed (its trigger thread late on a loaded host): the
        head of them, never other steps."""
        start = self.notes[0]["start_step"]
        ref = list(range(start + warmup, start + warmup + n))
        for r in self.windows.keys() | self.notes.keys():
            missed = self.notes.get(r, {}).get("missed_steps", [])
            assert missed == ref[:len(missed)], (r, ref, self.notes)
            assert self.steps(r) == ref[len(missed):], (r, ref, self.windows, self.notes)

    def latency_s(self) -> dict[int, float]:
        """Per rank: request written -> first recorded step starts."""
        return {r: (w["start_wall_ns"] - self.created_ns) / 1e9 for r, w in self.windows.items()}


class TriggerJob:
    """A running 2-rank job; ``trigger()`` runs the real CLI and waits for both ranks' windows."""

    def __init__(self, work: Path, nproc: int = 2, step_s: float = 0.05, mode: str = "trigger") -> None:
        self.work, self.nproc = work, nproc
        self.run = work / "run"
        self.stop_file = work / "STOP"
        self.lines: list[str] = []
        env = {**os.environ, "PYTHONPATH": ROOT, "RS_SPOOL": str(work / "spool"), "RS_STOP": str(self.stop_file),
               "OMP_NUM_THREADS": "1", "RS_STEP_S": str(step_s)}
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
               "--master-addr=127.0.0.1", f"--master-port={free_port()}", WORKER, str(self.run), mode]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_started(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        # count occurrences, not lines: two ranks writing at once can share one line
        while sum(x.count("TRAINING-STARTED") for x in self.lines) < self.nproc:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("job did not start:\n" + "".join(self.lines[-40:]))
            time.sleep(0.05)
        time.sleep(1.5)  # some steps: the step-time estimate (moving average) settles

    def _meta(self, rank: int) -> dict[str, Any]:
        try:
            return json.loads((self.run / f"ranks/{rank}/meta.json").read_text())
        except (OSError, ValueError):
            return {}

    def trigger(self, steps: int = 3, warmup: int = 1, timeout: float = 120.0, ranks: str | None = None) -> Capture:
        """``rankscope trigger RUN --steps N [--ranks R]``, then wait until those ranks published the window."""
        before = set(os.listdir(self.run / "control")) if (self.run / "control").is_dir() else set()
        cmd = [sys.executable, "-m", "rankscope.cli", "trigger", str(self.run), "--steps", str(steps),
               "--warmup", str(warmup)] + (["--ranks", ranks] if ranks else [])
        subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": ROOT})
        want = [int(r) for r in ranks.split(",")] if ranks else list(range(self.nproc))
        (name,) = set(os.listdir(self.run / "control")) - before
        req = json.loads((self.run / "control" / name).read_text())
        deadline = time.monotonic() + timeout
        while True:
            metas = {r: self._meta(r) for r in want}
            wins = {r: [w for w in m.get("windows", []) if w.get("trigger") == req["id"]] for r, m in metas.items()}
            notes = {r: t for r, m in metas.items() for t in m.get("triggers", []) if t["id"] == req["id"]}
            # a rank that saw the plan after its end records nothing for it and says so in its meta
            over = {r for r, t in notes.items() if r != 0 and t.get("missed_steps") and not wins[r]
                    and len(t["missed_steps"]) == steps}
            if all(wins[r] for r in want if r not in over):
                seen = [t["seen_wall_ns"] for t in self._meta(0).get("triggers", []) if t["id"] == req["id"]]
                return Capture(req["id"], int(req["created_ns"]), {r: w[0] for r, w in wins.items() if w},
                               seen[0] if seen else None, notes)
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no window for trigger {req['id']}:\n" + "".join(self.lines[-40:]))
            time.sleep(0.1)

    def step_time_s(self, cap: Capture) -> float:
        """Mean step time inside the captured window (from its wall-clock span)."""
        w = next(iter(cap.windows.values()))
        return (w["end_wall_ns"] - w["start_wall_ns"]) / 1e9 / max(1, len(w["steps"]))

    def stop(self, timeout: float = 60.0) -> int:
        self.stop_file.write_text("stop")
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
