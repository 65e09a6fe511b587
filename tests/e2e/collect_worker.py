"""Training worker for the collect e2e tests (run under torchrun, gloo, CPU)."""
from __future__ import annotations

import os
import signal
import sys

import torch
import torch.distributed as dist

import rankscope
from rankscope.store.uploader import UploadConfig


def main() -> None:
    run, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 32))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    up = UploadConfig(jitter_s=0.1, backoff_base_s=0.1, backoff_max_s=0.5, exit_timeout_s=3)
    prof = rankscope.profile(run=run, schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2),
                             metadata={"mode": mode}, layout={"dp": dist.get_world_size(), "tp": 1, "pp": 1},
                             spool_dir=os.environ["RS_SPOOL"] + f"/rank-{dist.get_rank()}", upload=up,
                             host_map=os.environ.get("RS_HOSTMAP"))
    prof.start()
    print("TRAINING-STARTED", flush=True)
    for _ in range(9):
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
        prof.step()
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    prof.stop()
    dist.destroy_process_group()
    print("TRAINING-DONE", flush=True)


if __name__ == "__main__":
    main()
