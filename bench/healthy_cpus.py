"""Healthy demo runs with ranks placed by the OS scheduler vs rotated over the CPUs, side by side.

Why: on a VM the vCPUs can differ in speed for seconds at a time (a busy neighbour on the host;
measured here with a pinned matmul loop: one vCPU 3-60 % slower than the other, changing within
seconds). A rank that stays on the slower vCPU for a whole capture really is slower, and the
straggler verdict says so ("compute ... same operators and shapes, slower"), which makes a
"healthy" run not healthy. ``--rotate-cpus`` moves every rank to CPU (rank + step) mod n each step,
so each rank sees the same mix of processors. This runs both kinds alternately (free first, then
rotate first, ...) so both see the same machine, and reports per mode: runs with a straggler
verdict, and how far apart the ranks' CPU time per step was (slowest rank / fastest rank, means per
step from rankscope.profile's scheduler samples: the same work on a slower processor takes more).

    .venv/bin/python bench/healthy_cpus.py --pairs 15 --ranks 2
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def cpu_spread(run: Any) -> float:
    """Mean CPU time per step of the training thread: the slowest rank's over the fastest rank's."""
    import polars as pl

    from rankscope.analysis.diagnosis.cpu import sched_frame

    means = sched_frame(run).group_by("rank").agg(m=pl.col("cpu_ns").cast(pl.Float64).mean())
    return float(means["m"].max()) / float(means["m"].min())  # type: ignore[arg-type]


def main() -> None:
    from stragglers import diagnose

    from rankscope.demo.launch import launch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=10, help="healthy runs per mode")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", default="/tmp/rankscope-bench-healthy-cpus")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list[tuple[str, float]]] = {"free": [], "rotate": []}
    t0 = time.time()
    for i in range(args.pairs):
        for mode in ("free", "rotate") if i % 2 == 0 else ("rotate", "free"):
            d = out / f"{mode}{i}"
            shutil.rmtree(d, ignore_errors=True)
            launch(d, ranks=args.ranks, steps=args.steps, warmup=2, slow_rank=None, slow_kind="compute",
                   slowdown=0.0, rotate_cpus=mode == "rotate")
            r = diagnose(d)
            verdict, spread = r["verdict"], cpu_spread(r["run"])
            rows[mode].append((verdict, spread))
            print(f"{i} {mode}: CPU time spread x{spread:.3f} -> {verdict}", flush=True)
            shutil.rmtree(d, ignore_errors=True)
    print(f"\nCommand: `.venv/bin/python bench/healthy_cpus.py {shlex.join(sys.argv[1:])}`  ")
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}; {time.time() - t0:.0f} s in all.\n")
    print("| ranks placed | healthy runs | straggler reported | CPU time per step, slowest rank / fastest: "
          "median (max) over runs |")
    print("|---|---|---|---|")
    for mode, rs in rows.items():
        flagged = [v for v, _ in rs if "no straggler" not in v]
        spreads = [s for _, s in rs]
        print(f"| {'by the OS scheduler' if mode == 'free' else 'rotated each step'} | {len(rs)} | {len(flagged)} | "
              f"x{statistics.median(spreads):.3f} (x{max(spreads):.3f}) |")
    for mode, rs in rows.items():
        for v, s in rs:
            if "no straggler" not in v:
                print(f"- {mode}: x{s:.3f}: {v}")


if __name__ == "__main__":
    main()
