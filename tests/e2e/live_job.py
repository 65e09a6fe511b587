"""2-rank gloo jobs for tests/e2e/test_live.py and test_live_exit.py (``rankscope.profile``, live signal on).

    torchrun --nproc-per-node 2 live_job.py RUN capture
        80 steps of a small DDP model, ``on_demand=True`` (nothing traced until asked) and ``auto_capture=True``;
        from step 2 rank 1 sleeps 40 ms in Python before each step's forward: the live signal names it,
        and its alarm captures the next steps on every rank.
    torchrun --nproc-per-node 2 live_job.py RUN exit STEPS HOW
        STEPS steps of an all_reduce, the recorder's watchdog polling every 50 ms and a thread on rank 1
        asking every rank to dump every 20 ms until its last step (dumps still in flight at the end), then
        the end: HOW = "stop"
        (``prof.stop()``) or "atexit" (no stop(): the interpreter's exit does it). Prints "DONE <rank>".
"""
from __future__ import annotations

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

import rankscope


def capture(run: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with rankscope.profile(run=run, on_demand=True, auto_capture=True, rpc=False) as prof:
        for step in range(80):
            if rank == 1 and step >= 2:
                time.sleep(0.04)  # the straggler: blocked outside any collective
            model(torch.randn(16, 64)).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    dist.barrier()
    print(f"DONE {rank}", flush=True)
    dist.destroy_process_group()


def ask_dumps(stop: threading.Event) -> None:
    from rankscope.collect.comms.watch import Listener

    lis = Listener()
    while not stop.wait(0.02):
        lis.announce(1, "test")


def exit_at(run: str, steps: int, how: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    prof = rankscope.profile(run=run, on_demand=True, comms={"watchdog_s": 0.2, "at_exit": True}, rpc=False)
    prof.start()
    stop, asker = threading.Event(), None
    if rank == 1:
        asker = threading.Thread(target=ask_dumps, args=(stop,), daemon=True)
        asker.start()
    t = torch.ones(4)
    for _ in range(steps):
        dist.all_reduce(t)
        prof.step()
    stop.set()  # this test's own thread: ended before the interpreter's exit (as rankscope's threads are)
    if asker is not None:
        asker.join()
    time.sleep(0.013 * steps * rank % 0.2)  # the ranks end at different moments of the threads' cycles
    if how == "stop":
        prof.stop()
    print(f"DONE {rank}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if sys.argv[2] == "capture":
        capture(sys.argv[1])
    else:
        exit_at(sys.argv[1], int(sys.argv[3]), sys.argv[4])
