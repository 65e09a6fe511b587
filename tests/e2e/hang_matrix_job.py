"""Hung gloo jobs for tests/e2e/test_hang_matrix.py: one scenario per run, the recorder's watchdog on.

    torchrun --nproc-per-node N hang_matrix_job.py RUN SCENARIO ENGINE [BACKEND]

ENGINE: ``fr`` (Flight Recorder, what ``import rankscope`` sizes) or ``timed`` (rankscope's timed backend);
BACKEND: ``gloo`` (default, CPU tensors) or ``nccl`` (each rank on GPU ``local rank % GPUs``: a GPU machine;
bench/nccl_hang.py). "Rank 2" below is the last rank, "group [1, 3]" is [1, last] (2 ranks: [0, 1]).
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

- ``stall`` (NCCL only, any world size): at step 3 rank 0's GPU runs an 8 s kernel before the all_reduce (the
  collective waits behind it on the GPU, the main thread in ``torch.cuda.synchronize``), then goes on;
- ``size`` (NCCL only): the last rank's all_reduce has 16 elements where the others' have 8. On gloo a size
  mismatch never hangs: gloo checks every message's size and aborts (a rank's process ends, the others raise
  "Connection reset by peer" within 0.1 s: measured with 999, 500, 1, 3, 4000 and 100000 elements against 1000).

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
DEV = torch.device("cpu")
T = torch.ones(8)


def zeros(n: int = 8) -> torch.Tensor:
    return torch.zeros(n, device=DEV)


def bad(scenario: str) -> None:
    print(f"BAD {scenario} {time.time_ns()}", flush=True)


def skip_sub(rank: int, step: int, ctx: dict[str, Any]) -> None:
    dist.all_reduce(T)
    if rank in (0, 1):
        if step == BAD and rank == 1:
            bad("skip_sub")
        else:
            dist.all_gather([zeros() for _ in range(2)], T, group=ctx["sub"])
    dist.all_reduce(T)


def op(rank: int, step: int, ctx: dict[str, Any]) -> None:
    if step == BAD and rank == ctx["last"]:
        bad("op")
        dist.all_gather([zeros() for _ in range(ctx["last"] + 1)], T)
    else:
        dist.all_reduce(T)


def leave(rank: int, step: int, ctx: dict[str, Any]) -> None:
    if step == BAD and rank == ctx["last"]:
        bad("exit")
        raise StopIteration  # out of the loop: the profile ends (exit dump), then the process lingers
    dist.all_reduce(T)


def sleep(rank: int, step: int, ctx: dict[str, Any]) -> None:
    dist.all_reduce(T)
    if rank in ctx["pair"]:
        if step == BAD and rank == ctx["last"]:
            bad("sleep")
            time.sleep(STUCK_S)  # stuck in Python, outside any collective
        dist.all_gather([zeros() for _ in range(2)], T, group=ctx["sub"])
    dist.all_reduce(T)


def size(rank: int, step: int, ctx: dict[str, Any]) -> None:
    if step == BAD and rank == ctx["last"]:
        bad("size")
        dist.all_reduce(zeros(16))
    else:
        dist.all_reduce(T)


def stall(rank: int, step: int, ctx: dict[str, Any]) -> None:
    if step == BAD and rank == 0:
        bad("stall")
        torch.cuda._sleep(int(8 * 2e9))  # ~8 s of GPU clock cycles (about 2 GHz)
    dist.all_reduce(T)
    torch.cuda.synchronize()


def p2p(rank: int, step: int, ctx: dict[str, Any]) -> None:
    if rank in (0, 1):
        other, buf = 1 - rank, zeros()
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
    x = torch.randn(4, 16, device=DEV)
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
    model: Any = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)).to(DEV)
    if kind == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in model:
            fully_shard(layer)
        fully_shard(model)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.01)}


SCENARIOS: dict[str, Callable[[int, int, dict[str, Any]], None]] = {
    "skip_sub": skip_sub, "op": op, "exit": leave, "sleep": sleep, "p2p": p2p, "size": size, "stall": stall,
    "ddp": lambda r, s, c: model_step(r, s, c, c["last"], "backward"),
    "fsdp": lambda r, s, c: model_step(r, s, c, 1, "forward")}


def main(run: str, scenario: str, engine: str, inner: str = "gloo") -> None:
    global DEV, T
    if inner == "nccl":
        DEV = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        torch.cuda.set_device(DEV)
        T = torch.ones(8, device=DEV)
    backend = comms.timed_backend(inner) if engine == "timed" else inner
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=STUCK_S))
    rank, last = dist.get_rank(), dist.get_world_size() - 1
    ctx: dict[str, Any] = {"scenario": scenario, "last": last, "pair": [1, last] if last >= 2 else [0, 1]}
    if scenario in ("skip_sub", "sleep"):
        ctx["sub"] = dist.new_group([0, 1] if scenario == "skip_sub" else ctx["pair"])
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
    main(*sys.argv[1:5])
