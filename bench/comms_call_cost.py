"""Cost per collective of rankscope's timed backend (issue 14), in one process: the same small all_reduce
through plain gloo and through the timed wrapper of gloo (every call timed, 1 in 16 timed, entries built
but none timed, and paused: a pass-through), in interleaved blocks; medians of the per-call times. The
differences split the cost: paused - plain = the Python backend's dispatch; none timed - paused = building
the entry; every call - none timed = the completion callback. The DDP-level comparison (bench/comms_overhead.py) is
drowned by this VM's ±30 % run-to-run noise; the per-call cost times the collectives per step says what
the wrapper adds to a step.

    .venv/bin/python bench/comms_call_cost.py --calls 2000 --blocks 15
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000, help="all_reduce calls per block")
    ap.add_argument("--blocks", type=int, default=15, help="interleaved blocks per variant")
    ap.add_argument("--numel", type=int, default=256)
    a = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29733")
    import torch
    import torch.distributed as dist

    from rankscope.collect import timed_pg

    dist.init_process_group(timed_pg.timed_backend("gloo", ring=2000, sample_every=1), rank=0, world_size=1)
    timed = dist.group.WORLD
    plain = dist.new_group(backend="gloo")
    t = torch.ones(a.numel)

    def block(pg, sample: int) -> float:  # type: ignore[no-untyped-def]
        timed_pg.RING.sample_every = max(sample, 1)
        timed_pg.set_recording(sample > 0)  # 0: paused
        t0 = time.perf_counter_ns()
        for _ in range(a.calls):
            dist.all_reduce(t, group=pg)
        return (time.perf_counter_ns() - t0) / a.calls / 1e3

    variants = {"plain gloo": (plain, 1), "timed, every call": (timed, 1), "timed, 1 in 16": (timed, 16),
                "entries, none timed": (timed, 1 << 40), "paused (pass-through)": (timed, 0)}
    for name, (pg, s) in variants.items():  # warm-up
        block(pg, s)
    got: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(a.blocks):
        names = list(variants)
        for name in names[i % len(names):] + names[:i % len(names)]:
            got[name].append(block(*variants[name]))
    base = statistics.median(got["plain gloo"])
    for name, v in got.items():
        med = statistics.median(v)
        print(f"{name}: {med:.2f} µs per all_reduce ({a.numel} floats), +{med - base:.2f} µs vs plain gloo "
              f"(median of {a.blocks} blocks of {a.calls}; load {os.getloadavg()[0]:.1f})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
