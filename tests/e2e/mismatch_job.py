"""A 2-rank gloo job under rankscope's timed recorder whose ranks disagree, for tests/e2e/test_comms_timed.py.

    mismatch_job.py OUT

Rank 0 sends twice to rank 1, which receives once (the second isend is never matched); in the default group
rank 0 all-reduces a [10, 10] tensor where rank 1 all-reduces [100] (the same bytes: gloo runs it); in a
sub-group made with new_group rank 0 all-reduces float32 where rank 1 all-reduces int32 (the same bytes again).
Gloo aborts the process on a size mismatch in bytes, so the mismatches keep the bytes equal. Each rank then
dumps its recorder (OUT/fr_rank_<r>) and leaves at once, with its unmatched send still pending.
"""
from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

from rankscope.collect import comms


def main(out: str) -> None:
    dist.init_process_group(comms.timed_backend("gloo"), timeout=datetime.timedelta(seconds=20))
    rank = dist.get_rank()
    sub = dist.new_group([0, 1])
    dist.all_reduce(torch.ones(100))
    if rank == 0:
        dist.send(torch.ones(8), 1)
        dist.isend(torch.ones(4), 1)  # never received
    else:
        dist.recv(torch.zeros(8), 0)
    dist.all_reduce(torch.ones(10, 10) if rank == 0 else torch.ones(100))  # size mismatch, same bytes
    dist.all_reduce(torch.ones(100) if rank == 0 else torch.ones(100, dtype=torch.int32), group=sub)  # dtype
    time.sleep(0.5)  # the completion callbacks
    comms.Recorder(out).dump("test")
    print(f"DUMPED {rank}", flush=True)
    os._exit(0)  # a send is still pending: no teardown


if __name__ == "__main__":
    main(sys.argv[1])
