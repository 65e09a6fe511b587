"""Realistic workloads for the straggler benchmark and tests, launched through torch.distributed.run.

A small transformer language model under DistributedDataParallel (gloo on CPU), profiled with
``rankscope.profile``'s defaults, fed by a real DataLoader:

- ``--family lm``: batches of token sequences of variable length (each batch padded to its longest
  sequence, as LM training does); ``--imbalance F`` gives one rank sequences F times longer (the most
  common imbalance in LLM training: its shard holds longer documents). Healthy: every rank draws its
  lengths from the same distribution.
- ``--family decode``: every sample is decoded from compressed bytes and augmented in the dataset's
  ``__getitem__`` (zlib + a random crop and noise: real work, not a sleep); ``--imbalance F`` gives
  one rank F times more bytes to decode per sample (larger files on that rank's shard).

Each step is timed (perf_counter and the training thread's CPU time: ``data``, the batch's loading;
``work``, forward + backward + optimizer step) and rank 0 writes ``RUN/truth.json`` after the profile, as the
jobs of rankscope.demo.workloads do: the slow rank, the cause a verdict should give, and its extra CPU time
per step (``work_cpu`` for ``lm``, ``data_cpu`` for ``decode``, over the other ranks' median).
"""
from __future__ import annotations

import argparse
import os
import time
import zlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

from rankscope.demo.train import intra_op_threads, rotate, rotation_cpus
from rankscope.demo.workloads.common import Timers, write_truth

VOCAB = 512


class TokenBatches(Dataset):
    """One item = one batch of ``batch`` sequences, lengths drawn in [lo, hi] * ``scale``, padded."""

    def __init__(self, n: int, batch: int, lo: int, hi: int, scale: float, seed: int) -> None:
        self.n, self.batch, self.lo, self.hi, self.scale, self.seed = n, batch, lo, hi, scale, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        lengths = (torch.randint(self.lo, self.hi + 1, (self.batch,), generator=g) * self.scale).long()
        t = int(lengths.max())
        x = torch.randint(1, VOCAB, (self.batch, t + 1), generator=g)
        pad = torch.arange(t + 1)[None, :] >= lengths[:, None]
        x[pad] = 0
        return x[:, :-1], x[:, 1:]


class Encoded(Dataset):
    """Samples stored compressed: ``__getitem__`` decompresses, crops and adds noise (real CPU work)."""

    def __init__(self, n: int, nbytes: int, dim: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        raw = torch.randint(0, 16, (nbytes,), generator=g, dtype=torch.uint8).numpy().tobytes()
        self.blob, self.n, self.dim, self.nbytes = zlib.compress(raw, 6), n, dim, nbytes

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        raw = torch.frombuffer(bytearray(zlib.decompress(self.blob)), dtype=torch.uint8).float()
        g = torch.Generator().manual_seed(i)
        off = int(torch.randint(0, max(self.nbytes - self.dim, 1), (1,), generator=g))
        x = raw[off:off + self.dim] / 16 + 0.01 * torch.randn(self.dim, generator=g)
        x = x + 0.001 * raw.sort().values[: self.dim]  # augmentation over the whole decoded sample
        return x, torch.tensor(i % 10)


class TinyLM(nn.Module):
    def __init__(self, d: int = 64, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=0)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.head(self.body(self.emb(x), mask=mask, is_causal=True))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--family", choices=["lm", "decode"], default="lm")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--imbalance", type=float, default=1.5, help="work factor of the slow rank")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-shapes", action="store_true", help="profile with record_shapes=False (overhead bench)")
    p.add_argument("--rotate-cpus", action="store_true",
                   help="each step, move this rank to CPU (rank + step) mod n (as train.py): on a machine whose "
                        "processors differ in speed every rank then sees the same mix of them")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    torch.set_num_threads(intra_op_threads())
    factor = args.imbalance if rank == args.slow_rank else 1.0
    n = args.steps + args.warmup + 2
    if args.family == "lm":
        data: Dataset = TokenBatches(n, 8, 48, 96, factor, args.seed * 1000 + rank)
        loader = DataLoader(data, batch_size=None, shuffle=False)
        model: nn.Module = TinyLM()
        loss_fn = lambda out, y: nn.functional.cross_entropy(out.flatten(0, 1), y.flatten(), ignore_index=0)  # noqa: E731
    else:
        data = Encoded(64 * n, int(40_000 * factor), 256, args.seed * 1000 + rank)
        loader = DataLoader(data, batch_size=64, shuffle=False)
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
        loss_fn = nn.functional.cross_entropy
    model = DDP(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    import rankscope

    shapes = {"record_shapes": False} if args.no_shapes else {}
    with rankscope.profile(**shapes, run=args.run_dir, run_id=os.path.basename(os.path.normpath(args.run_dir)),
                           schedule=torch.profiler.schedule(wait=0, warmup=args.warmup, active=args.steps, repeat=1),
                           metadata={"workload": {"family": args.family, "slow_rank": args.slow_rank,
                                                  "imbalance": args.imbalance, "seed": args.seed}}) as prof:
        it = iter(loader)
        cpus, timers = rotation_cpus(args.rotate_cpus), Timers()
        recorded = range(args.warmup, args.warmup + args.steps)  # ProfilerStep#i of the schedule's active steps
        for i in range(args.warmup + args.steps + 1):
            rotate(cpus, rank, i)
            t0, c0 = time.perf_counter(), time.thread_time()
            with timers.time("data"):
                x, y = next(it)
            with timers.time("work"):
                opt.zero_grad(set_to_none=True)
                loss_fn(model(x), y).backward()
                opt.step()
            timers.close(i, i in recorded, (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3)
            prof.step()
    slow = args.slow_rank if 0 <= args.slow_rank < world else None
    truth = {"job": "ddp-lm", "family": args.family, "straggler": args.family if slow is not None else None,
             "slow_rank": slow, "amount": args.imbalance}
    write_truth(args, rank, world, timers, truth, captured=list(recorded))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
