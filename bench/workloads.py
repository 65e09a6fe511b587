"""Straggler verdicts on realistic workload families (issues 12 and 25), beside bench/stragglers.py's injected kinds.

Each run is a real torchrun job (gloo on CPU) profiled with ``rankscope.profile``; its ground truth is in
``RUN/truth.json`` (the slow rank, the cause label a verdict should give, and the job's own perf_counter
timers per step and rank: the straggler's extra time per step); the verdict is read from the structured
findings of ``rankscope analyze RUN --json`` (straggler and likely-straggler findings: rank and cause).

DDP families (rankscope.demo.lm; the default ``--families ddp``, as in bench/RESULTS.md's runs 1-11):
- ``lm-imbalance``: one rank's sequences F times longer, F in [1.3, 1.7]; truth: cause "imbalance";
- ``decode-slow``: one rank decodes F times more bytes per sample, F in [1.5, 2.5]; truth: "data";
- ``lm-healthy``, ``decode-healthy``: every rank alike; truth: no rank named.
Other parallelisms (rankscope.demo.workloads; group names fsdp, moe, tpfsdp, pp; ``new``: all of them):
- ``fsdp-data`` / ``fsdp-compute`` / ``fsdp-input`` / ``fsdp-healthy``: a small LM under FSDP2; pure-Python
  tokenizing, 8-14 % of the step ("data"); extra matmuls, 10-20 % ("compute"); sequences 1.3-1.7x longer
  ("imbalance");
- ``moe-skew`` / ``moe-healthy``: expert parallel all_to_all; the slow rank's experts get 2.2-2.8x the
  tokens ("imbalance"); twin: a balanced router;
- ``tpfsdp-host`` / ``tpfsdp-healthy``: TP x FSDP2 (2 x 2 mesh; 1 x 2 at 2 ranks), a 20-30 ms Python
  loop before the optimizer step ("host");
- ``pp-gpipe``, ``pp-1f1b`` / ``pp-gpipe-healthy``, ``pp-1f1b-healthy``: pipelining, 8 microbatches,
  the slow rank's stage holds 2x the layers ("compute"; truth also names the bottleneck stage); twin: balanced.
Pipeline shapes (group ``ppx``; not in ``new``, whose runs in bench/RESULTS.md predate them):
- ``pp-interleaved`` / ``pp-interleaved-healthy``: interleaved 1F1B, 2 stages per rank;
- ``pp-zbv`` / ``pp-zbv-healthy``: zero bubble (ZB-V: 2 stages per rank in a V, input and weight backward apart);
- ``ppdp-1f1b`` / ``ppdp-1f1b-healthy``: 2 data-parallel replicas of a 1F1B pipeline (4 ranks: 2 stages x 2;
  run at 4 ranks only), the slow rank's stage (on both replicas) with 2x the layers;
- ``ppdp-data`` / ``ppdp-data-healthy``: the same shape balanced (4 layers a stage), one replica of one stage loading
  its data through a Python tokenizer, 10-20 % of the step ("data"); twin: every replica's data alike.
Right: straggler families, exactly one rank named with the truth's rank and cause (with replicas: a rank of the
truth's bottleneck stage); healthy twins, none named.
Runs are interleaved across families, each with a fresh seed drawn from ``--seeds``.

    .venv/bin/python bench/workloads.py --ranks 2,4 --runs 20 --healthy 10 --write          # DDP, as before
    .venv/bin/python bench/workloads.py --families new --ranks 2,4 --repeats 20 --seeds 2511
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Family:
    job: str  # "lm": rankscope.demo.lm (DDP); else a module of rankscope.demo.workloads
    kind: str | None  # the job's straggler kind; None: the healthy twin
    cause: str | None  # the label the verdict should give
    span: tuple[float, float] | None = None  # the job's --amount (DDP: --imbalance), drawn per run
    args: tuple[str, ...] = ()
    group: str = "ddp"
    min_ranks: int = 2  # run at this many ranks or more (2 stages x 2 replicas: 4)


FAMILIES = {
    "lm-imbalance": Family("lm", "lm", "imbalance", (1.3, 1.7)),
    "decode-slow": Family("lm", "decode", "data", (1.5, 2.5)),
    "lm-healthy": Family("lm", None, None, args=("--family", "lm")),
    "decode-healthy": Family("lm", None, None, args=("--family", "decode")),
    "fsdp-data": Family("fsdp", "data", "data", (0.08, 0.14), group="fsdp"),
    "fsdp-compute": Family("fsdp", "compute", "compute", (0.10, 0.20), group="fsdp"),
    "fsdp-input": Family("fsdp", "input", "imbalance", (1.3, 1.7), group="fsdp"),
    "fsdp-healthy": Family("fsdp", None, None, group="fsdp"),
    "moe-skew": Family("moe", "skew", "imbalance", (2.2, 2.8), group="moe"),
    "moe-healthy": Family("moe", None, None, group="moe"),
    "tpfsdp-host": Family("tp_fsdp", "host", "host", (20.0, 30.0), group="tpfsdp"),
    "tpfsdp-healthy": Family("tp_fsdp", None, None, group="tpfsdp"),
    "pp-gpipe": Family("pipeline", "stage", "compute", (2.0, 2.0), ("--schedule", "gpipe"), "pp"),
    "pp-gpipe-healthy": Family("pipeline", None, None, None, ("--schedule", "gpipe"), "pp"),
    "pp-1f1b": Family("pipeline", "stage", "compute", (2.0, 2.0), ("--schedule", "1f1b"), "pp"),
    "pp-1f1b-healthy": Family("pipeline", None, None, None, ("--schedule", "1f1b"), "pp"),
    "pp-interleaved": Family("pipeline", "stage", "compute", (2.0, 2.0), ("--schedule", "interleaved"), "ppx"),
    "pp-interleaved-healthy": Family("pipeline", None, None, None, ("--schedule", "interleaved"), "ppx"),
    "pp-zbv": Family("pipeline", "stage", "compute", (2.0, 2.0), ("--schedule", "zbv"), "ppx"),
    "pp-zbv-healthy": Family("pipeline", None, None, None, ("--schedule", "zbv"), "ppx"),
    "ppdp-1f1b": Family("pipeline", "stage", "compute", (2.0, 2.0), ("--schedule", "1f1b", "--dp", "2"), "ppx", 4),
    "ppdp-1f1b-healthy": Family("pipeline", None, None, None, ("--schedule", "1f1b", "--dp", "2"), "ppx", 4),
    # one replica of one stage is slow (its data loading): the verdict names that rank, not its stage
    "ppdp-data": Family("pipeline", "data", "data", (0.10, 0.20), ("--schedule", "1f1b", "--dp", "2"), "ppx", 4),
    # its twin: the same balanced pipeline (4 layers a stage: ``--amount 1``), every replica's data alike
    "ppdp-data-healthy": Family("pipeline", None, None, None, ("--schedule", "1f1b", "--dp", "2", "--amount", "1"),
                                "ppx", 4),
}


def pick(spec: str) -> list[str]:
    """Family names from a comma list of names and groups (ddp, fsdp, moe, tpfsdp, pp, ppx, new, all)."""
    out: list[str] = []
    for part in spec.split(","):
        names = [n for n, f in FAMILIES.items()
                 if part in (f.group, "all") or (part == "new" and f.group not in ("ddp", "ppx"))]
        if not names and part not in FAMILIES:
            raise SystemExit(f"unknown family or group {part!r}; families: {', '.join(FAMILIES)}")
        out += [n for n in (names or [part]) if n not in out]
    return out


def command(fam: Family, out: Path, ranks: int, slow: int, amount: float, seed: int, steps: int,
            rotate: bool) -> list[str]:
    head = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", "--module"]
    tail = ["--rotate-cpus"] if rotate else []
    if fam.job == "lm":
        return head + ["rankscope.demo.lm", "--run-dir", str(out), *(fam.args or ("--family", str(fam.kind))),
                       "--slow-rank", str(slow), "--imbalance", str(amount), "--seed", str(seed), "--steps",
                       str(steps)] + tail
    return head + [f"rankscope.demo.workloads.{fam.job}", "--run-dir", str(out), "--straggler", fam.kind or "none",
                   "--slow-rank", str(slow), "--seed", str(seed), *fam.args] + (
        ["--amount", str(amount)] if fam.kind else []) + tail


def job(cmd: list[str], out: Path, threads: int = 1) -> float:
    """Run the job with ``threads`` intra-op threads per rank; its wall time (s). The log is RUN.log beside the run."""
    t = time.perf_counter()
    with open(str(out) + ".log", "w") as fh:
        subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, check=True, timeout=600,
                       env={**os.environ, "OMP_NUM_THREADS": str(threads), "RANKSCOPE_DEMO_THREADS": str(threads)})
    return time.perf_counter() - t


def verdict(path: Path) -> dict[str, Any]:
    """``rankscope analyze RUN --json``: the straggler verdict's findings, its text, the critical path's facts."""
    cli = Path(sys.executable).with_name("rankscope")
    t = time.perf_counter()
    proc = subprocess.run([str(cli), "analyze", str(path), "--json", "--jobs", "2"], capture_output=True, text=True,
                          timeout=900)
    if proc.returncode != 0:
        return {"found": None, "text": "analyze failed: " + proc.stderr.strip()[-300:], "analyze_s": 0.0}
    an = json.loads(proc.stdout)["analyses"]
    st = an.get("straggler", {})
    found = [(f["ranks"][0], f["evidence"].get("cause", "likely")) for f in st.get("findings", [])
             if f["kind"] in ("straggler", "likely_straggler")]
    cp = an.get("critical_path", {}).get("summary") or {}
    return {"found": found, "text": st.get("summary", {}).get("verdict") or st.get("skipped") or "",
            "critical_path": {k: cp.get(k) for k in ("bounding_rank", "cost_per_step_ns", "bounding_steps")},
            "bounding": st.get("summary", {}).get("bounding"),  # the verdict's reading of the path (bound.Bound)
            "analyze_s": round(time.perf_counter() - t, 1)}


def one(i: int, fam_name: str, n: int, rng: random.Random, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    fam = FAMILIES[fam_name]
    slow = rng.randrange(n) if fam.kind else -1
    amount = round(rng.uniform(*fam.span), 3) if fam.span else 1.0
    seed = rng.randrange(10**6)
    d = out / f"run{i}"
    shutil.rmtree(d, ignore_errors=True)
    job_s = job(command(fam, d, n, slow, amount, seed, args.steps, args.cpus == "rotate"), d, args.threads)
    truth = json.loads((d / "truth.json").read_text())
    v = verdict(d)
    want = [(truth["slow_rank"], truth["cause"])] if truth["straggler"] else []
    ok = v["found"] == want or stage_named(truth, v["found"])
    summary = truth.get("summary") or {}
    row = {"i": i, "family": fam_name, "ranks": n, "rank": slow, "amount": amount, "seed": seed, "ok": ok,
           "truth": {k: truth.get(k) for k in ("slow_rank", "cause", "layout", "pipeline")},
           "extra_ms_per_step": summary.get("extra_ms_per_step"), "extra_share": summary.get("extra_share_of_step"),
           "extra_wall_ms": summary.get("extra_wall_ms_per_step"), "extra_cpu_ms": summary.get("extra_cpu_ms_per_step"),
           "step_ms": (summary.get("median_ms") or {}).get("step_ms"), "found": v["found"], "verdict": v["text"],
           "critical_path": v.get("critical_path"), "bounding": v.get("bounding"), "job_s": round(job_s, 1),
           "analyze_s": v["analyze_s"],
           "load1": round(os.getloadavg()[0], 1), "run": str(d)}
    if not (args.keep or (args.keep_misses and not ok)):
        shutil.rmtree(d, ignore_errors=True)
    return row


def stage_named(truth: dict[str, Any], found: list[tuple[int, str]]) -> bool:
    """A pipeline with replicas: its bottleneck stage is on every replica, and any one of its ranks, named with the
    truth's cause, is right."""
    pipe = truth.get("pipeline") or {}
    stage, ranks = pipe.get("bottleneck_stage"), pipe.get("stage_ranks") or []
    if not truth.get("straggler") or not isinstance(stage, int) or int(pipe.get("dp") or 1) < 2:
        return False
    return len(found) == 1 and found[0][0] in ranks[stage] and found[0][1] == truth["cause"]


def plan(families: list[str], ranks: list[int], args: argparse.Namespace, rng: random.Random) -> list[tuple[str, int]]:
    per = {f: args.repeats or (args.runs if FAMILIES[f].kind else args.healthy) for f in families}
    p = [(f, n) for n in ranks for f in families for _ in range(per[f]) if n >= FAMILIES[f].min_ranks]
    rng.shuffle(p)
    return p


def _med(vals: list[float]) -> str:
    return f"{statistics.median(vals):.1f}" if vals else "-"


def table(rows: list[dict[str, Any]], families: list[str], ranks: list[int]) -> list[str]:
    """Right per family and rank count; for straggler families, medians of the job's own measure of the slow rank's
    extra time per step (truth.json) and of the critical path's cost per step when it named that rank."""
    lines = ["| family | ranks | runs | right (straggler: rank and cause; healthy: nothing named) "
             "| extra ms/step (job's timers) | path cost ms/step (bounding rank = slow rank) |",
             "|---|---|---|---|---|---|"]
    for fam in families:
        for n in ranks:
            rs = [r for r in rows if r["family"] == fam and r["ranks"] == n]
            if rs:
                extra = [r["extra_ms_per_step"] for r in rs if r.get("extra_ms_per_step") is not None]
                cost = [cp["cost_per_step_ns"] / 1e6 for r in rs if (cp := r.get("critical_path") or {})
                        and cp.get("bounding_rank") == r["rank"] and cp.get("cost_per_step_ns") is not None]
                lines.append(f"| {fam} | {n} | {len(rs)} | {sum(r['ok'] for r in rs)} / {len(rs)} | {_med(extra)} "
                             f"| {_med(cost)} ({len(cost)}) |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="ddp", help="comma list of families and groups (ddp, fsdp, moe, tpfsdp, "
                                                      "pp, ppx, new, all); default: ddp, the families of runs 1-11")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--runs", type=int, default=20, help="runs per straggler family and rank count")
    ap.add_argument("--healthy", type=int, default=10, help="runs per healthy family and rank count")
    ap.add_argument("--repeats", type=int, default=None, help="runs per family (either kind) and rank count; "
                                                              "overrides --runs and --healthy")
    ap.add_argument("--seeds", default=None, help="comma list of seeds; each gives a whole plan (default: --seed)")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--steps", type=int, default=8, help="recorded steps of the DDP jobs (the others record 6)")
    ap.add_argument("--out", default="/tmp/rankscope-bench-workloads")
    ap.add_argument("--json", default=None, help="results file (default .bench/workloads/<time>.json)")
    ap.add_argument("--write", action="store_true", help="append the table to bench/RESULTS.md")
    ap.add_argument("--cpus", choices=["rotate", "free"], default="free",
                    help="rotate: every rank moves to CPU (rank + step) mod n each step, so all ranks see the same mix "
                         "of this VM's vCPUs, which differ in speed for seconds at a time; free: the OS places them")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads per rank (default 1: an operator's work is its thread's CPU time)")
    ap.add_argument("--keep-misses", action="store_true", help="keep the run directories of misses")
    ap.add_argument("--keep", action="store_true", help="keep every run directory (OUT/runI)")
    args = ap.parse_args()
    families, ranks = pick(args.families), [int(x) for x in args.ranks.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        rng = random.Random(seed)
        for fam, n in plan(families, ranks, args, rng):
            rows.append(one(len(rows), fam, n, rng, args, out))
            r = rows[-1]
            print(f"{len(rows)} {fam}@{n} rank={r['rank']} amount={r['amount']} extra={r['extra_ms_per_step']} ms: "
                  f"{'ok ' if r['ok'] else 'MISS'} {r['verdict'][:120]}", flush=True)
    report(args, rows, families, ranks, seeds)


def report(args: argparse.Namespace, rows: list[dict[str, Any]], families: list[str], ranks: list[int],
           seeds: list[int]) -> None:
    cmd = "bench/workloads.py " + " ".join(sys.argv[1:])
    loads = [r["load1"] for r in rows] or [0.0]
    lines = [f"## Workload families, {time.strftime('%Y-%m-%d %H:%M')}", "",
             f"`.venv/bin/python {cmd}` ({os.cpu_count()} CPUs, {sys.platform}; seeds {seeds}; load during the "
             f"runs: {min(loads)}-{max(loads)})", "", *table(rows, families, ranks)]
    misses = [r for r in rows if not r["ok"]]
    lines += ["", "Misses:" if misses else "No misses.", ""]
    lines += [f"- {r['family']}@{r['ranks']} rank {r['rank']} amount={r['amount']} (load {r['load1']}): {r['verdict']}"
              for r in misses]
    print("\n".join(lines))
    path = Path(args.json) if args.json else ROOT / ".bench" / "workloads" / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": cmd, "seeds": seeds, "families": families, "ranks": ranks, "rows": rows},
                               indent=1))
    print(f"results: {path}")
    if args.write:
        with open(ROOT / "bench" / "RESULTS.md", "a") as fh:
            fh.write("\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
