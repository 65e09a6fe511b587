"""Two ranks on gloo, profiled with rankscope.profile: rank 0 sends, rank 1 works first and then receives, for
tests/e2e/test_p2p_wait.py.

    p2p_wait_job.py RUN

Each step: rank 0 posts ``isend`` of a 2 KB tensor and waits for it; rank 1 runs ``LATE_MS`` of matmuls inside
``record_function("late_work")`` before its ``recv``; then both run a short matmul. 5 steps, the last 3 captured.
Each rank writes ``RUN/job-<rank>.json`` with its own times per captured step: its own work's length (rank 0: its
send's wait; rank 1: its late work) and a CLOCK_MONOTONIC stamp, one clock for both ranks of this host (rank 0: when
the wait returned; rank 1: just before it called ``recv``).
"""
from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist

import rankscope

LATE_MS, STEPS = 60.0, 5


def busy(ms: float) -> None:
    a = torch.randn(64, 64)
    t = time.perf_counter()
    while (time.perf_counter() - t) * 1e3 < ms:
        a = torch.tanh(a @ a)


def main(run: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(512)
    own: list[float] = []
    stamp: list[int] = []
    prof_sched = torch.profiler.schedule(wait=1, warmup=1, active=3)
    with rankscope.profile(run=run, schedule=prof_sched) as prof:
        for step in range(STEPS):
            t = time.perf_counter()
            if rank == 0:
                work = dist.isend(x, 1)
                t = time.perf_counter()
                work.wait()
            else:
                with torch.profiler.record_function("late_work"):
                    busy(LATE_MS)
            own.append((time.perf_counter() - t) * 1e3)
            stamp.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
            if rank == 1:
                dist.recv(x, 0)
            busy(2.0)
            prof.step()
    with open(f"{run}/job-{rank}.json", "w") as f:
        json.dump({"rank": rank, "captured_ms": own[2:], "monotonic_ns": stamp[2:],
                   "what": "send wait" if rank == 0 else "late work"}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
