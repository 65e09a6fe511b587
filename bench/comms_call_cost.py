"""Cost per collective of rankscope's timed backend (issue 14), in one process: the same small all_reduce
through plain gloo and through the timed wrapper of gloo (every call timed, 1 in 16 timed, entries built
but none timed, and paused: a pass-through), in interleaved blocks; medians of the per-call times. The
differences split the cost: paused - plain = the Python backend's dispatch; none timed - paused = building
the entry; every call - none timed = the completion callback; plain with a no-op callback - plain = what any
Python completion callback on gloo costs (its thread must take the GIL). The DDP-level comparison (bench/comms_overhead.py) is
drowned by this VM's ±30 % run-to-run noise; the per-call cost times the collectives per step says what
the wrapper adds to a step.

``--fr-pairs N`` measures the default engine instead, torch's Flight Recorder, which is switched on for a
whole process (its ring is sized when the first process group is made): N pairs of child processes, one with
``TORCH_FR_BUFFER_SIZE=2000`` and one without, in alternating order, each timing plain gloo all_reduces; the
cost is the median of the paired differences.

    .venv/bin/python bench/comms_call_cost.py --calls 2000 --blocks 15
    .venv/bin/python bench/comms_call_cost.py --calls 2000 --blocks 5 --fr-pairs 12
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
    ap.add_argument("--fr-pairs", type=int, default=0, help="measure Flight Recorder on vs off in N process pairs")
    ap.add_argument("--plain-only", action="store_true", help=argparse.SUPPRESS)  # a child of --fr-pairs
    a = ap.parse_args()
    if a.fr_pairs:
        return fr_pairs(a)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29733")
    import torch
    import torch.distributed as dist

    if a.plain_only:
        dist.init_process_group("gloo", rank=0, world_size=1)
        t = torch.ones(a.numel)
        per = []
        for i in range(a.blocks + 1):
            t0 = time.perf_counter_ns()
            for _ in range(a.calls):
                dist.all_reduce(t)
            if i:  # the first block warms up
                per.append((time.perf_counter_ns() - t0) / a.calls / 1e3)
        print("PER_CALL_US", statistics.median(per))
        dist.destroy_process_group()
        return

    from rankscope.collect.comms import timed_pg

    dist.init_process_group(timed_pg.timed_backend("gloo", ring=2000, sample_every=1), rank=0, world_size=1)
    timed = dist.group.WORLD
    plain = dist.new_group(backend="gloo")
    t = torch.ones(a.numel)

    def noop(fut) -> None:  # type: ignore[no-untyped-def]
        pass

    def block(pg, sample: int) -> float:  # type: ignore[no-untyped-def]
        timed_pg.RING.sample_every = max(sample, 1)
        timed_pg.set_recording(sample > 0)  # 0: paused
        t0 = time.perf_counter_ns()
        if sample < 0:  # plain gloo with a completion callback that does nothing: the floor of any callback
            for _ in range(a.calls):
                w = dist.all_reduce(t, group=pg, async_op=True)
                w.get_future().add_done_callback(noop)
                w.wait()
        else:
            for _ in range(a.calls):
                dist.all_reduce(t, group=pg)
        return (time.perf_counter_ns() - t0) / a.calls / 1e3

    variants = {"plain gloo": (plain, 1), "timed, every call": (timed, 1), "timed, 1 in 16": (timed, 16),
                "entries, none timed": (timed, 1 << 40), "paused (pass-through)": (timed, 0),
                "plain gloo + a no-op callback": (plain, -1)}
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


def fr_pairs(a: argparse.Namespace) -> None:
    """Flight Recorder on vs off: child processes in alternating order, median of the paired differences."""
    import subprocess
    import sys

    def child(on: bool, port: int) -> float:
        env = {k: v for k, v in os.environ.items() if k not in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        if on:
            env["TORCH_FR_BUFFER_SIZE"] = "2000"
        out = subprocess.run([sys.executable, __file__, "--plain-only", "--calls", str(a.calls), "--blocks",
                              str(a.blocks), "--numel", str(a.numel)], env=env, capture_output=True, text=True,
                             timeout=600, check=True).stdout
        return float(out.split("PER_CALL_US", 1)[1].split()[0])

    on_us, off_us, diff = [], [], []
    for i in range(a.fr_pairs):
        order = (True, False) if i % 2 == 0 else (False, True)
        got = {o: child(o, 29800 + 2 * i + j) for j, o in enumerate(order)}
        on_us.append(got[True])
        off_us.append(got[False])
        diff.append(got[True] - got[False])
    print(f"Flight Recorder off: {statistics.median(off_us):.2f} µs per all_reduce ({a.numel} floats); "
          f"on (ring 2000): {statistics.median(on_us):.2f} µs; median paired difference "
          f"{statistics.median(diff):+.2f} µs (min {min(diff):+.2f}, max {max(diff):+.2f}; {a.fr_pairs} process "
          f"pairs, median of {a.blocks} blocks of {a.calls} each; load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
