"""A transformer LM in pipeline stages (``torch.distributed.pipelining``: GPipe, 1F1B or interleaved 1F1B), gloo.

Stage 0 holds the embedding, the last stage the head and the loss; activations go 0 -> 1 -> ... and
gradients back as send / recv pairs. ``MICRO`` (8) microbatches per step.

- ``--schedule interleaved``: ``ScheduleInterleaved1F1B`` with two stages per rank (looped: rank r holds stages
  r and r + P, and the last rank sends to the first between its two stages); a rank's layers are split
  between its stages.
- ``--schedule zbv``: ``ScheduleZBVZeroBubble`` (backward split into input and weight passes), two stages per
  rank in a V: rank r holds stages r and 2P - 1 - r, so rank 0 holds the first and the last stage.
- ``--dp D``: D data-parallel replicas of the pipeline (world = P x D, pp outermost as in torch's DeviceMesh
  ("pp", "dp"): rank = stage * D + replica); each replica reads its own batches, and after the schedule each
  stage's gradients are averaged over its replicas in one flat all_reduce (one DDP bucket).

- ``--straggler stage``: stage ``--slow-rank`` holds ``--amount`` (default 2) times the layers of each other
  stage (4), as the issue's 20-layer LM held 8 on stage 2 and 4 on the others. Truth: that rank is the
  bottleneck stage, cause ``compute`` (more operator calls); its extra time is its layers' forward + backward
  CPU time minus the other stages' median.
- ``--straggler data``: rank ``--slow-rank`` (one replica of one stage under ``--dp``) reads its batches through a
  dataset that tokenizes text in pure Python first (fsdp's ``PyTokenizer``), ``--amount`` (default 0.15) of the
  healthy step, on a balanced pipeline (4 layers per stage). Truth: that rank, cause ``data``; its replicas wait
  for it in the gradients' all_reduce, and its pipeline neighbours in their receives.
- ``--straggler none``: the balanced twin, the same layers spread evenly (5 each at 4 stages, 6 at 2); with
  ``--amount 1`` the data straggler's twin (4 each).
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                                         ScheduleZBVZeroBubble)

from torch.utils.data import DataLoader, Dataset

from rankscope.demo.workloads.common import (Timed, Timers, finish, healthy_step_ms, parser, run_profiled, setup,
                                             size_extra, write_truth)
from rankscope.demo.workloads.fsdp import PyTokenizer

VOCAB, D, SEQ, ROWS, MICRO, BASE = 128, 64, 16, 2, 8, 4


def make_schedule(modules: list[nn.Module], pp_rank: int, pp: int, kind: str, micro: int,
                  loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], group: Any = None) -> Any:
    """The schedule of pipeline rank ``pp_rank`` of ``pp``: one stage (``modules[0]``, stage ``pp_rank``) under
    GPipe (``kind`` "gpipe") or 1F1B; under "interleaved", stage ``pp_rank + v * pp`` for each ``modules[v]``.
    ``group``: the pipeline's process group (None: the world)."""
    cpu = torch.device("cpu")
    if kind in ("interleaved", "zbv"):
        n = len(modules) * pp
        index = stage_indices(kind, pp_rank, pp, len(modules))
        stages: list[Any] = [PipelineStage(m, i, n, cpu, group=group) for i, m in zip(index, modules)]
        cls_multi = ScheduleInterleaved1F1B if kind == "interleaved" else ScheduleZBVZeroBubble
        return cls_multi(stages, n_microbatches=micro, loss_fn=loss_fn)
    cls = ScheduleGPipe if kind == "gpipe" else Schedule1F1B
    return cls(PipelineStage(modules[0], pp_rank, pp, cpu, group=group), n_microbatches=micro, loss_fn=loss_fn)


def stage_indices(kind: str, pp_rank: int, pp: int, per_rank: int) -> list[int]:
    """The stages pipeline rank ``pp_rank`` holds: itself; looped (interleaved) r, r + P, ...; a V (zbv) r, 2P-1-r."""
    if kind == "zbv":
        return [pp_rank, 2 * pp - 1 - pp_rank]
    return [pp_rank + v * pp for v in range(per_rank)]


def run_step(sched: Any, pp_rank: int, pp: int, x: torch.Tensor, y: torch.Tensor, kind: str = "1f1b") -> None:
    """One step of the schedule: the rank of the first stage feeds ``x``, the rank of the last one takes the
    targets ``y`` (pipeline rank 0 and ``pp - 1``; under zbv, both rank 0)."""
    first, last = pp_rank == 0, pp_rank == (0 if kind == "zbv" else pp - 1)
    if first and last:
        sched.step(x, target=y, losses=[])
    elif first:
        sched.step(x)
    elif last:
        sched.step(target=y, losses=[])
    else:
        sched.step()


def split(n: int, parts: int) -> list[int]:
    """``n`` layers over ``parts`` stages of one rank, the first ones one more."""
    return [n // parts + (v < n % parts) for v in range(parts)]


def groups(world: int, dp: int) -> tuple[Any, Any, int, int]:
    """(pipeline group, data-parallel group, pipeline rank, replica) of this rank; rank = stage * dp + replica.
    Every rank creates every group, in one order (``dist.new_group``'s rule)."""
    rank, pp = dist.get_rank(), world // dp
    mine_pp = mine_dp = None
    for d in range(dp):
        g = dist.new_group([s * dp + d for s in range(pp)])
        mine_pp = g if rank % dp == d else mine_pp
    for s in range(pp):
        g = dist.new_group([s * dp + d for d in range(dp)])
        mine_dp = g if rank // dp == s else mine_dp
    return mine_pp, mine_dp, rank // dp, rank % dp


def average(params: list[nn.Parameter], group: Any, dp: int) -> None:
    """Each gradient averaged over the stage's replicas in one flat all_reduce (one bucket)."""
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.flatten() for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= dp
    off = 0
    for g in grads:
        g.copy_(flat[off:off + g.numel()].view_as(g))
        off += g.numel()


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
    """``own_output``: a stage without the head returns a tensor of its own, not the timer's view of the last layer's
    output (zbv's input-backward pass detaches the stage's outputs in place, which a view refuses)."""

    def __init__(self, first: bool, last: bool, layers: int, own_output: bool = False) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D) if first else None
        self.body = Timed(nn.Sequential(*[Block() for _ in range(layers)]))
        self.head = nn.Linear(D, VOCAB) if last else None
        self.own_output = own_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(self.emb(x) if self.emb is not None else x)
        if self.head is not None:
            return self.head(h)
        return h.clone() if self.own_output else h


class Batches(Dataset):
    """Step i's tokens (MICRO x ROWS rows of SEQ + 1), the same for a replica's every rank; with ``chunks``, that
    many chunks of text are tokenized in Python first (the data straggler: a dataset that tokenizes on the fly)."""

    def __init__(self, seed: int, tok: PyTokenizer) -> None:
        self.seed, self.tok, self.chunks = seed, tok, 0

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> torch.Tensor:
        for k in range(self.chunks):
            self.tok.encode(self.tok.chunk(i * self.chunks + k))
        return torch.randint(0, VOCAB, (MICRO * ROWS, SEQ + 1), generator=torch.Generator().manual_seed(self.seed + i))


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out.flatten(0, 1), target.flatten())


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__, ["stage", "data"], "stage: the slow stage holds this many times the layers of each other stage "
                                           "(default 2); data: the slow rank's extra data loading, a share of the "
                                           "healthy step (default 0.15)")
    p.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved", "zbv"], default="gpipe")
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas of the pipeline (world = stages x dp)")
    args = p.parse_args(argv)
    if args.amount is None:
        args.amount = 0.15 if args.straggler == "data" else 2.0
    rank, world = setup(args)
    if args.dp < 1 or world % args.dp or world // args.dp < 2:
        raise SystemExit(f"--dp {args.dp}: the world ({world}) must be at least 2 stages x dp")
    pp_group, dp_group, pp_rank, replica = groups(world, args.dp) if args.dp > 1 else (None, None, rank, 0)
    pp = world // args.dp
    heavy = args.slow_rank // args.dp if args.straggler == "stage" else -1  # the slow rank's stage
    # a data straggler's pipeline is balanced at BASE layers a stage: its amount is a share of the step, not layers
    # (until 2026-12-02 it took the amount as the layer factor: 0.10-0.20 gave 2 stages 3 and 2 layers, 4 stages 4, 3,
    # 3 and 3: a heavier first stage beside the data loading, and a light last stage whose bubble hid it)
    layers = layers_per_stage(pp, heavy, 1.0 if args.straggler == "data" else args.amount)
    torch.manual_seed(args.seed * 1000 + pp_rank)  # the replicas of a stage start alike
    per_rank = 2 if args.schedule in ("interleaved", "zbv") else 1
    index = stage_indices(args.schedule, pp_rank, pp, per_rank)
    parts = [Stage(i == 0, i == per_rank * pp - 1, n, own_output=args.schedule == "zbv")
             for i, n in zip(index, split(layers[pp_rank], per_rank))]
    sched = make_schedule(list(parts), pp_rank, pp, args.schedule, MICRO, loss_fn, pp_group)
    params = [q for m in parts for q in m.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3)
    data = Batches(args.seed * 100_000 + replica * 10_000, PyTokenizer(args.seed))  # per replica: x first, y last
    batches = iter(DataLoader(data, batch_size=None, shuffle=False))

    def step(i: int, t: Timers) -> None:
        with t.time("data"):
            c0, w0 = time.thread_time(), time.perf_counter()
            tokens = next(batches)
            if data.chunks:
                t.add("extra", (time.perf_counter() - w0) * 1e3)
                t.add("extra_cpu", (time.thread_time() - c0) * 1e3)
        with t.time("schedule"):
            x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()  # torch 2.11 checks strides
            run_step(sched, pp_rank, pp, x, y, args.schedule)
        if dp_group is not None:
            with t.time("grads"):
                average(params, dp_group, args.dp)
        with t.time("opt"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        for m in parts:
            m.body.take(t)

    step_ms = healthy_step_ms(step, args.calib)
    if args.straggler == "data":
        size_extra(step, args.tune, rank == args.slow_rank, lambda: data.tok.encode(data.tok.chunk(0)),
                   lambda n: setattr(data, "chunks", n), args.amount * step_ms)
    kind = "stage" if heavy >= 0 else "data" if args.straggler == "data" else None
    pipe = {"schedule": args.schedule, "stages": pp, "dp": args.dp, "stages_per_rank": per_rank,
            "microbatches": MICRO, "layers": layers, "bottleneck_stage": heavy if kind else None,
            "stage_ranks": [[s * args.dp + d for d in range(args.dp)] for s in range(pp)]}
    layout = {"pp": pp, "dp": args.dp} if args.dp > 1 else {"pp": pp}
    timers = run_profiled(args, rank, step, layout=layout,
                          metadata={"job": "pipeline", "straggler": args.straggler, "slow_rank": args.slow_rank,
                                    **pipe})
    write_truth(args, rank, world, timers, {
        "job": "pipeline", "straggler": kind, "slow_rank": args.slow_rank if kind else None, "amount": args.amount,
        "healthy_step_ms": round(step_ms, 3), "layout": layout, "pipeline": pipe})
    finish()


if __name__ == "__main__":
    main()
