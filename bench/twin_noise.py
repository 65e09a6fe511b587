"""How often do two identical processes differ like a straggler on this machine? (issue 12)

The healthy twins of ``bench/workloads.py`` give every rank the same work, yet in runs 6-8 about one
healthy 2-rank decode run in ten was named ("likely straggler", once "rank 0 is slow": +7-13 % own time
in 8 of 8 steps). This measures the base rate of such differences with no rankscope, no profiler and no
torch.distributed: pairs of plain processes doing the decode family's exact per-step work
(``rankscope.demo.lm.Encoded``, 64 samples per step), CPUs rotated every step as ``--cpus rotate`` does,
steps kept in lockstep by a barrier (as the all-reduce does in the real job). Per pair, the slower
process's median step time over the other's, and in how many steps it was the slower one, classed by
the straggler rules' 2-rank bars (``rankscope.analysis.diagnosis.likely`` and ``straggler.agreeing``):

- "likely": median +5 % or more and the slower one in >= 60 % of the steps;
- "verdict": median +10 % or more and the slower one in >= 75 % of the steps.

    .venv/bin/python bench/twin_noise.py --pairs 40
    .venv/bin/python bench/twin_noise.py --pairs 20 --profiled decode   # the real healthy job, profiled

``--profiled lm|decode``: the same statistic from real healthy 2-rank jobs of ``bench/workloads.py`` (torchrun,
gloo, DDP, ``rankscope.profile``'s defaults, CPUs rotated), read from rankscope's own per-rank own times,
with rankscope's verdict beside it.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def worker(rank: int, seed: int, steps: int, warmup: int, barrier: object, out: object) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    from torch.utils.data import DataLoader

    from rankscope.demo.lm import Encoded
    from rankscope.demo.train import rotate, rotation_cpus

    torch.set_num_threads(1)
    it = iter(DataLoader(Encoded(64 * (steps + warmup + 1), 40_000, 256, seed * 1000 + rank), batch_size=64))
    cpus = rotation_cpus(True)
    times = []
    for i in range(warmup + steps):
        rotate(cpus, rank, i)
        barrier.wait()  # type: ignore[attr-defined]
        t = time.perf_counter()
        next(it)
        times.append(time.perf_counter() - t)
    out.put((rank, times[warmup:]))  # type: ignore[attr-defined]


def pair(seed: int, steps: int, warmup: int) -> tuple[float, int]:
    """(slower's median / other's median - 1, steps in which the slower one was slower)."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, seed, steps, warmup, barrier, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join()
    a, b = got[0], got[1]
    slow, fast = (a, b) if statistics.median(a) >= statistics.median(b) else (b, a)
    return statistics.median(slow) / statistics.median(fast) - 1, sum(s > f for s, f in zip(slow, fast))


def profiled(family: str, seed: int, steps: int, out: Path) -> tuple[float, int, str]:
    """The real healthy 2-rank job: (slower's median own time / other's - 1, steps it was slower, verdict)."""
    import shutil

    import polars as pl

    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run
    from workloads import job  # bench/workloads.py

    d = out / f"{family}-{seed}"
    shutil.rmtree(d, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    job(d, family, 2, -1, 1.0, seed, steps, rotate=True)
    res = run_all(load_run(d, jobs=2), names=["breakdown", "clock", "links", "straggler"])
    st = res["straggler"]
    bd = pl.from_arrow(res["breakdown"].tables["breakdown"]).with_columns(own=pl.col("wall") - pl.col("comm_exposed"))
    p = bd.pivot(on="rank", index="step", values="own").drop_nulls()
    a, b = p["0"].to_list(), p["1"].to_list()
    slow, fast = (a, b) if statistics.median(a) >= statistics.median(b) else (b, a)
    shutil.rmtree(d, ignore_errors=True)
    return (statistics.median(slow) / statistics.median(fast) - 1, sum(s > f for s, f in zip(slow, fast)),
            str(st.summary.get("verdict", st.skipped or "")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--profiled", choices=["lm", "decode"], help="real profiled healthy jobs of this family")
    ap.add_argument("--out", default="/tmp/rankscope-bench-twins")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    load = [os.getloadavg()[0]]
    likely = verdict = 0
    rels = []
    for k in range(args.pairs):
        said = ""
        if args.profiled:
            rel, n, said = profiled(args.profiled, args.seed + k, args.steps, Path(args.out))
            said = f"  [{said[:90]}]"
        else:
            rel, n = pair(args.seed + k, args.steps, args.warmup)
        rels.append(rel)
        lk = rel >= 0.05 and n >= 0.6 * args.steps
        vd = rel >= 0.10 and n >= 0.75 * args.steps
        likely, verdict = likely + lk, verdict + vd
        print(f"pair {k:3d} seed {args.seed + k}: slower +{rel:6.1%} in {n} of {args.steps} steps"
              f"{'  <- verdict bar' if vd else '  <- likely bar' if lk else ''}{said}", flush=True)
    load.append(os.getloadavg()[0])
    what = f"healthy profiled 2-rank {args.profiled} jobs" if args.profiled else "pairs of identical processes"
    print(f"\n{args.pairs} {what}, {args.steps} steps each (seed {args.seed}; load "
          f"{load[0]:.1f} before, {load[1]:.1f} after): median difference {statistics.median(rels):.1%}, "
          f"max {max(rels):.1%}; at the 'likely' bar {likely} ({likely / args.pairs:.0%}), "
          f"at the verdict bar {verdict} ({verdict / args.pairs:.0%})")


if __name__ == "__main__":
    main()
