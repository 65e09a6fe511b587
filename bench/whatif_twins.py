"""The critical path's what-if on real gloo jobs against their healthy twins (issue 25, item 2).

For each family, each repeat runs a real job with one slow rank (bench/workloads.py's family: the same
command, torchrun, gloo on CPU, ``rankscope.profile``) and its healthy twin with the same seed, back to back
in alternating order. The twin is what the what-if describes: the same job with the slow rank's extra work
taken away, every other rank unchanged. Per pair:

- measured: the job's own step time (truth.json: per rank the median of its perf_counter steps, then the
  median over ranks) of the slow run minus the twin's;
- predicted: ``analyses.critical_path.summary.what_if`` of ``rankscope analyze RUN --json`` on the slow run,
  the slow rank's ``step_ms - step_ms_if_median`` (the step it would save if it ran at the other ranks'
  median), and the straggler verdict's cost where it named the rank.

Per family: the medians of the differences and of the predictions, and how far apart they are. Only families
whose twin is the counterfactual are offered (a skewed MoE router's twin moves tokens to every rank).

    PYTHONPATH=. .venv/bin/python bench/whatif_twins.py --families lm-imbalance,fsdp-compute --ranks 4 --repeats 6 \
        --cpus rotate
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from pipeline_twins import analyses, step_ms  # noqa: E402  (the same analyze call, the job's own step time)
from workloads import FAMILIES, command, job  # noqa: E402  (bench/workloads.py: the same jobs)

TWINS = {"lm-imbalance": "lm-healthy", "decode-slow": "decode-healthy", "fsdp-data": "fsdp-healthy",
         "fsdp-compute": "fsdp-healthy", "fsdp-input": "fsdp-healthy", "tpfsdp-host": "tpfsdp-healthy",
         "ppdp-data": "ppdp-data-healthy"}


def analyze(run: Path, slow: int) -> dict[str, Any]:
    an = analyses(run)
    if isinstance(an, str):
        return {"error": an}
    wi = {int(w["rank"]): w for w in (an.get("critical_path", {}).get("summary") or {}).get("what_if") or []}
    mine = wi.get(slow) or {}
    st = an.get("straggler", {})
    named = [f for f in st.get("findings", []) if f["kind"] == "straggler"]
    cp = (named[0]["evidence"].get("critical_path") or {}) if named else {}
    return {"step_ms": mine.get("step_ms"), "step_ms_if_median": mine.get("step_ms_if_median"),
            "what_if_ms": (round(mine["step_ms"] - mine["step_ms_if_median"], 3)
                           if mine.get("step_ms") is not None and mine.get("step_ms_if_median") is not None else None),
            "named": [(f["ranks"][0], f["evidence"].get("cause")) for f in named],
            "verdict_cost_ms": round(cp["cost_per_step_ns"] / 1e6, 3) if cp.get("cost_per_step_ns") else None,
            "verdict": (st.get("summary") or {}).get("verdict")}


def one_pair(name: str, n: int, i: int, rng: random.Random, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    fam, twin = FAMILIES[name], FAMILIES[TWINS[name]]
    slow, seed = rng.randrange(n), rng.randrange(10**6)
    amount = round(rng.uniform(*fam.span), 3) if fam.span else 1.0
    runs = {"slow": out / f"{name}-{n}-{i}-slow", "twin": out / f"{name}-{n}-{i}-twin"}
    secs, loads = {}, {}
    for which in (["slow", "twin"] if i % 2 == 0 else ["twin", "slow"]):
        d = runs[which]
        shutil.rmtree(d, ignore_errors=True)
        cmd = command(fam if which == "slow" else twin, d, n, slow if which == "slow" else -1, amount, seed,
                      args.steps, args.cpus == "rotate")
        secs[which] = round(job(cmd, d), 1)
        loads[which] = round(os.getloadavg()[0], 1)
    got = analyze(runs["slow"], slow)
    row = {"family": name, "ranks": n, "i": i, "slow": slow, "amount": amount, "seed": seed,
           "slow_step_ms": step_ms(runs["slow"]), "twin_step_ms": step_ms(runs["twin"]), **got,
           "load": loads, "job_s": secs}
    row["measured_ms"] = round(row["slow_step_ms"] - row["twin_step_ms"], 3)
    if not args.keep:
        for d in runs.values():
            shutil.rmtree(d, ignore_errors=True)
    return row


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| family | ranks | pairs | measured: slow - twin (median, ms) | what-if of the slow rank (median, ms) | "
             "off by | predicted step vs the twin's (median) | slow rank named | verdict's cost (median, ms) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in sorted({r["family"] for r in rows}):
        for n in sorted({r["ranks"] for r in rows}):
            rs = [r for r in rows if r["family"] == name and r["ranks"] == n and r.get("what_if_ms") is not None]
            if not rs:
                continue
            meas = statistics.median(r["measured_ms"] for r in rs)
            pred = statistics.median(r["what_if_ms"] for r in rs)
            vs = statistics.median(r["step_ms_if_median"] / r["twin_step_ms"] - 1 for r in rs)
            named = sum(any(k == r["slow"] for k, _ in r["named"]) for r in rs)
            costs = [r["verdict_cost_ms"] for r in rs if r.get("verdict_cost_ms") is not None]
            off = f"{(pred - meas) / meas:+.0%}" if meas > 0 else "n/a"
            cost = f"{statistics.median(costs):.1f}" if costs else "-"
            lines.append(f"| {name} | {n} | {len(rs)} | {meas:.1f} | {pred:.1f} | {off} | {vs:+.1%} | "
                         f"{named} / {len(rs)} | {cost} |")
    return lines


def reanalyze(src: Path, out: Path, dest: str | None) -> None:
    """The predictions of a kept run's pairs again, with this tree's code (the jobs' own step times stay)."""
    rows = json.loads(src.read_text())["rows"]
    for r in rows:
        r.update(analyze(out / f"{r['family']}-{r['ranks']}-{r['i']}-slow", r["slow"]))
        print(f"{r['family']}@{r['ranks']} #{r['i']} slow={r['slow']}: measured {r['measured_ms']:+.1f} ms, what-if "
              f"{r.get('what_if_ms')} ms (step {r.get('step_ms')} -> {r.get('step_ms_if_median')}, twin "
              f"{r['twin_step_ms']:.1f}), named {r.get('named')}, cost {r.get('verdict_cost_ms')}", flush=True)
    print("\n".join([f"re-analyzed {src} ({len(rows)} pairs)", "", *table(rows)]))
    if dest:
        Path(dest).write_text(json.dumps({"command": sys.argv, "reanalyzed": str(src), "rows": rows}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="lm-imbalance,fsdp-compute", help=f"comma list of {', '.join(TWINS)}")
    ap.add_argument("--ranks", default="4")
    ap.add_argument("--repeats", type=int, default=6)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--cpus", choices=["rotate", "free"], default="rotate",
                    help="rotate: each rank moves to CPU (rank + step) mod n each step (bench/workloads.py --cpus)")
    ap.add_argument("--out", default="/tmp/rankscope-bench-whatif")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--reanalyze", metavar="JSON", default=None,
                    help="run no job: analyze again the slow runs a --keep run left under --out (its results JSON), "
                         "with this tree's code, and print the table for them")
    args = ap.parse_args()
    if args.reanalyze:
        return reanalyze(Path(args.reanalyze), Path(args.out), args.json)
    names = args.families.split(",")
    bad = [x for x in names if x not in TWINS]
    if bad:
        raise SystemExit(f"no counterfactual twin for {', '.join(bad)}; families: {', '.join(TWINS)}")
    rng, out = random.Random(args.seed), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = Path(args.json) if args.json else ROOT / ".bench" / "whatif" / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for i in range(args.repeats):
        for name in names:
            for n in (int(x) for x in args.ranks.split(",")):
                r = one_pair(name, n, i, rng, args, out)
                rows.append(r)
                print(f"{name}@{n} #{i} slow={r['slow']} x{r['amount']}: measured {r['measured_ms']:+.1f} ms, what-if "
                      f"{r.get('what_if_ms')} ms (step {r.get('step_ms')} -> {r.get('step_ms_if_median')}, twin "
                      f"{r['twin_step_ms']:.1f}), named {r.get('named')}, cost {r.get('verdict_cost_ms')}, "
                      f"load {r['load']}", flush=True)
                path.write_text(json.dumps({"command": sys.argv, "seed": args.seed, "rows": rows}, indent=1))
    loads = [v for r in rows for v in r["load"].values()] or [0.0]
    print("\n".join([f"`PYTHONPATH=. .venv/bin/python bench/whatif_twins.py {' '.join(sys.argv[1:])}` "
                     f"({os.cpu_count()} CPUs; seed {args.seed}; load during the jobs {min(loads)}-{max(loads)})", "",
                     *table(rows)]))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
