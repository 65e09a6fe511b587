"""One-GPU NCCL job for tests/e2e/test_comms_gpu.py (a world of one rank; runs only where CUDA is).

    gpu_comms_job.py OUT MODE      MODE: timed | fr

``timed``: rankscope's timed wrapper of NCCL; ``fr``: plain NCCL with torch's Flight Recorder and
``TORCH_NCCL_ENABLE_TIMING`` (what ``rankscope.comms.enable()`` sets), the oracle. Both run the same
workload (DDP's construction and 3 steps on the GPU, then a 64 MiB all_reduce and a broadcast) and write
OUT/<mode>.json with each entry's op, sequence, state and GPU duration.
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main(out: str, mode: str) -> None:
    torch.cuda.set_device(0)
    if mode == "fr":
        from rankscope.collect import comms

        comms.enable(2000)
        backend = "nccl"
    else:
        from rankscope.collect.comms import timed_pg

        backend = timed_pg.timed_backend("nccl")
    dist.init_process_group(backend, init_method="file://" + os.path.join(out, f"store-{mode}"), rank=0,
                            world_size=1, device_id=torch.device("cuda", 0))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(1024, 1024).cuda(), device_ids=[0])
    for _ in range(3):
        model(torch.randn(64, 1024, device="cuda")).sum().backward()
    t = torch.ones(16 << 20, device="cuda")
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    torch.cuda.synchronize()
    time.sleep(0.5)  # the pollers (ours every 0.1 s, NCCL's watchdog) see the events
    if mode == "fr":
        from rankscope.collect import comms

        entries = comms.fr_doc()["entries"]  # NCCL's ring (_dump_nccl_trace), not gloo's
    else:
        from rankscope.collect.comms import timed_pg

        entries = timed_pg.entries()
    rows = [{"op": str(e["profiling_name"]).split(":", 1)[-1], "seq": e["collective_seq_id"], "state": e["state"],
             "duration_ms": e.get("duration_ms"), "started": e.get("time_discovered_started_ns"),
             "completed": e.get("time_discovered_completed_ns"), "created": e["time_created_ns"]} for e in entries]
    with open(os.path.join(out, f"{mode}.json"), "w") as f:
        json.dump({"entries": rows, "value": float(t[0])}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
