"""A 3-rank gloo DDP job profiled with rankscope.profile, the collective recorder turned on by the
environment only (RANKSCOPE_COMMS=1, TORCH_FR_BUFFER_SIZE=2000: no recorder code here). After a few
steps rank 1 skips an all_reduce and every rank blocks (gloo timeout 120 s): the test then asks for a
dump with ``rankscope trigger RUN --dump`` and reads it with ``rankscope hang RUN``."""
from __future__ import annotations

import datetime
import sys

import torch
import torch.distributed as dist

import rankscope


def main(run: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16))
    with rankscope.profile(run=run, schedule=torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)) as prof:
        for _ in range(4):
            model(torch.randn(4, 16)).sum().backward()  # DDP's gradient all-reduce, issued from C++
            prof.step()
        t = torch.ones(100)
        print(f"READY {rank}", flush=True)
        if rank != 1:
            dist.all_reduce(t)  # rank 1 skips it: everyone blocks from here on
        dist.all_gather([torch.zeros(100) for _ in range(3)], t)


if __name__ == "__main__":
    main(sys.argv[1])
