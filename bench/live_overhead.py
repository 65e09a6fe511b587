"""The live straggler signal (RUN/live.jsonl, rankscope.collect.comms.live): its cost and its verdicts.

    .venv/bin/python bench/live_overhead.py overhead [--pairs 3] [--steps 150]
    .venv/bin/python bench/live_overhead.py accuracy [--runs 4] [--ranks 2,4] [--seed N]

``overhead``: a 2-rank gloo DDP job whose steps take ~40 ms (a matmul loop calibrated once, the same in
every run, then the gradient all_reduce), profiled with ``rankscope.profile(on_demand=True)`` (nothing traced; the recorder on), run with
the live signal on and off (``RANKSCOPE_LIVE=0``), interleaved in pairs; per run the median step time of
rank 0 after 20 warm-up steps. Prints each pair and the median ratio, with the load average.

``accuracy``: the workloads benchmark's families (bench/workloads.py: ``rankscope.demo.lm``, lm-imbalance
F in [1.3, 1.7], decode-slow F in [1.5, 2.5], their healthy twins) with the live signal on; per run the
first step whose line names a straggler, its rank and cause (truth: the slow rank, "cpu"; healthy: none).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(run: str, steps: int, out: str, matmuls: int) -> None:
    import torch
    import torch.distributed as dist

    import rankscope

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256))
    a = torch.randn(128, 128)
    t = torch.tensor([float(matmuls)])  # calibrated once by the driver: both runs of a pair do the same work
    n = int(t.item())
    times = []
    wall0 = time.perf_counter()
    with rankscope.profile(run=run, on_demand=True, rpc=False) as prof:
        last = time.perf_counter()
        for _ in range(steps):
            for _ in range(int(t.item())):
                a @ a
            model(torch.randn(8, 256)).sum().backward()
            prof.step()
            now = time.perf_counter()
            times.append(now - last)
            last = now
        th = prof._live._thread  # the live thread's own CPU time (the kernel's count), before it stops
        live_cpu = _cpu_ns(th.native_id) if th is not None else None
        wall = time.perf_counter() - wall0
        per_step = _step_cost(prof)
    if rank == 0:
        Path(out).write_text(json.dumps({"median_ms": 1e3 * statistics.median(times[20:]), "matmuls": int(t.item()),
                                         "live": os.environ.get("RANKSCOPE_LIVE", "1") != "0",
                                         "live_cpu_ms": live_cpu / 1e6 if live_cpu is not None else None,
                                         "wall_s": wall, "step_hooks_us": per_step}))
    dist.barrier()
    dist.destroy_process_group()


def _cpu_ns(tid: int | None) -> int | None:
    """A thread's CPU time so far: /proc/self/task/<tid>/schedstat's first field (ns)."""
    try:
        return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _step_cost(prof: object) -> float:
    """µs per call of what the live signal adds to ``step()`` on the training thread (its append and the step
    mark), timed over 20,000 calls on a throwaway sidecar."""
    from rankscope.collect.comms.live import LiveSidecar
    from rankscope.collect.comms.steps import Steps

    side, marks = LiveSidecar({}), Steps()
    side._thread = object()  # type: ignore[assignment]  # as if started: step() appends
    t0 = time.perf_counter()
    for i in range(20_000):
        side.step(i, (1, 2))
        marks.mark(i + 1)
    return (time.perf_counter() - t0) / 20_000 * 1e6


def _calibrate(a: object, seconds: float) -> int:
    """Matmuls per ``seconds`` on this rank (median of 5 timings of 20)."""
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(20):
            a @ a  # type: ignore[operator]
        per.append((time.perf_counter() - t0) / 20)
    return max(1, int(seconds / statistics.median(per)))


def _torchrun(args: list[str], env: dict[str, str], log: Path) -> int:
    with open(log, "w") as fh:
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", *args],
                              stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=900).returncode


def overhead(pairs: int, steps: int) -> None:
    import torch

    torch.set_num_threads(1)
    matmuls = _calibrate(torch.randn(128, 128), 0.035)
    print(f"{matmuls} matmuls of 128x128 per step (~35 ms calibrated here)", flush=True)
    base = Path(tempfile.mkdtemp(prefix="live-overhead-"))
    rows = []
    for i in range(pairs):
        pair, duty, hooks = {}, "", ""
        for live in ((True, False) if i % 2 == 0 else (False, True)):
            env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "RANKSCOPE_LIVE": "1" if live else "0"}
            run, out = base / f"run{i}-{int(live)}", base / f"out{i}-{int(live)}.json"
            rc = _torchrun([__file__, "worker", str(run), str(steps), str(out), str(matmuls)], env,
                           base / f"log{i}-{int(live)}")
            if rc:
                print(f"pair {i} live={live}: failed, see {base}")
                continue
            got = json.loads(out.read_text())
            pair[live] = got["median_ms"]
            if live:
                duty = f"live thread {got['live_cpu_ms']:.1f} ms CPU in {got['wall_s']:.1f} s " \
                       f"({100 * got['live_cpu_ms'] / 1e3 / got['wall_s']:.3f} % of a core)" if got["live_cpu_ms"] else ""
                hooks = f"step() additions {got['step_hooks_us']:.2f} µs"
        if len(pair) == 2:
            rows.append(pair)
            print(f"pair {i}: live on {pair[True]:.2f} ms, off {pair[False]:.2f} ms, "
                  f"{100 * (pair[True] / pair[False] - 1):+.1f} %; {duty}; {hooks}  (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    if rows:
        ratio = statistics.median(r[True] / r[False] for r in rows)
        print(f"median ratio on/off: {100 * (ratio - 1):+.2f} % over {len(rows)} pairs")


def accuracy(runs: int, ranks: list[int], seed: int) -> None:
    rng = random.Random(seed)
    fams = {"lm-imbalance": ("lm", (1.3, 1.7)), "decode-slow": ("decode", (1.5, 2.5)),
            "lm-healthy": ("lm", None), "decode-healthy": ("decode", None)}
    plan = [(f, n) for n in ranks for f in fams for _ in range(runs)]
    rng.shuffle(plan)
    base = Path(tempfile.mkdtemp(prefix="live-accuracy-"))
    right: dict[tuple[str, int], list[int]] = {}
    for i, (fam, n) in enumerate(plan):
        family, span = fams[fam]
        slow = rng.randrange(n) if span else -1
        factor = round(rng.uniform(*span), 3) if span else 1.0
        run = base / f"run{i}"
        shutil.rmtree(run, ignore_errors=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        with open(base / f"log{i}", "w") as fh:
            rc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
                                 "--module", "rankscope.demo.lm", "--run-dir", str(run), "--family", family,
                                 "--slow-rank", str(slow), "--imbalance", str(factor), "--seed", str(rng.randrange(1 << 30))],
                                stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=900).returncode
        load = os.getloadavg()[0]
        lines = [json.loads(x) for x in (run / "live.jsonl").read_text().splitlines()] if rc == 0 else []
        named = [d for d in lines if d["straggler"] is not None]
        first = named[0] if named else None
        ok = (first is not None and first["straggler"] == slow and first["cause_kind"] == "cpu" and first["step"] <= 10
              if span else first is None)
        right.setdefault((fam, n), []).append(int(ok))
        what = (f"rank {first['straggler']} at step {first['step']}: {first['cause']}" if first else "nobody named")
        print(f"{fam}@{n} slow={slow} F={factor} (load {load:.1f}): {what} -> {'right' if ok else 'MISS'}"
              + ("" if rc == 0 else f" (job failed, {base}/log{i})"), flush=True)
    print("| family | ranks | runs | right (straggler: rank, cause cpu, named by step 10; healthy: nobody) |")
    print("|---|---|---|---|")
    for (fam, n), oks in sorted(right.items()):
        print(f"| {fam} | {n} | {len(oks)} | {sum(oks)} / {len(oks)} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    o = sub.add_parser("overhead")
    o.add_argument("--pairs", type=int, default=3)
    o.add_argument("--steps", type=int, default=150)
    acc = sub.add_parser("accuracy")
    acc.add_argument("--runs", type=int, default=4)
    acc.add_argument("--ranks", default="2")
    acc.add_argument("--seed", type=int, default=int(time.time()))
    w = sub.add_parser("worker")
    w.add_argument("run")
    w.add_argument("steps", type=int)
    w.add_argument("out")
    w.add_argument("matmuls", type=int)
    a = ap.parse_args()
    if a.mode == "worker":
        worker(a.run, a.steps, a.out, a.matmuls)
    elif a.mode == "overhead":
        overhead(a.pairs, a.steps)
    else:
        accuracy(a.runs, [int(x) for x in a.ranks.split(",")], a.seed)


if __name__ == "__main__":
    main()
