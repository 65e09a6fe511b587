"""A 3-rank gloo job with torch's Flight Recorder on (TORCH_FR_BUFFER_SIZE), broken on purpose.

``skip``: rank 1 skips the 4th all_reduce of the default group (a desync: it is already at the
all_gather). ``stop``: rank 1 leaves before the 2nd broadcast of the sub-group [0, 1] (rank 0 waits
in it: a hang). Setup and the collectives that complete have a generous timeout (a loaded machine can take
seconds to rendezvous: with 3 s for the whole job, a fresh run beside three other pytest processes left no dump at
all); only the collectives the job breaks wait 3 s (``Work.wait``). Every rank dumps its recorder (pickle, as TORCH_FR_DUMP_TEMP_FILE would, and the JSON form of
_dump_fr_trace_json into OUT-json) when its collective times out or when it leaves, then exits.
"""
from __future__ import annotations

import datetime
import os
import sys

import torch
import torch.distributed as dist


def main(out: str, mode: str) -> None:
    rank = int(os.environ["RANK"])
    setup, broken = datetime.timedelta(seconds=120), datetime.timedelta(seconds=3)
    dist.init_process_group("gloo", timeout=setup)
    sub = dist.new_group([0, 1], timeout=setup)
    t = torch.ones(1000)
    try:
        for _ in range(3):
            dist.all_reduce(t)
        if rank in (0, 1):
            dist.broadcast(t, 0, group=sub)
        if mode == "skip":
            if rank != 1:
                dist.all_reduce(t, async_op=True).wait(broken)
            dist.all_gather([torch.zeros(1000) for _ in range(3)], t, async_op=True).wait(broken)
        elif mode == "stop" and rank == 0:
            dist.broadcast(t, 0, group=sub, async_op=True).wait(broken)  # rank 1 has left: waits 3 s
    except Exception as exc:  # noqa: BLE001 - the timeout this job provokes
        print(f"rank {rank}: {type(exc).__name__}", flush=True)
    finally:
        import torch._C._distributed_c10d as c10d

        with open(os.path.join(out, f"rank_{rank}"), "wb") as f:
            f.write(c10d._dump_fr_trace(True, True, False))
        os.makedirs(out + "-json", exist_ok=True)  # the JSON form, as _dump_fr_trace_json writes it
        with open(os.path.join(out + "-json", f"rank_{rank}.json"), "wb") as f:
            f.write(c10d._dump_fr_trace_json(True, False))
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
