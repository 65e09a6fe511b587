"""Shared parts of the workload jobs: arguments, sizing of the injected work, per-step timers, the truth file.

Pattern: a job runs ``--calib`` unprofiled steps and takes its healthy step time (median of the steps after
the first, the slowest rank's); the slow rank sizes its extra work from it (``units_for``: units of real work
timed on that rank), then the job runs under ``rankscope.profile`` (one profiler warm-up step, ``--steps``
recorded, one more) with one :class:`Timers` row per step: the step's wall time between ``prof.step()`` calls
and the named parts the job timed (``extra``: the injected work; ``work``: the work an imbalance grows).
After the profile, rank 0 gathers every rank's rows and writes ``RUN/truth.json`` (:func:`write_truth`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

from rankscope.demo.train import intra_op_threads, rotate, rotation_cpus

# The cause label (rankscope.analysis.diagnosis.straggler's kinds) a verdict should give for each straggler kind.
CAUSES = {"data": "data", "compute": "compute", "input": "imbalance", "skew": "imbalance", "host": "host",
          "stage": "compute", "lm": "imbalance", "decode": "data"}
# The timer part holding each kind's extra time (``summarize``): the injected work itself (its wall time), or
# the work an imbalance grows, as CPU time (the slow rank's part minus the other ranks' median). CPU time,
# because the wall time of that part also holds waits that are not the work: FSDP's forward + backward holds
# the waits for the other ranks (alike on every rank), and on a loaded host any part holds run-queue waits
# (measured: a MoE rank with 2.1x the expert tokens had 1.7x the experts' CPU time and less wall time).
# rankscope.demo.lm (DDP): "lm" grows the forward + backward + optimizer step ("work"), "decode" the batch's
# loading in the training thread ("data", DataLoader without workers). FSDP2's "compute" is read the same way:
# its timer ("extra") sees the extra matmuls' forward only, not their backward (measured, bench/workloads.py seed
# 2751, 2 ranks: "extra" 9.3 ms against 15.1 ms of forward + backward CPU time over the other rank's).
EXTRA_PART = {"data": "extra", "compute": "work_cpu", "host": "extra", "input": "work_cpu", "skew": "work_cpu",
              "stage": "work_cpu", "lm": "work_cpu", "decode": "data_cpu"}


def parser(doc: str | None, stragglers: list[str], amount_help: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--straggler", choices=[*stragglers, "none"], default="none")
    p.add_argument("--slow-rank", type=int, default=-1, help="the rank (or stage) made slow; -1: none")
    p.add_argument("--amount", type=float, default=None, help=amount_help)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=6, help="profiled (recorded) steps")
    p.add_argument("--calib", type=int, default=3, help="unprofiled steps before, to take the healthy step time")
    p.add_argument("--tune", type=int, default=2, help="unprofiled steps after, to size the injected work")
    p.add_argument("--rotate-cpus", action="store_true", help="each step, move this rank to CPU (rank + step) mod n")
    return p


class Timers:
    """perf_counter timers of one rank: ``rows`` holds one dict per step (milliseconds); ``time(part)`` also
    records ``<part>_cpu``, the training thread's CPU time (``time.thread_time``: waits for peers excluded)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.cur: dict[str, float] = {}

    @contextlib.contextmanager
    def time(self, part: str) -> Iterator[None]:
        t, c = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.add(part, (time.perf_counter() - t) * 1e3)
            self.add(part + "_cpu", (time.thread_time() - c) * 1e3)

    def add(self, part: str, ms: float) -> None:
        self.cur[part] = self.cur.get(part, 0.0) + ms

    def close(self, step: int, captured: bool, wall_ms: float, cpu_ms: float) -> None:
        self.rows.append({"step": step, "captured": captured, "step_ms": round(wall_ms, 3),
                          "step_cpu": round(cpu_ms, 3), **{k: round(v, 3) for k, v in self.cur.items()}})
        self.cur = {}


def setup(args: argparse.Namespace) -> tuple[int, int]:
    """Process group (gloo), one intra-op thread (``train.intra_op_threads``), the seed; returns (rank, world)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    dist.init_process_group("gloo")
    torch.set_num_threads(intra_op_threads())
    torch.manual_seed(args.seed)
    return dist.get_rank(), dist.get_world_size()


def healthy_step_ms(step: Callable[[int, Timers], None], n: int) -> float:
    """Run ``n`` unprofiled steps; the median wall time of all but the first, the slowest rank's."""
    t, times = Timers(), []
    for i in range(max(n, 2)):
        t0 = time.perf_counter()
        step(i, t)
        times.append(time.perf_counter() - t0)
    med = torch.tensor([statistics.median(times[1:]) * 1e3], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    return float(med.item())


def units_for(unit: Callable[[], object], target_ms: float, limit: int = 100_000) -> int:
    """How many calls of ``unit`` (real work) take ``target_ms`` on this rank (median of 5 timings)."""
    unit()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        unit()
        times.append((time.perf_counter() - t) * 1e3)
    return max(1, min(limit, round(target_ms / max(statistics.median(times), 1e-6))))


def size_extra(step: Callable[[int, Timers], None], n: int, slow: bool, unit: Callable[[], object],
               apply: Callable[[int], None], target_ms: float) -> int:
    """Units of extra work that take ``target_ms`` of the slow rank's CPU per step, within the job's own steps.

    A unit timed alone runs faster than inside a step (caches, the other ranks' threads); so after a first guess
    (``units_for``), ``n`` unprofiled steps (every rank runs them) rescale it by target / the ``extra`` part's
    CPU time (``extra_cpu``; its wall time where a job times none). Not by its wall time: with 4 ranks on 2
    cores a tuning step that preempts the loop halves it. Measured (bench/workloads.py seed 2702, tp_fsdp at 4
    ranks, wall-time sizing): loops meant as 20.1 and 22.8 ms ran 12.4 and 9.2 ms of CPU in the recorded steps,
    others 18-26 ms. Returns the units (0 on the other ranks)."""
    units = units_for(unit, target_ms) if slow else 0
    for i in range(n):
        apply(units)
        t = Timers()
        step(i, t)
        got = t.cur.get("extra_cpu", t.cur.get("extra", 0.0))
        if slow and got > 0:
            units = max(1, round(units * target_ms / got))
    apply(units)
    return units


def run_profiled(args: argparse.Namespace, rank: int, step: Callable[[int, Timers], None], *,
                 layout: dict[str, int] | None, metadata: dict[str, Any]) -> Timers:
    """The profiled loop: one warm-up step, ``args.steps`` recorded (ProfilerStep#1..#steps), one more."""
    import rankscope

    timers, cpus = Timers(), rotation_cpus(args.rotate_cpus)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=args.steps, repeat=1)
    with rankscope.profile(run=args.run_dir, run_id=Path(args.run_dir).name, schedule=sched, layout=layout,
                           metadata={"workload": metadata}) as prof:
        for i in range(args.steps + 2):
            rotate(cpus, rank, i)
            t0, c0 = time.perf_counter(), time.thread_time()  # ProfilerStep#i: from one prof.step() to the next
            step(i, timers)
            timers.close(i, 1 <= i <= args.steps, (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3)
            prof.step()  # the trace is written inside the last recorded step's call: not step time
    return timers


def _median(rows: list[dict[str, Any]], key: str) -> float:
    vals = [r.get(key, 0.0) for r in rows if r["captured"]]
    return round(statistics.median(vals), 3) if vals else 0.0


def summarize(timers: dict[int, list[dict[str, Any]]], kind: str | None, slow: int | None) -> dict[str, Any]:
    """Per rank, medians over the recorded steps; the slow rank's extra time per step (``EXTRA_PART``), and
    the same part's wall and CPU measures (``extra_wall_ms_per_step``, ``extra_cpu_ms_per_step``)."""
    parts = sorted({k for rows in timers.values() for r in rows for k in r if k not in ("step", "captured")})
    med = {p: {r: _median(rows, p) for r, rows in timers.items()} for p in parts}
    out: dict[str, Any] = {"median_ms": med}
    if kind and slow is not None and slow in timers:
        part = EXTRA_PART[kind]
        base = part.removesuffix("_cpu")
        own = base == "extra"
        out["extra_from"] = part
        out["extra_ms_per_step"] = _excess(med.get(part, {}), slow, own)
        out["extra_wall_ms_per_step"] = _excess(med.get(base, {}), slow, own)
        out["extra_cpu_ms_per_step"] = _excess(med[base + "_cpu"], slow, own) if base + "_cpu" in med else None
        step = med["step_ms"][slow]
        extra = out["extra_ms_per_step"]
        out["extra_share_of_step"] = round(extra / step, 4) if extra and step else None
    return out


def _excess(by_rank: dict[int, float], slow: int, own: bool) -> float | None:
    """The slow rank's value (``own``: injected work) or its excess over the other ranks' median."""
    mine = by_rank.get(slow, 0.0)
    others = [v for r, v in by_rank.items() if r != slow]
    if own:
        return mine
    return round(mine - statistics.median(others), 3) if others else None


def write_truth(args: argparse.Namespace, rank: int, world: int, timers: Timers, truth: dict[str, Any],
                mine: dict[str, Any] | None = None, captured: list[int] | None = None) -> None:
    """Gather every rank's timer rows (and ``mine``: what this rank alone knows, e.g. the units of work it
    sized) on rank 0 and write ``RUN/truth.json`` (atomic rename). ``captured``: the recorded steps' numbers
    (default 1..``args.steps``, as :func:`run_profiled` records them).

    ``truth`` holds what the job knows of itself: ``job``, ``straggler`` (kind or None), ``slow_rank``, and
    anything job-specific (``amount``, ``layout``, ``pipeline``...); ``cause`` and the timers are added here."""
    got = _gather_on_rank0(rank, world, [timers.rows, mine or {}])
    if rank != 0:
        return
    kind = truth.get("straggler")
    slow = truth.get("slow_rank")
    per_rank = {r: got[r][0] for r in range(world)}
    doc = {**truth, "world": world, "seed": args.seed, "cause": CAUSES.get(kind) if kind else None,
           "captured_steps": captured or list(range(1, args.steps + 1)), "summary": summarize(per_rank, kind, slow),
           "ranks": {str(r): got[r][1] for r in range(world)}, "timers": {str(r): v for r, v in per_rank.items()}}
    path = Path(args.run_dir) / "truth.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)


def _gather_on_rank0(rank: int, world: int, mine: Any) -> list[Any]:
    """Every rank's ``mine`` (JSON) on rank 0, through the default group's store; [] on the other ranks.

    Not ``all_gather_object``: its tensors are Python's, and gloo's worker thread drops the finished Work
    (the barrier after it holds it too) on its own time, needing the GIL. Where a process group was then freed
    by Python (the DDP model at ``main``'s end: ``~Reducer`` -> ``~ProcessGroupGloo`` joins that thread, the
    GIL held), the job hung for good (seen under load: the live e2e's healthy twin, 1 run in 1, stacks in
    both threads). The store holds bytes only."""
    store = dist.distributed_c10d._get_default_store()
    key = "rankscope-demo/truth/{}"
    if rank != 0:
        store.set(key.format(rank), json.dumps(mine))
        return []
    return [json.loads(json.dumps(mine))] + [json.loads(store.get(key.format(r))) for r in range(1, world)]


def finish() -> None:
    """End the job: ``destroy_process_group``, and where the group outlives it, leave without finalizing Python.

    FSDP2's state (torch 2.13) keeps its mesh's process groups after ``destroy_process_group``, so gloo's
    worker threads are never joined; one of them dropping its last Work while Python finalizes aborts the
    process ("terminate called without an active exception"). The other jobs free their group (rankscope.profile
    releases what torch.profiler pinned: rankscope.collect.worldref) and end as usual. rankscope.profile has
    stopped by now (uploads waited for, its exit hooks unregistered): skipping finalization loses nothing."""
    import gc
    import sys

    dist.destroy_process_group()
    gc.collect()
    if not gloo_threads_alive():
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def gloo_threads_alive() -> bool:
    """Whether a gloo worker thread (``pt_gloo_runloop``, ProcessGroupGloo.cpp's name) runs in this process."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:  # not Linux: the job ends as usual
        return False
    for t in tasks:
        with contextlib.suppress(OSError), open(f"/proc/self/task/{t}/comm") as f:
            if f.read().strip() == "pt_gloo_runloop":
                return True
    return False


def busy_unit(n: int = 2000) -> int:
    """One unit of Python-only work (the host-side straggler's loop body)."""
    x = 0
    for i in range(n):
        x = (x * 31 + i) % 1_000_003
    return x


class _Mark(torch.autograd.Function):
    """Identity whose backward tells ``clock`` that the gradient passed ``edge``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, clock: Timed, edge: str) -> torch.Tensor:  # type: ignore[override]
        ctx.clock, ctx.edge = clock, edge
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        ctx.clock.mark(ctx.edge)
        return grad, None, None


class Timed(torch.nn.Module):
    """Runs ``inner``; ``wall_ms`` / ``cpu_ms`` add up its forward and backward time (read and reset by the
    step). The backward is timed between two identity marks around ``inner`` (its input must need a grad),
    on the thread that runs the backward (the caller's, on CPU)."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.wall_ms = self.cpu_ms = 0.0
        self._t: tuple[float, float] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.mark("start")
        y = _Mark.apply(self.inner(_Mark.apply(x, self, "end")), self, "start")
        self.mark("end")
        return y

    def mark(self, edge: str) -> None:
        now = (time.perf_counter(), time.thread_time())
        if edge == "start":
            self._t = now
        elif self._t is not None:
            self.wall_ms += (now[0] - self._t[0]) * 1e3
            self.cpu_ms += (now[1] - self._t[1]) * 1e3
            self._t = None

    def take(self, t: Timers, part: str = "work") -> None:
        """Add the time spent since the last call to ``t`` as ``part`` and ``<part>_cpu``."""
        t.add(part, self.wall_ms)
        t.add(part + "_cpu", self.cpu_ms)
        self.wall_ms = self.cpu_ms = 0.0
