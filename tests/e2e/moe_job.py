"""A 4-rank mixture-of-experts job with expert parallelism (gloo), profiled with rankscope.profile. For
tests/e2e/test_edges_jobs.py.

    moe_job.py RUN

Rank e holds expert e. A top-1 router skewed towards expert 1 (2.5x the tokens of each other expert) sends
every token to its expert and back with ``all_to_all_single`` inside an autograd Function (the split sizes
exchanged first, as MoE layers do; both from rankscope.demo.workloads.moe, the benchmark's MoE job); the
backward runs the reverse all_to_alls. 4 steps, the last 2 captured. Each rank writes ``RUN/job-<rank>.json``:
for every step, the ``input_split_sizes`` (rows) it passed to each token all_to_all, and the bytes of one row: the truth for the communication matrix.
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist

import rankscope
from rankscope.demo.workloads.moe import AllToAll, exchange_counts

TOKENS, HIDDEN, STEPS = 48, 16, 4
CALLS: list[list[int]] = []  # input split sizes of every token all_to_all of the current step


def step(expert: torch.nn.Module, world: int, gen: torch.Generator) -> None:
    x = torch.randn(TOKENS, HIDDEN, requires_grad=True)
    weights = torch.tensor([1.0, 2.5] + [1.0] * (world - 2))
    dest = torch.multinomial(weights, TOKENS, replacement=True, generator=gen)
    order = torch.argsort(dest)
    s, r = exchange_counts(dest, world)  # the split sizes first
    tokens = AllToAll.apply(x[order], s, r, CALLS)  # CALLS gets every token all_to_all's input split sizes
    back = AllToAll.apply(expert(tokens), r, s, CALLS)
    back.sum().backward()


def main(run: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    gen = torch.Generator().manual_seed(100 + rank)
    expert = torch.nn.Sequential(torch.nn.Linear(HIDDEN, 4 * HIDDEN), torch.nn.ReLU(), torch.nn.Linear(4 * HIDDEN, HIDDEN))
    steps = []
    with rankscope.profile(run=run, schedule=torch.profiler.schedule(wait=1, warmup=1, active=2)) as prof:
        for _ in range(STEPS):
            CALLS.clear()
            step(expert, world, gen)
            steps.append(list(CALLS))
            prof.step()
    with open(f"{run}/job-{rank}.json", "w") as f:
        json.dump({"rank": rank, "row_bytes": HIDDEN * 4, "captured": [2, 3], "splits": steps,
                   "count_exchange_bytes": 8}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
