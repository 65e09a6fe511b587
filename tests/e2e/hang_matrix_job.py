"""Hung gloo jobs for tests/e2e/test_hang_matrix.py: one scenario per run, the recorder's watchdog on.

    torchrun --nproc-per-node N hang_matrix_job.py RUN SCENARIO ENGINE

ENGINE: ``fr`` (Flight Recorder, what ``import rankscope`` sizes) or ``timed`` (rankscope's timed backend).
Every rank runs ``rankscope.profile(run=RUN, on_demand=True, comms={"watchdog_s": 3})``: nothing is traced,
the recorder's watchdog dumps into the run when a collective stays pending 3 s and asks every rank to dump.
Steps 0-2 are healthy (the history the analysis may use); at step 3 (``BAD``) one rank goes wrong:

- ``skip_sub`` (3 ranks, group [0, 1]): rank 1 skips the group's all_gather and goes on to the world all_reduce;
- ``op`` (3 ranks): rank 2 issues an all_gather where the others issue an all_reduce;
- ``exit`` (3 ranks): rank 2 leaves the training loop (its profile ends: the exit dump) and lingers, as a rank
  that exited looks to NCCL peers (on gloo a process that really ends closes its sockets and the others get
  "Connection reset by peer" at once: an error, not a hang);
- ``sleep`` (4 ranks, group [1, 3]): rank 3 sleeps in Python before the group's all_gather (issue 27's job);
- ``p2p`` (3 ranks): ranks 0 and 1 exchange a tensor (0 sends first, 1 receives first); at step 3 both
  receive first: a deadlock;
- ``ddp`` (3 ranks): DistributedDataParallel; rank 2 sleeps before backward, the others wait inside DDP's
  gradient all_reduce (issued from C++);
- ``fsdp`` (3 ranks): FSDP2 (``fully_shard``); rank 1 sleeps before the forward, the others wait in FSDP's
  all_gather.

A size mismatch is not among them: gloo checks every message's size and aborts (a rank's process ends,
the others raise "Connection reset by peer" within 0.1 s: measured with 999, 500, 1, 3, 4000 and 100000
elements against 1000), so it never hangs on gloo.

The rank that goes wrong prints ``BAD <scenario> <wall ns>`` just before; the test reads the dumps.
"""
from __future__ import annotations

import datetime
import os
import sys
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

import rankscope
from rankscope.collect import comms

BAD, WATCHDOG_S, STUCK_S = 3, 3.0, 600
T = torch.ones(8)


def bad(scenario: str) -> None:
    print(f"BAD {scenario} {time.time_ns()}", flush=True)


def skip_sub(rank: int, step: int, ctx: dict[str, Any]) -> None:
    dist.all_reduce(T)
    if rank in (0, 1):
        if step == BAD and rank == 1:
            bad("skip_sub")
        else:
            dist.all_gather([torch.zeros(8) for _ in range(2)], T, group=ctx["sub"])
    dist.all_reduce(T)


def op(rank: int, step: int, ctx: dict[str, Any]) -> None:
    if step == BAD and rank == 2:
        bad("op")
        dist.all_gather([torch.zeros(8) for _ in range(3)], T)
    else:
        dist.all_reduce(T)


def leave(rank: int, step: int, ctx: dict[str, Any]) -> None:
    if step == BAD and rank == 2:
        bad("exit")
        raise StopIteration  # out of the loop: the profile ends (exit dump), then the process lingers
    dist.all_reduce(T)


def sleep(rank: int, step: int, ctx: dict[str, Any]) -> None:
    dist.all_reduce(T)
    if rank in (1, 3):
        if step == BAD and rank == 3:
            bad("sleep")
            time.sleep(STUCK_S)  # stuck in Python, outside any collective
        dist.all_gather([torch.zeros(8) for _ in range(2)], T, group=ctx["sub"])
    dist.all_reduce(T)


def p2p(rank: int, step: int, ctx: dict[str, Any]) -> None:
    if rank in (0, 1):
        other, buf = 1 - rank, torch.zeros(8)
        if step == BAD:
            if rank == 0:
                bad("p2p")
            dist.recv(buf, other)  # both receive first: neither sends
            dist.send(T, other)
        elif rank == 0:
            dist.send(T, other)
            dist.recv(buf, other)
        else:
            dist.recv(buf, other)
            dist.send(T, other)
    dist.all_reduce(T)


def model_step(rank: int, step: int, ctx: dict[str, Any], culprit: int, where: str) -> None:
    x = torch.randn(4, 16)
    if step == BAD and rank == culprit and where == "forward":
        bad(ctx["scenario"])
        time.sleep(STUCK_S)  # stuck in Python before the forward: the others wait in FSDP's all_gather
    loss = ctx["model"](x).sum()
    if step == BAD and rank == culprit and where == "backward":
        bad(ctx["scenario"])
        time.sleep(STUCK_S)  # stuck in Python before backward: the others wait in DDP's all_reduce
    loss.backward()
    ctx["opt"].step()
    ctx["opt"].zero_grad()


def setup_model(kind: str) -> dict[str, Any]:
    torch.manual_seed(0)
    model: Any = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    if kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.01)}


SCENARIOS: dict[str, Callable[[int, int, dict[str, Any]], None]] = {
    "skip_sub": skip_sub, "op": op, "exit": leave, "sleep": sleep, "p2p": p2p,
    "ddp": lambda r, s, c: model_step(r, s, c, 2, "backward"),
    "fsdp": lambda r, s, c: model_step(r, s, c, 1, "forward")}


def main(run: str, scenario: str, engine: str) -> None:
    backend = comms.timed_backend("gloo") if engine == "timed" else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=STUCK_S))
    rank = dist.get_rank()
    ctx: dict[str, Any] = {"scenario": scenario}
    if scenario in ("skip_sub", "sleep"):
        ctx["sub"] = dist.new_group([0, 1] if scenario == "skip_sub" else [1, 3])
    if scenario in ("ddp", "fsdp"):
        ctx.update(setup_model(scenario))
    prof = rankscope.profile(run=run, on_demand=True, comms={"watchdog_s": WATCHDOG_S, "at_exit": True},
                             live=False, rpc=False)
    prof.start()
    try:
        for step in range(BAD + 3):
            SCENARIOS[scenario](rank, step, ctx)
            prof.step()
    except StopIteration:
        pass
    prof.stop()
    print(f"LEFT {rank}", flush=True)
    time.sleep(STUCK_S)  # a rank that left lingers (see the module docstring); the test kills the job


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1], sys.argv[2], sys.argv[3])
