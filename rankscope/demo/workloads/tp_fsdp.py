"""2-D parallel MLP blocks: tensor parallel (DTensor ``parallelize_module``, Colwise / Rowwise) on the "tp" dim
of a DeviceMesh and FSDP2 (``fully_shard``) on "dp", gloo.

The mesh is dp x tp = 2 x 2 at 4 ranks ([[0, 1], [2, 3]]: tp groups {0, 1} and {2, 3}, dp groups {0, 2} and
{1, 3}); at 2 ranks it is 1 x 2 (tensor parallel over both ranks, FSDP over a group of one): the rank a
host-side pause delays is then waited for in TP's functional all-reduces. The tp peers of a dp rank read
the same batch.

- ``--straggler host``: a Python loop (no operator) before the optimizer step on the slow rank, ``--amount``
  ms of its CPU time (default 25). Truth: that rank, cause ``host``.
- ``--straggler none``: the healthy twin.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from rankscope.demo.workloads.common import (Timers, busy_unit, finish, healthy_step_ms, parser, run_profiled, setup,
                                             size_extra, write_truth)

DIM, HIDDEN, BLOCKS, BATCH = 256, 1024, 4, 64


class MLP(nn.Module):
    def __init__(self, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def mesh_shape(world: int) -> tuple[int, int]:
    """(dp, tp): 2 x 2 at 4 ranks, 1 x 2 at 2 ranks; tp = 2 otherwise."""
    return (world // 2, 2) if world % 2 == 0 else (world, 1)


def build(mesh: DeviceMesh, blocks: int, dim: int = 32, hidden: int = 64) -> nn.Sequential:
    """``blocks`` MLPs, each tensor parallel on mesh["tp"] and under ``fully_shard`` on mesh["dp"], then the root."""
    model = nn.Sequential(*[MLP(dim, hidden) for _ in range(blocks)])
    for block in model:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return model


def main(argv: list[str] | None = None) -> None:
    args = parser(__doc__, ["host"], "host: ms of the Python loop before the optimizer step").parse_args(argv)
    if args.amount is None:
        args.amount = 25.0 if args.straggler == "host" else 0.0
    rank, world = setup(args)
    dp, tp = mesh_shape(world)
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = build(mesh, BLOCKS, DIM, HIDDEN)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(args.seed * 1000 + mesh["dp"].get_local_rank())
    loop = {"units": 0}

    def step(i: int, t: Timers) -> None:
        with t.time("data"):
            x, y = torch.randn(BATCH, DIM, generator=data), torch.randn(BATCH, DIM, generator=data)
        with t.time("work"):
            nn.functional.mse_loss(model(x), y).backward()
        with t.time("extra"):
            for _ in range(loop["units"]):
                busy_unit()
        with t.time("opt"):
            opt.step()
            opt.zero_grad(set_to_none=True)

    step_ms = healthy_step_ms(step, args.calib)
    slow = args.straggler == "host" and rank == args.slow_rank
    size_extra(step, args.tune, slow, busy_unit, lambda n: loop.update(units=n), args.amount)
    layout = {"dp": dp, "tp": tp}
    kind = "host" if args.straggler == "host" else None
    timers = run_profiled(args, rank, step, layout=layout,
                          metadata={"job": "tp_fsdp", "straggler": args.straggler, "slow_rank": args.slow_rank,
                                    "amount": args.amount})
    groups = {d: sorted(dist.get_process_group_ranks(mesh[d].get_group())) for d in ("dp", "tp")}
    write_truth(args, rank, world, timers, {
        "job": "tp_fsdp", "straggler": kind, "slow_rank": args.slow_rank if kind else None, "amount": args.amount,
        "healthy_step_ms": round(step_ms, 3), "layout": layout}, mine={"groups": groups, "loop_units": loop["units"]})
    finish()


if __name__ == "__main__":
    main()
