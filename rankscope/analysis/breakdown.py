"""Per-rank × per-step time breakdown that sums to each step's wall time.

Pattern: every step window is split into elementary segments, each attributed to exactly one
class by priority: compute > exposed communication > data wait > idle (free). Communication
that runs under compute is "overlapped".

- GPU traces: compute = non-communication kernels, memcpy and memset; communication = NCCL /
  RCCL / HCCL kernels; data wait = host DataLoader spans while the device does neither.
- CPU-only traces (gloo): compute = host operators on the threads that run the steps,
  communication = ``gloo:*`` / collective spans on any thread, data wait = DataLoader spans.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from rankscope.analysis.base import Result
from rankscope.analysis.intervals import coverage, per_window
from rankscope.model.run import Run

COLUMNS = ["rank", "step", "ts", "end", "wall", "computing", "communication", "overlapped",
           "comm_exposed", "data_wait", "free", "complete", "source"]
_EVENT_COLS = ["name", "kind", "ts", "dur", "tid", "is_comm"]


def _is_data(names: np.ndarray) -> np.ndarray:
    return np.char.find(names.astype(str), "DataLoader") >= 0


def interval_sets(ev: pa.Table, step_tids: np.ndarray) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], str]:
    """Compute / communication / data interval sets of one rank and which side they come from."""
    kind = np.asarray(ev.column("kind").to_numpy(zero_copy_only=False)).astype(str)
    names = np.asarray(ev.column("name").to_numpy(zero_copy_only=False))
    ts, dur = np.asarray(ev.column("ts")), np.asarray(ev.column("dur"))
    end = ts + dur
    comm = np.asarray(ev.column("is_comm"))
    host = np.isin(kind, ("cpu_op", "user_annotation", "python_function"))
    data = host & _is_data(names)
    device = np.isin(kind, ("kernel", "memcpy", "memset"))
    if device.any():
        sets = {"compute": device & ~comm, "comm": device & comm, "data": data}
        source = "device"
    else:
        on_step = np.isin(np.asarray(ev.column("tid")), step_tids)
        is_step = np.char.startswith(names.astype(str), "ProfilerStep#")
        sets = {"compute": host & on_step & ~comm & ~data & ~is_step, "comm": host & comm, "data": data}
        source = "host"
    return {k: (ts[m], end[m]) for k, m in sets.items()}, source


def rank_breakdown(run: Run, rank: int) -> pa.Table | None:
    """The breakdown rows of one rank (None when it has no steps)."""
    steps = run.table(rank, "steps")
    if steps.num_rows == 0:
        return None
    ev = run.table(rank, "events", columns=_EVENT_COLS)
    names = np.asarray(ev.column("name").to_numpy(zero_copy_only=False)).astype(str)
    step_tids = np.unique(np.asarray(ev.column("tid"))[np.char.startswith(names, "ProfilerStep#")])
    sets, source = interval_sets(ev, step_tids)
    ws, we = np.asarray(steps.column("ts")), np.asarray(steps.column("end"))
    n = len(ws)
    w, length, cov = coverage(sets, ws, we)
    c, m, d = cov["compute"], cov["comm"], cov["data"]
    computing = per_window(w, length, c, n)
    exposed = per_window(w, length, m & ~c, n)
    data_wait = per_window(w, length, d & ~c & ~m, n)
    wall = we - ws
    return pa.table({
        "rank": np.full(n, rank, dtype=np.int64), "step": steps.column("step"), "ts": ws, "end": we,
        "wall": wall, "computing": computing, "communication": per_window(w, length, m, n),
        "overlapped": per_window(w, length, m & c, n), "comm_exposed": exposed, "data_wait": data_wait,
        "free": wall - computing - exposed - data_wait, "complete": steps.column("complete"),
        "source": [source] * n,
    })


def run_breakdown(run: Run, results: dict[str, Result]) -> Result:
    parts = [t for t in (rank_breakdown(run, r) for r in run.rank_ids) if t is not None]
    if not parts:
        return Result("breakdown", skipped="no ProfilerStep#N markers in any rank")
    table = pa.concat_tables(parts)
    no_steps = [r for r in run.rank_ids if r not in set(table.column("rank").to_pylist())]
    summary = {"ranks_without_steps": no_steps}
    return Result("breakdown", tables={"breakdown": table}, summary=summary)
