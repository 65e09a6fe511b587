"""One process, its own ``schedule=``, and a trigger plan adopted at step ``k`` for every k given.

Run as a script by tests/e2e/test_trigger_in_window.py: a crash (the SIGSEGV torch's profiler
gave when a trigger's warm-up followed the job's RECORD step) kills this process, which the test
sees in its exit status; torch's "Incorrect schedule" warnings are printed and counted there.
"""
from __future__ import annotations

import json
import sys
import time
import warnings

import torch

import rankscope
from rankscope.collect.trigger import Plan


def main(run_root: str, offsets: list[int], lead: int = 1) -> None:
    """``lead`` 1: the plan starts at the next step (on time); below 1: it started ``1 - lead`` steps ago, as
    a rank whose trigger thread was late sees it."""
    warnings.simplefilter("always")
    x = torch.randn(64, 64)
    for k in offsets:
        sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=3)
        with rankscope.profile(run=f"{run_root}/k{k}", schedule=sched) as prof:
            for step in range(24):
                if step == k:
                    prof._adopt(Plan(f"t{k}", step + lead, 1, 2, None, time.time_ns()))
                for _ in range(3):
                    x = torch.tanh(x @ x)
                prof.step()
        print(json.dumps({"k": k, "ok": True}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], [int(a) for a in sys.argv[2].split(",")], int(sys.argv[3]) if len(sys.argv) > 3 else 1)
