"""A 2-rank FSDP2 job (fully_shard, gloo) profiled with rankscope.profile as a new user would: no recorder
option, no environment. For tests/e2e/test_edges_jobs.py.

    fsdp_job.py RUN

Four Linear layers, each under ``fully_shard``, then the root; 4 steps, the last 2 captured. Rank 1's data
loading sleeps 20 ms per step (``record_function("data")``), so rank 0 waits for it inside FSDP's own
spans: the all-gathers of the forward and the reduce-scatters of the backward, which gloo runs on its
own threads. Each rank writes ``RUN/job-<rank>.json``: its collectives per step as FSDP2 issues them.
"""
from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

import rankscope
from rankscope.demo.workloads.common import finish

LAYERS, HIDDEN, STEPS = 4, 64, 4


def main(run: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(LAYERS)])
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with rankscope.profile(run=run, schedule=torch.profiler.schedule(wait=1, warmup=1, active=2)) as prof:
        for _ in range(STEPS):
            with torch.profiler.record_function("data"):
                x = torch.randn(16, HIDDEN)
                if rank == 1:
                    time.sleep(0.02)
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    with open(f"{run}/job-{rank}.json", "w") as f:
        json.dump({"rank": rank, "layers": LAYERS, "captured_steps": 2}, f)
    finish()  # destroy_process_group; FSDP2 keeps the group: see finish's docstring


if __name__ == "__main__":
    main(sys.argv[1])
