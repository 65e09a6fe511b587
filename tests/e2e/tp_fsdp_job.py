"""A 4-rank 2-D job: tensor parallel (DTensor ``parallelize_module``, Colwise / Rowwise) on the "tp" dim
of a 2 x 2 DeviceMesh and FSDP2 (``fully_shard``) on "dp", gloo, profiled with rankscope.profile as a new
user would (no recorder option). For tests/e2e/test_edges_jobs.py.

    tp_fsdp_job.py RUN

Mesh [[0, 1], [2, 3]]: tp groups {0, 1} and {2, 3}, dp groups {0, 2} and {1, 3}: ranks 0 and 3 share no
group. TP's collectives are functional (``_c10d_functional::all_reduce`` + ``wait_tensor``); FSDP's are
all-gathers and reduce-scatters. 4 steps, the last 2 captured. Each rank writes ``RUN/job-<rank>.json``
with the mesh's groups as torch names them (the truth for the groups in run.json).
"""
from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import rankscope
from rankscope.demo.workloads.common import finish
from rankscope.demo.workloads.tp_fsdp import build


def main(run: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = build(mesh, 2)  # two MLPs of 32 -> 64 -> 32, Colwise / Rowwise on "tp", fully_shard on "dp"
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with rankscope.profile(run=run, schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
                           layout={"dp": 2, "tp": 2}) as prof:
        for _ in range(4):
            model(torch.randn(8, 32)).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    groups = {dim: sorted(dist.get_process_group_ranks(mesh[dim].get_group())) for dim in ("dp", "tp")}
    with open(f"{run}/job-{rank}.json", "w") as f:
        json.dump({"rank": rank, "groups": groups}, f)
    finish()  # destroy_process_group; FSDP2 keeps the group: see finish's docstring


if __name__ == "__main__":
    main(sys.argv[1])
