"""Training script the demo launches on every rank through torch.distributed.run.

A small but real job: an MLP under DistributedDataParallel, a DataLoader over a synthetic
dataset, SGD with momentum. Optionally one rank is made a straggler:

- ``compute``: extra matrix work inside forward on that rank;
- ``data``: slower ``__getitem__`` in that rank's dataset;
- ``comm``: a delay in that rank's DDP communication hook, before the gradient all-reduce;
- ``host``: Python busy-work on the host between the training step's operators (the kind of
  pause a slow input pipeline in Python, a logger or the garbage collector causes).
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SyntheticDataset(Dataset):
    """Random features and labels, made deterministically per index; optional delay: ``delay_s``
    once every ``every`` items (one batch: a slow read per batch, not a sleep too short to time)."""

    def __init__(self, n: int, dim: int, classes: int, delay_s: float = 0.0, every: int = 1) -> None:
        self.n, self.dim, self.classes, self.delay_s, self.every = n, dim, classes, delay_s, every
        self.calls = 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        if self.delay_s and self.calls % self.every == 0:
            time.sleep(self.delay_s)
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.dim, generator=g)
        return x, torch.tensor(i % self.classes)


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, classes: int, extra_work: int = 0) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, classes),
        )
        self.extra_work = extra_work

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        first = self.net[0]
        assert isinstance(first, nn.Linear)  # Sequential indexing is typed as any Module
        for _ in range(self.extra_work):
            # Real extra compute (the "compute" straggler): matmuls whose result feeds the output.
            h = h + 1e-6 * torch.tanh(h @ first.weight.t() @ first.weight)
        return self.net(h)


CommHook = Callable[[dist.ProcessGroup | None, dist.GradBucket], torch.futures.Future[torch.Tensor]]


def delayed_allreduce_hook(delay_s: float) -> CommHook:
    """DDP comm hook: wait ``delay_s`` then run the default all-reduce (the "comm" straggler)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    # Deliberately unannotated: DDP compares a hook's annotations with the real classes at runtime
    # (inspect.signature), and ``from __future__ import annotations`` would make them strings. The
    # returned type is stated by CommHook; state None means the default process group.
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        time.sleep(delay_s)
        return default_hooks.allreduce_hook(state, bucket)

    return hook


def host_busy(seconds: float) -> None:
    """Spin in Python (not sleep) for ``seconds`` of this thread's CPU time: the host is busy while no
    operator runs. CPU time, not wall time, as real host work is a fixed amount of work: on a shared
    machine it takes longer when the thread waits for a CPU, like every other part of the step (a
    wall-clock spin would instead hide that wait inside the injected time)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        x += 1


def pin_process(cpu: int) -> None:
    """Move every thread of this process (training, gloo, profiler) to ``cpu`` (Linux only)."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except OSError:  # the thread ended meanwhile
            pass


def intra_op_threads() -> int:
    """torch's intra-op threads for the demo jobs: 1 (an operator's work is its calling thread's CPU time), or
    ``RANKSCOPE_DEMO_THREADS`` (bench/workloads.py --threads: the verdict where that no longer holds)."""
    try:
        return max(1, int(os.environ.get("RANKSCOPE_DEMO_THREADS", "1")))
    except ValueError:
        return 1


def rotation_cpus(on: bool) -> list[int]:
    """The CPUs that --rotate-cpus moves a rank over ([] when off, or where affinity cannot be set)."""
    return sorted(os.sched_getaffinity(0)) if on and hasattr(os, "sched_getaffinity") else []


def rotate(cpus: list[int], rank: int, step: int) -> None:
    """Put this rank on CPU (rank + step) mod n: every rank then sees the same mix of (unequal) vCPUs."""
    if cpus:
        pin_process(cpus[(rank + step) % len(cpus)])


def device_and_backend(choice: str) -> tuple[torch.device, str]:
    """Where this rank trains and which backend joins the ranks. ``auto``: the GPU ``LOCAL_RANK`` mod the GPU
    count where CUDA is there, else the CPU. NCCL only where every local rank has a GPU of its own (NCCL
    refuses two ranks on one GPU: "Duplicate GPU detected"); otherwise gloo, which also reduces CUDA tensors."""
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu"), "gloo"
    count = torch.cuda.device_count()
    if count == 0:
        raise SystemExit("--device cuda: no CUDA GPU is visible to this process")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return torch.device("cuda", local % count), "nccl" if local_world <= count else "gloo"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--run-dir", required=True, help="run directory or fsspec URL")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    # 256 samples: ~20 ms of compute per step here, long enough that a few ms of scheduler noise on a
    # shared 2-core host stays small against it (at 32 a healthy rank was up to +50 % slower)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-kind", choices=["compute", "data", "comm", "host"], default="compute")
    p.add_argument("--slowdown", type=float, default=1.0, help="strength of the injected slowdown")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: a CUDA GPU where there is one (NCCL when each local rank has its own, else gloo), "
                        "else the CPU with gloo")
    p.add_argument("--rotate-cpus", action="store_true",
                   help="each step, move this rank to CPU (rank + step) mod n: on a machine whose processors "
                        "differ in speed every rank then sees the same mix of them")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, backend = device_and_backend(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.set_num_threads(intra_op_threads())
    slow = rank == args.slow_rank
    kind = args.slow_kind if slow else ""
    dataset = SyntheticDataset(
        n=args.batch * world * (args.steps + args.warmup + 2), dim=args.dim, classes=10,
        delay_s=0.064 * args.slowdown if kind == "data" else 0.0, every=args.batch,  # 64 ms per batch at 1.0
    )
    sampler: DistributedSampler[int] = DistributedSampler(dataset, world, rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=args.batch, sampler=sampler, num_workers=0)
    mlp = MLP(args.dim, args.hidden, 10, extra_work=int(12 * args.slowdown) if kind == "compute" else 0).to(device)
    model = DDP(mlp, device_ids=[device.index] if device.type == "cuda" else None)
    if kind == "comm":
        model.register_comm_hook(None, delayed_allreduce_hook(0.02 * args.slowdown))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    import rankscope
    from rankscope.store.uploader import UploadConfig

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with rankscope.profile(
        run=args.run_dir, run_id=os.path.basename(os.path.normpath(args.run_dir)), activities=activities,
        schedule=torch.profiler.schedule(wait=0, warmup=args.warmup, active=args.steps, repeat=1),
        record_shapes=True, profile_memory=True, layout={"dp": world, "tp": 1, "pp": 1},
        metadata={"demo": {"slow_rank": args.slow_rank, "slow_kind": args.slow_kind, "slowdown": args.slowdown}},
        upload=UploadConfig(jitter_s=0.1, exit_timeout_s=60),
    ) as prof:
        it = iter(loader)
        cpus = rotation_cpus(args.rotate_cpus)
        for i in range(args.warmup + args.steps + 1):
            rotate(cpus, rank, i)
            x, y = next(it)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            if kind == "host":
                host_busy(0.02 * args.slowdown)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
