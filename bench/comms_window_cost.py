"""Cost of keeping a profiler window's collectives (issue 14): Flight Recorder's dump of a full ring and
rankscope's window file built from it (``rankscope.collect.comms.window_json_gz``), medians of repeats.
Both run once per captured window, on the export thread (not the training thread).

    .venv/bin/python bench/comms_window_cost.py --ring 2000 --repeats 20
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ring", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    os.environ["TORCH_FR_BUFFER_SIZE"] = str(args.ring)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29731")
    import torch
    import torch._C._distributed_c10d as c10d
    import torch.distributed as dist

    from rankscope.collect import comms

    dist.init_process_group("gloo", rank=0, world_size=1)
    for _ in range(args.ring + 500):  # a full ring
        dist.all_reduce(torch.ones(4))
    fr, win, size = [], [], 0
    for _ in range(args.repeats):  # interleaved
        t = time.perf_counter()
        c10d._dump_fr_trace(True, False, False)  # type: ignore[attr-defined]
        fr.append(time.perf_counter() - t)
        t = time.perf_counter()
        data = comms.window_json_gz(0, time.time_ns())
        win.append(time.perf_counter() - t)
        size = len(data or b"")
    dist.destroy_process_group()
    print(f"ring {args.ring}: Flight Recorder dump {statistics.median(fr) * 1e3:.1f} ms, window file "
          f"{statistics.median(win) * 1e3:.1f} ms ({size / 1024:.1f} KiB gzip), medians of {args.repeats}; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
