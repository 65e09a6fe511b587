"""Straggler verdicts on realistic workload families (issue 12), beside bench/stragglers.py's injected kinds.

Families (rankscope.demo.lm, torchrun, gloo, profiled with rankscope.profile's defaults):
- ``lm-imbalance``: a transformer LM with variable sequence lengths whose one rank (random) gets
  sequences F times longer, F uniform in [1.3, 1.7]; truth: that rank, cause "imbalance";
- ``decode-slow``: a data loader decoding compressed samples (zlib + augmentation, real work) whose
  one rank decodes F times more bytes, F uniform in [1.5, 2.5]; truth: that rank, cause "data";
- ``lm-healthy`` and ``decode-healthy``: the same jobs with every rank alike; truth: no rank named
  (a "likely straggler" counts as named).
Runs are interleaved across families, each with a fresh seed. Score per family and rank count: rank
and cause right (straggler families), runs with any rank named (healthy families).

    .venv/bin/python bench/workloads.py --ranks 2,4 --runs 20 --healthy 10 --write
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FAMILIES = {"lm-imbalance": ("lm", "imbalance", (1.3, 1.7)), "decode-slow": ("decode", "data", (1.5, 2.5)),
            "lm-healthy": ("lm", None, None), "decode-healthy": ("decode", None, None)}


def job(out: Path, family: str, ranks: int, slow_rank: int, factor: float, seed: int, steps: int,
        rotate: bool = False) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", "--module",
           "rankscope.demo.lm", "--run-dir", str(out), "--family", family, "--slow-rank", str(slow_rank),
           "--imbalance", str(factor), "--seed", str(seed), "--steps", str(steps)] + (["--rotate-cpus"] if rotate else [])
    with open(str(out) + ".log", "w") as fh:
        subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})


def verdict(path: Path) -> tuple[str, list[tuple[int, str]]]:
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    st = run_all(load_run(path, jobs=2), names=["breakdown", "clock", "links", "straggler"])["straggler"]
    return st.summary.get("verdict", st.skipped or ""), [(f.ranks[0], f.evidence.get("cause", "likely"))
                                                         for f in st.findings]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--runs", type=int, default=20, help="runs per straggler family and rank count")
    ap.add_argument("--healthy", type=int, default=10, help="runs per healthy family and rank count")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--out", default="/tmp/rankscope-bench-workloads")
    ap.add_argument("--write", action="store_true", help="append the results to bench/RESULTS.md")
    ap.add_argument("--cpus", choices=["rotate", "free"], default="free",
                    help="rotate: every rank moves to CPU (rank + step) mod n each step, so all ranks see the same mix "
                         "of this VM's vCPUs, which differ in speed for seconds at a time (as bench/stragglers.py); "
                         "free: the OS places them")
    ap.add_argument("--keep-misses", action="store_true", help="keep the run directories of misses (OUT/miss-I)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = [(fam, n) for n in map(int, args.ranks.split(",")) for fam, (_, kind, _) in FAMILIES.items()
            for _ in range(args.runs if kind else args.healthy)]
    rng.shuffle(plan)
    rows: list[dict[str, Any]] = []
    for i, (fam, n) in enumerate(plan):
        wl, kind, span = FAMILIES[fam]
        rank = rng.randrange(n) if kind else -1
        factor = round(rng.uniform(*span), 3) if span else 1.0
        d = out / f"run{i}"
        shutil.rmtree(d, ignore_errors=True)
        job(d, wl, n, rank, factor, rng.randrange(10**6), args.steps, args.cpus == "rotate")
        text, found = verdict(d)
        ok = found == [(rank, kind)] if kind else not found
        rows.append({"family": fam, "ranks": n, "rank": rank, "factor": factor, "ok": ok, "verdict": text,
                     "load1": round(os.getloadavg()[0], 1)})
        print(f"{i + 1}/{len(plan)} {fam}@{n} rank={rank} F={factor}: {'ok ' if ok else 'MISS'} {text[:110]}",
              flush=True)
        if args.keep_misses and not ok:
            shutil.rmtree(out / f"miss-{i}", ignore_errors=True)
            d.rename(out / f"miss-{i}")
        shutil.rmtree(d, ignore_errors=True)
    lines = [f"## Realistic workload families (issue 12), {time.strftime('%Y-%m-%d')}", "",
             f"`.venv/bin/python bench/workloads.py --ranks {args.ranks} --runs {args.runs} --healthy {args.healthy} "
             f"--seed {args.seed} --cpus {args.cpus}` ({platform_line()}; load during the runs: "
             f"{min(r['load1'] for r in rows)}–{max(r['load1'] for r in rows)})", "",
             "| family | ranks | runs | right (straggler: rank and cause; healthy: nothing named) |", "|---|---|---|---|"]
    for fam in FAMILIES:
        for n in map(int, args.ranks.split(",")):
            rs = [r for r in rows if r["family"] == fam and r["ranks"] == n]
            if rs:
                lines.append(f"| {fam} | {n} | {len(rs)} | {sum(r['ok'] for r in rs)} / {len(rs)} |")
    misses = [r for r in rows if not r["ok"]]
    lines += ["", "Misses:" if misses else "No misses.", ""]
    lines += [f"- {r['family']}@{r['ranks']} rank {r['rank']} F={r['factor']} (load {r['load1']}): {r['verdict']}"
              for r in misses]
    print("\n".join(lines))
    if args.write:
        with open(ROOT / "bench" / "RESULTS.md", "a") as fh:
            fh.write("\n" + "\n".join(lines) + "\n")


def platform_line() -> str:
    return f"{os.cpu_count()} CPUs, {sys.platform}"


if __name__ == "__main__":
    main()
