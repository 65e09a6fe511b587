"""Profile a real data-parallel training job on this machine, then diagnose it.

Launches --ranks processes with torch's own launcher (torch.distributed.run), backend gloo on
CPU (nccl when CUDA is there): an MLP under DistributedDataParallel, a DataLoader over a
synthetic dataset, SGD. Every rank is profiled; then the run is analyzed, report.html is
written and a per-rank table with the straggler verdict is printed.

Inject a straggler to see the diagnosis at work:
  rankscope demo --slow-rank 1 --slow-kind compute   (extra work in forward on rank 1)
  rankscope demo --slow-rank 2 --slow-kind data      (slower data loading on rank 2)
  rankscope demo --slow-rank 3 --slow-kind comm      (delay before the gradient all-reduce)
  rankscope demo --slow-rank 1 --slow-kind host      (Python busy-work between operators)
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from rankscope.commands.common import console, load_and_analyze, print_summary

HELP = "profile a real multi-rank DDP job on this machine and diagnose it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=int, default=4, help="number of processes (default 4)")
    p.add_argument("--steps", type=int, default=8, help="profiled steps (default 8)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps before the capture (default 2)")
    p.add_argument("--slow-rank", type=int, default=None, metavar="R", help="make rank R a straggler")
    p.add_argument("--slow-kind", choices=["compute", "data", "comm", "host"], default="compute",
                   help="what makes the slow rank slow (default compute)")
    p.add_argument("--slowdown", type=float, default=1.0, help="strength of the injected slowdown (default 1.0)")
    p.add_argument("--out", default="rankscope-runs", help="parent directory of the run (default ./rankscope-runs)")
    p.add_argument("--run-id", default=None, help="run directory name (default demo-<timestamp>)")
    p.add_argument("--jobs", "-j", type=int, default=None, help="ingest worker processes")
    p.add_argument("--rotate-cpus", action="store_true",
                   help="move every rank to CPU (rank + step) mod n each step. On a VM whose vCPUs differ in "
                        "speed (a busy neighbour on the host), a rank that stays on the slower one is really "
                        "slower and is reported as such; rotating gives every rank the same mix, as "
                        "bench/stragglers.py does for its healthy runs")


def run(args: argparse.Namespace) -> int:
    from rankscope.demo.launch import launch
    from rankscope.errors import RankscopeError
    from rankscope.render.html import render

    if args.ranks < 1:
        raise RankscopeError("--ranks must be at least 1")
    if args.slow_rank is not None and not 0 <= args.slow_rank < args.ranks:
        raise RankscopeError(f"--slow-rank {args.slow_rank} is not a rank of a {args.ranks}-rank job")
    run_dir = Path(args.out) / (args.run_id or time.strftime("demo-%Y%m%d-%H%M%S"))
    with console.status(f"training {args.ranks} ranks × {args.warmup + args.steps} steps (profiling every rank)"):
        launch(run_dir, ranks=args.ranks, steps=args.steps, warmup=args.warmup,
               slow_rank=args.slow_rank, slow_kind=args.slow_kind, slowdown=args.slowdown,
               rotate_cpus=args.rotate_cpus)
    console.print(f"run directory: {run_dir}")
    run, results = load_and_analyze(str(run_dir), args.jobs or 0)
    report = render(run, results, run_dir / "report.html")
    print_summary(run, results, str(report))
    return 0
