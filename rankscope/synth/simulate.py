"""True-clock timing of every op on every rank, physically consistent across ranks.

Model (all times int64 ns on the true clock, so that the two passes below agree exactly):

* Host: ops run back to back on one CPU cursor; each launches its device work at 55 % of
  its span. The host blocks only in ``loss.item()`` at the end of a step.
* Compute stream: kernel ``i`` starts at ``max(previous end, launch_i + 4 us, deps)``. Between
  two collectives this max-plus recurrence has the closed form
  ``start = C + cummax(lower - C)`` with ``C`` the exclusive cumulative sum of durations,
  so a segment is a handful of numpy calls over ``[ops, ranks]``.
* A collective starts on a rank when its stream, its launch and its input are ready
  (the *arrival*). Its transfer starts when the last member arrives and ends at the same
  true time on every member (+ <= 2 us jitter): early ranks wait inside the NCCL kernel.
  tp and world collectives block the compute stream; dp gradient buckets overlap it.

Pass 1 simulates all ranks together and resolves each collective across its group.
Pass 2 re-runs the same code for one rank, reading the collective ends from pass 1, and
keeps every op's times for the trace writer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from rankscope.synth.config import StragglerKind, SynthConfig
from rankscope.synth.program import COLL, COMPUTE, DATA, MEMCPY, MEMSET, SYNC, Coll, Program

LAUNCH_FRAC, LAUNCH_LAT = 0.55, 4_000
DTYPE_BYTES = {"Float": 4, "BFloat16": 2, "Long": 8}
# slot of each collective group kind: with tp == 1 the dp buckets run on the world group
Resolver = Callable[[int, int, np.ndarray], "tuple[np.ndarray, np.ndarray]"]


@dataclass
class StepTimes:
    """One step on a set of ranks; arrays are ``[ops, ranks]`` int64 ns (true clock)."""

    t: np.ndarray  # host start
    cpu: np.ndarray  # host duration
    ks: np.ndarray  # device start (kernel / memcpy / NCCL kernel), 0 when none
    kd: np.ndarray  # device duration, 0 when none
    xfer_start: np.ndarray  # collectives only: when the last member arrived


@dataclass
class SimResult:
    """What a pass returns: per-collective arrivals/ends and per-step summaries."""

    arrivals: np.ndarray  # [steps, ncoll, ranks]
    starts: np.ndarray  # [steps, ncoll, ranks] transfer start (last arrival)
    ends: np.ndarray  # [steps, ncoll, ranks]
    step_start: np.ndarray  # [steps, ranks]
    step_end: np.ndarray  # [steps, ranks]
    compute_ns: np.ndarray  # [steps, ranks] device busy time outside collectives
    comm_ns: np.ndarray  # [steps, ranks] time inside NCCL kernels
    wait_ns: np.ndarray  # [steps, ranks] part of comm_ns spent waiting for other ranks
    host_ns: np.ndarray  # [steps, ranks] host busy time (sum of op spans)
    steps: list[StepTimes] = field(default_factory=list)

    @classmethod
    def zeros(cls, steps: int, ncoll: int, nranks: int) -> SimResult:
        """All-zero int64 arrays: ``[steps, ncoll, nranks]`` per collective, ``[steps, nranks]`` per step."""
        def c() -> np.ndarray:
            return np.zeros((steps, ncoll, nranks), np.int64)

        def s() -> np.ndarray:
            return np.zeros((steps, nranks), np.int64)

        return cls(arrivals=c(), starts=c(), ends=c(), step_start=s(), step_end=s(), compute_ns=s(),
                   comm_ns=s(), wait_ns=s(), host_ns=s())


def slot(cfg: SynthConfig, group: str) -> str:
    """Stream / sequence slot of a group kind (dp shares the world group when tp == 1)."""
    return "world" if group == "dp" and cfg.tp_size == 1 else group


def straggle(cfg: SynthConfig, rank: int, kind: StragglerKind) -> float:
    """Product of the slowdown factors of ``kind`` injected on ``rank``."""
    f = 1.0
    for s in cfg.stragglers:
        if s.rank == rank and s.kind == kind:
            f *= s.factor
    return f


def draw(cfg: SynthConfig, prog: Program, rank: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Host and device durations (ns) of every op of ``step`` on ``rank``; deterministic."""
    rng = np.random.default_rng([cfg.seed, rank, step])
    n = prog.n
    cpu = prog.cpu_us * 1000 * rng.lognormal(0.0, 0.12, n) * straggle(cfg, rank, StragglerKind.HOST)
    is_data = prog.kind == DATA
    data_f = straggle(cfg, rank, StragglerKind.DATA) / straggle(cfg, rank, StragglerKind.HOST)
    cpu = np.where(is_data, cpu * rng.lognormal(0.0, 0.15) * data_f, cpu) + rng.integers(1_500, 9_000, n)
    dev_f = np.where(np.isin(prog.kind, (COMPUTE, MEMCPY, MEMSET)), straggle(cfg, rank, StragglerKind.COMPUTE), 1)
    gpu = prog.gpu_us * 1000 * rng.lognormal(0.0, 0.04, n) * dev_f
    return np.rint(cpu).astype(np.int64), np.rint(gpu).astype(np.int64)


def _stream(lower: np.ndarray, dur: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Start times of ops queued on one stream: ``s_i = max(s_{i-1} + d_{i-1}, lower_i)``."""
    lower = lower.copy()
    lower[0] = np.maximum(lower[0], free)
    c = np.cumsum(dur, axis=0) - dur
    return c + np.maximum.accumulate(lower - c, axis=0)


def simulate(cfg: SynthConfig, prog: Program, ranks: list[int], resolve: Resolver, keep: bool) -> SimResult:
    """Run all steps for ``ranks``; ``resolve(step, k, arrivals)`` gives (xfer start, end)."""
    n_r, coll_idx = len(ranks), prog.coll_index()
    res = SimResult.zeros(cfg.steps, len(coll_idx), n_r)
    # ranks enter the first profiled step a little apart (true clock 0 = run start)
    h = np.array([np.random.default_rng([cfg.seed, r, 1 << 20]).integers(0, 300_000) for r in ranks], np.int64)
    g = np.zeros(n_r, np.int64)
    free = {k: np.zeros(n_r, np.int64) for k in ("tp", "dp", "world")}
    for s in range(cfg.steps):
        durs = [draw(cfg, prog, r, s) for r in ranks]
        cpu = np.stack([d[0] for d in durs], axis=1)
        gpu = np.stack([d[1] for d in durs], axis=1)
        t = h + np.cumsum(cpu, axis=0) - cpu
        launch = t + (cpu * LAUNCH_FRAC).astype(np.int64) + LAUNCH_LAT
        ks, kd, xs = np.zeros_like(t), gpu.copy(), np.zeros_like(t)
        g = _run_segments(cfg, prog, s, t, launch, ks, kd, xs, g, free, resolve, res)
        sync = prog.n - 1  # loss.item(): the host waits for the DtoH copy
        done = ks[sync] + kd[sync] + 3_000
        cpu[sync] = np.maximum(cpu[sync], done - t[sync])
        h = t[sync] + cpu[sync] + 2_000
        _summarize(prog, s, t, cpu, ks, kd, xs, h, res)
        if keep:
            res.steps.append(StepTimes(t, cpu, ks, kd, xs))
    return res


def _run_segments(cfg: SynthConfig, prog: Program, s: int, t: np.ndarray, launch: np.ndarray, ks: np.ndarray,
                  kd: np.ndarray, xs: np.ndarray, g: np.ndarray, free: dict[str, np.ndarray],
                  resolve: Resolver, res: SimResult) -> np.ndarray:
    """Walk the step segment by segment (collectives split it); fills ks/kd/xs in place."""
    dev = (prog.kind != DATA) & (prog.kind != COLL)
    lo = 0
    for k, ci in enumerate(list(prog.coll_index()) + [prog.n]):
        seg = np.arange(lo, ci)[dev[lo:ci]]
        if len(seg):
            lower = launch[seg].copy()
            waits = prog.waits_dp[seg]
            if waits.any():
                lower[waits] = np.maximum(lower[waits], free[slot(cfg, "dp")])
            ks[seg] = _stream(lower, kd[seg], g)
            g = ks[seg[-1]] + kd[seg[-1]]
        if ci == prog.n:
            break
        c: Coll = prog.ref[ci]
        sl = slot(cfg, c.group)
        arrival = np.maximum(np.maximum(free[sl], launch[ci]), g)
        start, end = resolve(s, k, arrival)
        res.arrivals[s, k], res.starts[s, k], res.ends[s, k] = arrival, start, end
        ks[ci], kd[ci], xs[ci] = arrival, end - arrival, start
        free[sl] = end
        if c.blocking:
            g = np.maximum(g, end)
        lo = ci + 1
    return g


def _summarize(prog: Program, s: int, t: np.ndarray, cpu: np.ndarray, ks: np.ndarray, kd: np.ndarray,
               xs: np.ndarray, h_next: np.ndarray, res: SimResult) -> None:
    is_coll = prog.kind == COLL
    res.step_start[s], res.step_end[s] = t[0], h_next
    res.compute_ns[s] = kd[~is_coll].sum(axis=0)
    res.comm_ns[s] = kd[is_coll].sum(axis=0)
    res.wait_ns[s] = (xs[is_coll] - ks[is_coll]).sum(axis=0)
    res.host_ns[s] = cpu[prog.kind != SYNC].sum(axis=0)
