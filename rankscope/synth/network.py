"""Collective transfer times and the cross-rank resolution of pass 1.

Transfer time of a collective on a group of ``n`` ranks moving ``B`` bytes:
``alpha * 2 * ceil(log2 n) + k * B / bw`` with ``k = 2 (n-1)/n`` for all-reduce (ring) and
``1`` for broadcast; ``bw`` is NVLink-like (150 GB/s) inside one host and network-like
(25 GB/s) across hosts. Slow links and comm stragglers multiply it per group.
"""
from __future__ import annotations

import math

import numpy as np

from rankscope.synth.config import ProcessGroup, StragglerKind, SynthConfig
from rankscope.synth.program import Coll, Program
from rankscope.synth.simulate import DTYPE_BYTES, slot

BW_INTRA, BW_INTER = 150e9, 25e9
ALPHA_INTRA, ALPHA_INTER = 3_000, 9_000
END_JITTER_NS = 2_000


def group_factor(cfg: SynthConfig, group: ProcessGroup) -> float:
    """Product of every injected slowdown that applies to transfers on ``group``."""
    f = 1.0
    for link in cfg.slow_links:
        if link.group == group.name or (link.pair and set(link.pair) <= set(group.ranks)):
            f *= link.factor
    for s in cfg.stragglers:
        if s.kind == StragglerKind.COMM and s.rank in group.ranks:
            f *= s.factor
    return f


def xfer_ns(cfg: SynthConfig, c: Coll, group: ProcessGroup) -> float:
    """Un-slowed transfer time of ``c`` on ``group`` in ns."""
    n = len(group.ranks)
    if n <= 1:
        return 1_000.0
    intra = len({r // cfg.gpus_per_host for r in group.ranks}) == 1
    alpha, bw = (ALPHA_INTRA, BW_INTRA) if intra else (ALPHA_INTER, BW_INTER)
    k = 2 * (n - 1) / n if c.op == "allreduce" else 1.0
    return alpha * 2 * math.ceil(math.log2(n)) + k * c.nelems * DTYPE_BYTES[c.dtype] / bw * 1e9


class Network:
    """Resolves collectives across all ranks (pass 1): one call per collective."""

    def __init__(self, cfg: SynthConfig, prog: Program) -> None:
        self.cfg, self.prog = cfg, prog
        self.tp, self.dp = cfg.tp_size, cfg.dp_size
        self.colls: list[Coll] = [prog.ref[i] for i in prog.coll_index()]
        # per collective: transfer time of the group each rank belongs to, [ranks] int64
        kinds = {c.group for c in self.colls}
        per_kind = {k: [cfg.groups_of(r)[self._group_key(k)] for r in range(cfg.ranks)] for k in kinds}
        self.xfer = [
            np.array([round(xfer_ns(cfg, c, g) * group_factor(cfg, g)) for g in per_kind[c.group]], np.int64)
            for c in self.colls
        ]

    def _group_key(self, kind: str) -> str:
        return slot(self.cfg, kind)

    def last_arrival(self, kind: str, arrival: np.ndarray) -> np.ndarray:
        """Per rank, the latest arrival in its group of ``kind`` (ranks are r = d * tp + t)."""
        sl = slot(self.cfg, kind)
        if sl == "world":
            return np.full_like(arrival, arrival.max())
        grid = arrival.reshape(self.dp, self.tp)
        if sl == "tp":
            return np.repeat(grid.max(axis=1), self.tp)
        return np.tile(grid.max(axis=0), self.dp)

    def resolve(self, step: int, k: int, arrival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Transfer start and end of collective ``k`` of ``step`` for every rank."""
        start = self.last_arrival(self.colls[k].group, arrival)
        jitter = np.random.default_rng([self.cfg.seed, 7, step, k]).integers(0, END_JITTER_NS, len(arrival))
        return start, start + self.xfer[k] + jitter


class Replay:
    """Pass-2 resolver for one rank: returns the ends pass 1 computed."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts, self.ends = starts, ends  # [steps, ncoll]

    def resolve(self, step: int, k: int, arrival: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Transfer start and end recorded in pass 1 for this rank."""
        return self.starts[step, k : k + 1], self.ends[step, k : k + 1]
