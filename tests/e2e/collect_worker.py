"""Training worker for the collect e2e tests (run under torchrun, gloo, CPU).

Modes: ``ok`` (9 steps, two scheduled windows), ``scheduled`` (its own window cycling until the stop
file, for triggers that land inside it), ``kill`` (SIGKILL after the steps, once both windows are
exported, uploads pending), ``idle`` (no DDP; rank 1 stops calling step() inside the second window and the idle
backstop closes it), ``trigger`` (on-demand only; steps every ~50 ms, or ``RS_STEP_S``, until the file named by
``RS_STOP`` exists, ranks agreeing through an all_reduce each step), ``subset`` (``ranks=[1]``,
with add_metadata / add_metadata_json).
"""
from __future__ import annotations

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import rankscope
from rankscope.store.uploader import UploadConfig


def _stop_agreed(stop_file: str) -> bool:
    """True on every rank at the same step once ``stop_file`` exists (seen by any rank)."""
    flag = torch.tensor([1.0 if os.path.exists(stop_file) else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def main() -> None:
    run, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = torch.nn.Linear(32, 32)
    model = net if mode == "idle" else torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    up = UploadConfig(jitter_s=0.1, backoff_base_s=0.1, backoff_max_s=0.5,
                      exit_timeout_s=float(os.environ.get("RS_EXIT_S", "3")))
    looping = mode in ("trigger", "scheduled")  # run until the stop file appears
    # "scheduled": the job's own window cycles forever (triggers land in it at any offset)
    sched = None if mode == "trigger" else (torch.profiler.schedule(wait=2, warmup=1, active=3) if mode == "scheduled"
                                            else torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2))
    prof = rankscope.profile(run=run, schedule=sched, on_demand=mode == "trigger",
                             ranks=[1] if mode == "subset" else None,
                             metadata={"mode": mode}, layout={"dp": dist.get_world_size(), "tp": 1, "pp": 1},
                             spool_dir=os.environ["RS_SPOOL"] + f"/rank-{rank}", upload=up,
                             host_map=os.environ.get("RS_HOSTMAP"),
                             idle_timeout_s=1.0 if mode == "idle" else 600.0)
    prof.start()
    if mode == "subset":
        prof.add_metadata("note", "subset")
        prof.add_metadata_json("cfg", '{"lr": 0.01, "bs": 8}')
    print("TRAINING-STARTED", flush=True)
    steps = 4000 if looping else 9
    for i in range(steps):
        if mode == "idle" and rank == 1 and i == 6:
            t_end = time.monotonic() + 2.5  # stuck in Python (a dataloader, a hang): no step() for 2.5 s
            while time.monotonic() < t_end:
                time.sleep(0.02)
            break
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
        if looping:
            time.sleep(float(os.environ.get("RS_STEP_S", "0.05")))
            if _stop_agreed(os.environ["RS_STOP"]):
                break
        prof.step()
    if mode == "kill":  # once both windows' traces are in the spool (exported off-thread), uploads still pending
        if prof.collector is not None:
            prof.collector.exporter.wait(60)
        os.kill(os.getpid(), signal.SIGKILL)
    prof.stop()
    dist.destroy_process_group()
    print("TRAINING-DONE", flush=True)


if __name__ == "__main__":
    main()
