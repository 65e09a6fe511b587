"""A 3-rank gloo DDP job profiled with rankscope.profile and the collective recorder on
(RANKSCOPE_COMMS=1, TORCH_FR_BUFFER_SIZE in the environment). Every step: DDP's gradient all-reduce
(issued from C++), an all_reduce on the world, and on ranks 0 and 1 only an all_reduce on the
sub-group [0, 1]. On gloo the trace names neither group nor sequence: ranks 0 and 1 show one more
all_reduce per step than rank 2, so matching by order alone mixes the two groups."""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist

import rankscope


def main(run: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    sub = dist.new_group([0, 1])
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 32))
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2)
    with rankscope.profile(run=run, schedule=sched) as prof:
        for _ in range(8):
            model(torch.randn(8, 32)).sum().backward()
            dist.all_reduce(torch.ones(64))
            if rank in (0, 1):
                dist.all_reduce(torch.ones(16), group=sub)
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
