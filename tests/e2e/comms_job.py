"""A 3-rank gloo job with rankscope's collective recorder, where rank 1 skips an all_reduce.

All ranks then block (gloo timeout 60 s): the recorder's watchdog must dump on every rank while the
job hangs. ``sigusr1`` mode: no hang; the test sends SIGUSR1 to rank 0, which dumps and goes on.
"""
from __future__ import annotations

import datetime
import os
import sys
import time

from rankscope.collect import comms

comms.enable()  # before the process group exists

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def main(out: str, mode: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    rec = comms.Recorder(out, watchdog_s=1.5, at_exit=mode == "exit").start()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16))
    for _ in range(3):
        model(torch.randn(4, 16)).sum().backward()  # DDP's gradient all-reduce, issued from C++
    t = torch.ones(100)
    dist.all_reduce(t)
    print(f"READY {rank} {os.getpid()}", flush=True)
    if mode == "hang":
        if rank != 1:
            dist.all_reduce(t)  # rank 1 skips it: everyone blocks from here on
        dist.all_gather([torch.zeros(100) for _ in range(3)], t)
    elif mode == "exit":
        print(f"DONE {rank}", flush=True)  # no rec.stop(): the exit dump happens after the group is gone
    else:
        deadline = time.monotonic() + 180  # the test writes STOP when it has seen the dump
        while time.monotonic() < deadline and not os.path.exists(os.path.join(out, "STOP")):
            time.sleep(0.05)
        rec.stop()
        print(f"DONE {rank}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
