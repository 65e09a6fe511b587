"""A 2-rank gloo job that profiles after ``init_process_group`` (as every real job does), destroys the
process group, and writes which of gloo's threads are still alive to ``OUT/threads-<rank>.json``.

``argv[1]``: ``rankscope`` (``rankscope.profile``) or ``torch`` (plain ``torch.profiler.profile``, the
control: the leak rankscope.collect.worldref releases is torch's own)."""
from __future__ import annotations

import gc
import json
import os
import sys

import torch
import torch.distributed as dist


def threads() -> list[str]:
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return sorted(names)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(1000)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=1)
    if mode == "rankscope":
        import rankscope

        cm = rankscope.profile(run=os.path.join(out, "run"), run_id="run", schedule=sched)
    else:
        cm = torch.profiler.profile(schedule=sched, on_trace_ready=lambda p: None)
    with cm as prof:
        for _ in range(4):
            dist.all_reduce(x)
            prof.step()
    before = threads()
    dist.destroy_process_group()
    gc.collect()
    with open(os.path.join(out, f"threads-{rank}.json"), "w") as f:
        json.dump({"before": before, "after": threads()}, f)
    if mode == "torch":  # the control skips finalization, where its pinned group's threads may abort it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
