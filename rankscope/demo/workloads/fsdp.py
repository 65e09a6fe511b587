"""A small transformer LM under FSDP2 (``fully_shard`` on each layer, then the root), gloo, one straggler kind.

- ``--straggler data``: the slow rank's dataset tokenizes text in pure Python (greedy longest-match subwords)
  inside ``__getitem__`` for each batch, ``--amount`` (default 0.10) of the healthy step; the others read
  token ids as they are. Truth: that rank, cause ``data``.
- ``--straggler compute``: extra matmuls on the embedding output inside the slow rank's forward, ``--amount``
  (default 0.15) of the healthy step. Truth: cause ``compute``; its extra time is its forward + backward CPU time
  minus the other ranks' median (the ``extra`` timer sees the matmuls' forward only: their backward, about as long
  again, runs inside ``loss.backward()``).
- ``--straggler input``: the slow rank's sequences are ``--amount`` (default 1.5) times longer. Truth: cause
  ``imbalance``; its extra time is its forward + backward CPU time minus the other ranks' median.
- ``--straggler none``: the healthy twin.

The ranks that wait do so inside FSDP's own spans (the next all-gather or reduce-scatter).
"""
from __future__ import annotations

import argparse
import random
import time
import warnings
from typing import Any, Callable

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, Dataset

from rankscope.demo.lm import VOCAB, TinyLM, TokenBatches
from rankscope.demo.workloads.common import (Timers, finish, healthy_step_ms, parser, run_profiled, setup, size_extra,
                                             write_truth)

D, LAYERS, BATCH, LO, HI = 64, 4, 8, 48, 96
CHUNK = 2_000  # characters tokenized per unit of the data straggler's work
DEFAULTS = {"data": 0.10, "compute": 0.15, "input": 1.5}


class PyTokenizer:
    """Greedy longest-match subword tokenizer in pure Python (the slow path a rank's dataset takes)."""

    def __init__(self, seed: int = 0) -> None:
        rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        pieces = {a + b for a in letters for b in letters} | set(letters)
        pieces |= {"".join(rng.choice(letters) for _ in range(rng.randint(3, 5))) for _ in range(3000)}
        self.vocab = {p: i for i, p in enumerate(sorted(pieces))}
        self.text = " ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(40_000))

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in text.split():
            i = 0
            while i < len(word):
                for n in (5, 4, 3, 2, 1):
                    tok = self.vocab.get(word[i:i + n])
                    if tok is not None:
                        ids.append(tok)
                        i += n
                        break
                else:
                    i += 1
        return ids

    def chunk(self, k: int) -> str:
        start = (k * CHUNK) % (len(self.text) - CHUNK)
        return self.text[start:start + CHUNK]


class Tokenizing(Dataset):
    """``TokenBatches`` whose first row is rebuilt from ``chunks`` chunks of text tokenized in Python."""

    def __init__(self, base: TokenBatches, tok: PyTokenizer) -> None:
        self.base, self.tok, self.chunks, self.spent_ms, self.spent_cpu = base, tok, 0, 0.0, 0.0

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.base[i]
        if self.chunks:
            t, c = time.perf_counter(), time.thread_time()
            ids: list[int] = []
            for k in range(self.chunks):
                ids += self.tok.encode(self.tok.chunk(i * self.chunks + k))
            row = torch.tensor(ids[: x.shape[1] + 1], dtype=torch.long) % (VOCAB - 1) + 1
            x[0, : row.numel() - 1], y[0, : row.numel() - 1] = row[:-1], row[1:]
            self.spent_ms += (time.perf_counter() - t) * 1e3
            self.spent_cpu += (time.thread_time() - c) * 1e3
        return x, y


class LM(TinyLM):
    """TinyLM with optional extra matmuls on the embedding output (the compute straggler)."""

    mix: torch.Tensor

    def __init__(self) -> None:
        super().__init__(d=D, layers=LAYERS)
        self.register_buffer("mix", torch.randn(D, D) / D**0.5)
        self.extra, self.spent_ms, self.spent_cpu = 0, 0.0, 0.0

    def extra_work(self, h: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            h = h + 1e-6 * torch.tanh(h @ self.mix)
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        if self.extra:
            t, c = time.perf_counter(), time.thread_time()
            h = self.extra_work(h, self.extra)
            self.spent_ms += (time.perf_counter() - t) * 1e3
            self.spent_cpu += (time.thread_time() - c) * 1e3
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.head(self.body(h, mask=mask, is_causal=True))


def build(rank: int, args: argparse.Namespace) -> tuple[LM, Tokenizing]:
    slow = rank == args.slow_rank and args.straggler != "none"
    scale = args.amount if slow and args.straggler == "input" else 1.0
    batches = TokenBatches(args.calib + args.tune + args.steps + 4, BATCH, LO, HI, scale, args.seed * 1000 + rank)
    data = Tokenizing(batches, PyTokenizer(args.seed))
    model = LM()
    for layer in model.body.layers:
        fully_shard(layer)
    fully_shard(model)
    return model, data


def inject(args: argparse.Namespace, slow: bool, step: Callable[[int, Timers], None], model: LM, data: Tokenizing,
           step_ms: float) -> None:
    """Size the data or compute straggler's work to ``args.amount`` of the healthy step (``size_extra``)."""
    probe = torch.randn(BATCH, (LO + HI) // 2, D)
    unit, apply = {"data": (lambda: data.tok.encode(data.tok.chunk(0)), lambda n: setattr(data, "chunks", n)),
                   "compute": (lambda: model.extra_work(probe, 1), lambda n: setattr(model, "extra", n))
                   }.get(args.straggler, (lambda: None, lambda n: None))
    size_extra(step, args.tune, slow and args.straggler in ("data", "compute"), unit, apply, args.amount * step_ms)


def main(argv: list[str] | None = None) -> None:
    args = parser(__doc__, list(DEFAULTS), "data/compute: share of the healthy step; input: length factor"
                  ).parse_args(argv)
    if args.amount is None:
        args.amount = DEFAULTS.get(args.straggler, 0.0)
    rank, world = setup(args)
    # the LM head's output is a view (never changed in place): FSDP2 warns on every forward
    warnings.filterwarnings("ignore", message=".*returned a view tensor")
    model, data = build(rank, args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    it = iter(DataLoader(data, batch_size=None, shuffle=False))
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)

    def step(i: int, t: Timers) -> None:
        with t.time("data"):
            x, y = next(it)
        with t.time("work"):
            loss_fn(model(x).flatten(0, 1), y.flatten()).backward()
        with t.time("opt"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        t.add("extra", data.spent_ms + model.spent_ms)
        t.add("extra_cpu", data.spent_cpu + model.spent_cpu)
        data.spent_ms = model.spent_ms = data.spent_cpu = model.spent_cpu = 0.0

    step_ms = healthy_step_ms(step, args.calib)
    inject(args, rank == args.slow_rank, step, model, data, step_ms)
    meta: dict[str, Any] = {"job": "fsdp", "straggler": args.straggler, "slow_rank": args.slow_rank,
                            "amount": args.amount}
    timers = run_profiled(args, rank, step, layout={"dp": world}, metadata=meta)
    write_truth(args, rank, world, timers, {
        "job": "fsdp", "straggler": None if args.straggler == "none" else args.straggler,
        "slow_rank": None if args.straggler == "none" else args.slow_rank, "amount": args.amount,
        "healthy_step_ms": round(step_ms, 3), "layout": {"dp": world}},
        mine={"text_chunks": data.chunks, "extra_matmuls": model.extra})
    finish()


if __name__ == "__main__":
    main()
