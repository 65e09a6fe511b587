"""``rankscope watch RUN``: follow a running job's live straggler signal (``RUN/live.jsonl``).

Under ``rankscope.profile`` (2+ ranks, the collective recorder on: the default), rank 0 scores every step
while the job runs and appends one JSON line per scored step to ``RUN/live.jsonl``:
``{"step", "straggler": rank or null, "cause", "scores": {rank: score}, "late", ...}``. A score is NVRx's
relative performance score: the fastest rank's own time in the step / this rank's (1.0 = the fastest; a
rank's own time is the step less its waits for the other ranks, from the collectives' arrival order).
``late`` is the rank the others waited for in that step; ``straggler`` is set once the same rank has been
late in 5 of the last 7 steps (``RANKSCOPE_LIVE_STEPS``), with its likely cause from the CPU samples:
more CPU work, waiting for a CPU, or blocked outside the collectives (I/O, sleep, a lock). The job's own
stderr says it once: ``rankscope: rank 2 slow for 5 steps (...)``.

RUN can be a directory or an fsspec URL (s3://...): this reads the file again every --interval seconds
and prints what was added. Ctrl-C stops it.

examples:
  rankscope watch runs/exp1                 one line per step as the job runs: step, scores, the late rank
  rankscope watch runs/exp1 --alarms        only the steps that name a straggler
  rankscope watch runs/exp1 --json | jq .   the lines as written
  rankscope watch runs/exp1 --once          what is there now, then exit
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any

HELP = "follow a running job's live straggler signal (RUN/live.jsonl, written by rank 0 each step)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run directory or fsspec URL the job writes to")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between looks at the file (default 1)")
    p.add_argument("--once", action="store_true", help="print what is there now and exit")
    p.add_argument("--alarms", action="store_true", help="print only the steps that name a straggler")
    p.add_argument("--json", action="store_true", help="print the lines as written (one JSON object per line)")
    p.add_argument("--from-end", action="store_true", help="skip what is already there; print only new steps")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="stop after S seconds without a new line (default: follow until Ctrl-C)")


def describe(d: dict[str, Any]) -> str:
    """One line per step, for a person."""
    scores = d.get("scores") or {}
    low = sorted(scores.items(), key=lambda kv: kv[1])[:4]
    worst = ", ".join(f"rank {r} {s:.2f}" for r, s in low)
    head = f"step {d.get('step')}: {d.get('step_ms', 0):.0f} ms"
    if d.get("straggler") is not None:
        return (f"{head}  ✖ rank {d['straggler']} slow for {d.get('slow_steps', '?')} steps: {d.get('cause')}; "
                f"{d.get('evidence', '')}" + (f"; capture {d['capture']} requested" if d.get("capture") else ""))
    if d.get("contention") is not None:
        return f"{head}  rank {d['contention']} waits for a CPU (host contention; not named)  lowest: {worst}"
    late = f"  late: rank {d['late']}" if d.get("late") is not None else ""
    return f"{head}{late}  lowest: {worst}"


def run(args: argparse.Namespace) -> int:
    from rankscope.collect.comms.live import LIVE_FILE
    from rankscope.errors import RankscopeError
    from rankscope.store.fs import open_target

    target = open_target(args.run)
    path = target.path(LIVE_FILE)
    seen, last_new, said_waiting = 0, time.monotonic(), False
    first = True
    try:
        while True:
            try:
                lines = target.fs.cat_file(path).decode(errors="replace").splitlines()
            except FileNotFoundError:
                lines = []
                if args.once:
                    raise RankscopeError(f"watch: no {LIVE_FILE} in {args.run} (the job writes it from its first "
                                         "scored step: rankscope.profile, 2+ ranks, the collective recorder on)")
                if not said_waiting:
                    print(f"waiting for {path} ...", flush=True)
                    said_waiting = True
            if first and args.from_end:
                seen = len(lines)
            first = False
            for raw in lines[seen:]:
                _show(raw, args)
            if len(lines) > seen:
                seen, last_new = len(lines), time.monotonic()
            if args.once or (args.timeout is not None and time.monotonic() - last_new > args.timeout):
                return 0
            time.sleep(max(0.05, args.interval))
            target.fs.invalidate_cache(path)
    except KeyboardInterrupt:
        return 0


def _show(raw: str, args: argparse.Namespace) -> None:
    try:
        d = json.loads(raw)
    except ValueError:
        return  # a line being written (object stores rewrite the whole file)
    if args.alarms and d.get("straggler") is None:
        return
    print(raw if args.json else describe(d), flush=True)
