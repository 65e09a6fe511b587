"""Cost of ``record_shapes=True`` (rankscope.profile's default since issue 12) inside profiled steps.

One process, alternating profiled windows with and without shapes (on, off, on, off, ...), so that
drifts in machine speed hit both alike; each window times ``--steps`` training steps of a workload
(the LM of rankscope.demo.lm: many small operators, the worst case for per-operator costs; and the
demo's MLP: few large ones) under torch.profiler with CPU activity. Prints the median step time of
each side and the median of the paired ratios; the profiler's trace export is outside the timing.

    PYTHONPATH=. .venv/bin/python bench/shapes_overhead.py --pairs 8 --steps 10
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from torch import nn


def workloads() -> dict[str, tuple[nn.Module, object]]:
    from rankscope.demo.lm import TinyLM, TokenBatches
    from rankscope.demo.train import MLP

    torch.manual_seed(0)
    lm, mlp = TinyLM(), MLP(256, 512, 10)
    x, y = TokenBatches(1, 8, 48, 96, 1.0, 0)[0]
    xm, ym = torch.randn(256, 256), torch.randint(0, 10, (256,))

    def lm_step() -> None:
        nn.functional.cross_entropy(lm(x).flatten(0, 1), y.flatten(), ignore_index=0).backward()

    def mlp_step() -> None:
        nn.functional.cross_entropy(mlp(xm), ym).backward()

    return {"lm": (lm, lm_step), "mlp": (mlp, mlp_step)}


def window(step, steps: int, shapes: bool) -> float:
    """Median step time (ms) of one profiled window."""
    times = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=shapes) as prof:
        for _ in range(steps):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
            prof.step()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load (1 min) before: {os.getloadavg()[0]:.2f}")
    for name, (_, step) in workloads().items():
        for _ in range(3):
            step()
        on, off, ratio = [], [], []
        for i in range(args.pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            got = {s: window(step, args.steps, s) for s in order}
            on.append(got[True])
            off.append(got[False])
            ratio.append(got[True] / got[False])
        print(f"{name}: step {statistics.median(off):.2f} ms without shapes, {statistics.median(on):.2f} ms with; "
              f"median paired ratio {statistics.median(ratio):.3f} (min {min(ratio):.3f}, max {max(ratio):.3f})")
    print(f"load (1 min) after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
