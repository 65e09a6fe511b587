"""A transformer LM in pipeline stages (``torch.distributed.pipelining``, GPipe or 1F1B), gloo, one stage per rank.

Stage 0 holds the embedding, the last stage the head and the loss; activations go 0 -> 1 -> ... and
gradients back as send / recv pairs. ``MICRO`` (8) microbatches per step.

- ``--straggler stage``: stage ``--slow-rank`` holds ``--amount`` (default 2) times the layers of each other
  stage (4), as the issue's 20-layer LM held 8 on stage 2 and 4 on the others. Truth: that rank is the
  bottleneck stage, cause ``compute`` (more operator calls); its extra time is its layers' forward + backward
  CPU time minus the other stages' median.
- ``--straggler none``: the balanced twin, the same layers spread evenly (5 each at 4 stages, 6 at 2).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from rankscope.demo.workloads.common import (Timed, Timers, finish, healthy_step_ms, parser, run_profiled, setup,
                                             write_truth)

VOCAB, D, SEQ, ROWS, MICRO, BASE = 128, 64, 16, 2, 8, 4


def make_schedule(module: nn.Module, rank: int, world: int, kind: str, micro: int,
                  loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Any:
    """Stage ``rank`` of ``world`` (one stage per rank) under GPipe (``kind`` "gpipe") or 1F1B."""
    stage = PipelineStage(module, rank, world, torch.device("cpu"))
    cls = ScheduleGPipe if kind == "gpipe" else Schedule1F1B
    return cls(stage, n_microbatches=micro, loss_fn=loss_fn)


def run_step(sched: Any, rank: int, world: int, x: torch.Tensor, y: torch.Tensor) -> None:
    """One step of the schedule: the first stage feeds ``x``, the last one takes the targets ``y``."""
    if rank == 0:
        sched.step(x)
    elif rank == world - 1:
        sched.step(target=y, losses=[])
    else:
        sched.step()


def layers_per_stage(world: int, heavy: int, factor: float) -> list[int]:
    """BASE layers per stage and round(BASE * factor) on ``heavy``; with heavy -1 the same total, even."""
    total = BASE * (world - 1) + round(BASE * factor)
    if heavy >= 0:
        return [round(BASE * factor) if s == heavy else BASE for s in range(world)]
    return [total // world + (s < total % world) for s in range(world)]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(D, 4, 4 * D, dropout=0.0, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.layer(x, src_mask=mask, is_causal=True)


class Stage(nn.Module):
    def __init__(self, first: bool, last: bool, layers: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D) if first else None
        self.body = Timed(nn.Sequential(*[Block() for _ in range(layers)]))
        self.head = nn.Linear(D, VOCAB) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(self.emb(x) if self.emb is not None else x)
        return self.head(h) if self.head is not None else h


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out.flatten(0, 1), target.flatten())


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, ["stage"], "stage: the slow stage holds this many times the layers of each other stage")
    p.add_argument("--schedule", choices=["gpipe", "1f1b"], default="gpipe")
    args = p.parse_args(argv)
    if args.amount is None:
        args.amount = 2.0
    rank, world = setup(args)
    heavy = args.slow_rank if args.straggler == "stage" else -1
    layers = layers_per_stage(world, heavy, args.amount)
    torch.manual_seed(args.seed * 1000 + rank)
    stage = Stage(rank == 0, rank == world - 1, layers[rank])
    sched = make_schedule(stage, rank, world, args.schedule, MICRO, loss_fn)
    opt = torch.optim.AdamW(stage.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(args.seed)  # the same stream on every rank: x on the first, y on the last

    def step(i: int, t: Timers) -> None:
        with t.time("data"):
            tokens = torch.randint(0, VOCAB, (MICRO * ROWS, SEQ + 1), generator=data)
        with t.time("schedule"):
            run_step(sched, rank, world, tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())  # torch 2.11 checks strides
        with t.time("opt"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        stage.body.take(t)

    step_ms = healthy_step_ms(step, args.calib)
    kind = "stage" if heavy >= 0 else None
    pipe = {"schedule": args.schedule, "stages": world, "microbatches": MICRO, "layers": layers,
            "bottleneck_stage": heavy if kind else None}
    timers = run_profiled(args, rank, step, layout={"pp": world},
                          metadata={"job": "pipeline", "straggler": args.straggler, "slow_rank": args.slow_rank,
                                    **pipe})
    write_truth(args, rank, world, timers, {
        "job": "pipeline", "straggler": kind, "slow_rank": heavy if kind else None, "amount": args.amount,
        "healthy_step_ms": round(step_ms, 3), "layout": {"pp": world}, "pipeline": pipe})
    finish()


if __name__ == "__main__":
    main()
