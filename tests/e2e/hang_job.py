"""Gloo jobs for tests/e2e/test_hang.py, with rankscope's collective recorder (Flight Recorder + pg_config).

    hang_job.py OUT sleep     4 ranks, group [1, 3]; each step: all_reduce (world), all_gather ([1, 3]),
                              all_reduce (world). At step 3 rank 3 sleeps in Python before the all_gather:
                              rank 1 waits in the all_gather, ranks 0 and 2 in the next all_reduce. The
                              recorder's watchdog (1.5 s) dumps every rank with a pending collective.
    hang_job.py OUT moe       2 ranks; 4 steps of an expert-parallel exchange, all_to_all_single with uneven
                              splits (each rank sends what its tokens need), then a dump at the end: healthy.
"""
from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from rankscope.collect import comms


def sleep(out: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    sub = dist.new_group([1, 3])
    rec = comms.Recorder(out, watchdog_s=1.5).start()
    t = torch.ones(1000)
    for step in range(1, 6):
        dist.all_reduce(t)
        if rank in (1, 3):
            if step == 3 and rank == 3:
                print("SLEEPING", flush=True)
                time.sleep(300)  # stuck in Python, outside any collective
            dist.all_gather([torch.zeros(1000) for _ in range(2)], t, group=sub)
        dist.all_reduce(t)
    rec.stop()


def moe(out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rec = comms.Recorder(out).start()
    for step in range(4):
        # tokens routed to each expert differ per rank and per step; both sides agree on the splits
        send = [[3 + step, 5], [7, 2 + step]][rank]
        recv = [[3 + step, 7], [5, 2 + step]][rank]
        x = torch.ones(sum(send), 16)
        y = torch.empty(sum(recv), 16)
        dist.all_to_all_single(y, x, output_split_sizes=recv, input_split_sizes=send)
        dist.all_reduce(torch.ones(4))
    rec.dump("end")
    rec.stop()
    print(f"DUMPED {rank}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    {"sleep": sleep, "moe": moe}[sys.argv[2]](sys.argv[1])
    os._exit(0)
