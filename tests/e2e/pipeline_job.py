"""A 4-stage pipeline (torch.distributed.pipelining, gloo) profiled with rankscope.profile, for
tests/e2e/test_edges_jobs.py.

    pipeline_job.py RUN gpipe|1f1b

Each rank holds one stage of two Linear layers; 4 microbatches of [4, 32] floats per step, 4 steps, the
last 2 captured. Activations go 0 -> 1 -> 2 -> 3 and gradients back, as ``send`` / ``recv`` pairs: per
captured step stage 0 and stage 3 post 4 sends and 4 receives, stages 1 and 2 post 8 of each. Each rank
writes ``RUN/job-<rank>.json`` with what it knows of itself: the schedule and the message size.
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import rankscope
from rankscope.demo.workloads.pipeline import make_schedule, run_step

MICRO, ROWS, HIDDEN, STEPS = 4, 4, 32, 4


def main(run: str, kind: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    mod = torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN))
    sched = make_schedule([mod], rank, world, kind, MICRO, lambda out, tgt: ((out - tgt) ** 2).mean())
    x, y = torch.randn(MICRO * ROWS, HIDDEN), torch.randn(MICRO * ROWS, HIDDEN)
    prof_sched = torch.profiler.schedule(wait=1, warmup=1, active=2)
    with rankscope.profile(run=run, schedule=prof_sched, layout={"pp": world}) as prof:
        for _ in range(STEPS):
            run_step(sched, rank, world, x, y)
            prof.step()
    with open(f"{run}/job-{rank}.json", "w") as f:
        json.dump({"rank": rank, "schedule": kind, "microbatches": MICRO, "captured_steps": 2,
                   "message_bytes": ROWS * HIDDEN * 4}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
