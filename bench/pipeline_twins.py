"""The pipeline analysis' what-if against balanced twins (issue 25, item 4).

For each schedule (GPipe, 1F1B) and number of stages, each repeat runs a real pipeline job whose slow stage
holds 2x (``--amount``) the layers of each other stage (rankscope.demo.workloads.pipeline, ``--straggler stage``) and its
balanced twin (the same layers spread evenly, ``--straggler none``) back to back, in alternating order,
with the same seed. The measured difference is the job's own step time (truth.json: median over the
recorded steps of each rank's perf_counter step, median over ranks) of the unbalanced run minus the
twin's. The prediction is ``analyses.pipeline.summary.cost_ms`` of ``rankscope analyze RUN --json`` on the
unbalanced run: the step time it would save if its stages were balanced. Per configuration: the median of
the differences and the median of the predictions, and how far apart they are.

    PYTHONPATH=. .venv/bin/python bench/pipeline_twins.py --schedules gpipe,1f1b --stages 2,4 --repeats 5

``--schedules`` also takes a family of bench/workloads.py by name, such as ``ppdp-1f1b`` (2 replicas of each stage);
``--stages`` is then the number of ranks, and the table's stages are ranks / replicas.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from workloads import FAMILIES, command, job  # noqa: E402  (bench/workloads.py: the same jobs)


def step_ms(run: Path) -> float:
    """The job's own step time: per rank the median over recorded steps, then the median over ranks."""
    truth = json.loads((run / "truth.json").read_text())
    return float(statistics.median(truth["summary"]["median_ms"]["step_ms"].values()))


def analyses(run: Path) -> dict[str, Any] | str:
    """``rankscope analyze RUN --json``'s analyses, with this tree's code; its stderr's tail where it failed."""
    cli = Path(sys.executable).with_name("rankscope")  # a machine without the console script runs the module
    head = [str(cli)] if cli.exists() else [sys.executable, "-c", "import sys; from rankscope.cli import main; sys.exit(main())"]
    proc = subprocess.run([*head, "analyze", str(run), "--json", "--jobs", "2"], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    if proc.returncode != 0:
        return proc.stderr.strip()[-300:]
    return dict(json.loads(proc.stdout)["analyses"])


def analyze(run: Path) -> dict[str, Any]:
    an = analyses(run)
    if isinstance(an, str):
        return {"error": an}
    pipe = an.get("pipeline", {})
    s = pipe.get("summary") or {}
    keep = ("stages", "stages_from", "schedule", "schedule_from", "microbatches", "bottleneck_stage", "cost_ms",
            "step_ms", "imbalance", "balanced", "bottleneck_work_share", "work_measure", "expected_bubble_share",
            "critical_path_stage", "model_step_ms", "model", "hop_latency_ms")
    adv = [f["kind"] for f in an.get("advice", {}).get("findings", [])]
    cp = (an.get("critical_path") or {}).get("summary") or {}
    path = {int(w["rank"]): round(float(w["step_ms"]) - float(w["step_ms_if_median"]), 2)
            for w in cp.get("what_if") or [] if w.get("step_ms") is not None and w.get("step_ms_if_median") is not None}
    sev = {f["kind"]: f["severity"] for name in ("pipeline", "advice") for f in an.get(name, {}).get("findings", [])}
    return {**{k: s.get(k) for k in keep}, "skipped": pipe.get("skipped"), "advice": adv, "severity": sev,
            "path_saving_ms": path, "path_skipped": (an.get("critical_path") or {}).get("skipped")}


def one_pair(sched: str, n: int, i: int, rng: random.Random, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    slow, seed = rng.randrange(n), rng.randrange(10**6)
    name = f"pp-{sched}" if f"pp-{sched}" in FAMILIES else sched  # "ppdp-1f1b": the family's own name
    heavy, twin = FAMILIES[name], FAMILIES[f"{name}-healthy"]
    dp = int(heavy.args[heavy.args.index("--dp") + 1]) if heavy.args and "--dp" in heavy.args else 1
    runs = {"heavy": out / f"{sched}-{n}-{i}-heavy", "twin": out / f"{sched}-{n}-{i}-twin"}
    order = ["heavy", "twin"] if i % 2 == 0 else ["twin", "heavy"]
    loads, secs = {}, {}
    for which in order:
        fam, d = (heavy, runs[which]) if which == "heavy" else (twin, runs[which])
        shutil.rmtree(d, ignore_errors=True)
        cmd = command(fam, d, n, slow if which == "heavy" else -1, args.amount, seed, 6, args.cpus == "rotate")
        if which == "twin":  # the twin spreads the same total of layers evenly (workloads.command passes no amount)
            cmd += ["--amount", str(args.amount)]
        secs[which] = job(cmd, d)
        loads[which] = round(os.getloadavg()[0], 1)
    got = {w: analyze(d) for w, d in runs.items()}
    meas = step_ms(runs["heavy"]) - step_ms(runs["twin"])
    row = {"schedule": sched, "stages": n // dp, "ranks": n, "i": i, "slow": slow, "slow_stage": slow // dp, "seed": seed,
           "measured_ms": round(meas, 2),
           "heavy_step_ms": step_ms(runs["heavy"]), "twin_step_ms": step_ms(runs["twin"]),
           "predicted_ms": got["heavy"].get("cost_ms"), "heavy": got["heavy"], "twin": got["twin"], "load": loads,
           "job_s": {k: round(v, 1) for k, v in secs.items()}}
    if not args.keep:
        for d in runs.values():
            shutil.rmtree(d, ignore_errors=True)
    return row


def _balanced(r: dict[str, Any]) -> float:
    """The balanced step the unbalanced run predicts: its model's step minus the cost."""
    h = r["heavy"]
    return float(h.get("model_step_ms") or 0.0) - float(h.get("cost_ms") or 0.0)


def _path_saving(r: dict[str, Any]) -> float | None:
    """The critical path's what-if for the slow rank: its step minus its step at the other ranks' median (JSON keys
    are strings once a row went through a file)."""
    got = r["heavy"].get("path_saving_ms") or {}
    v = got.get(r["slow"], got.get(str(r["slow"])))
    return None if v is None else float(v)


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| schedule | stages | pairs | measured: unbalanced - twin (median, ms) | predicted cost (median, ms) | "
             "off by | bottleneck named | twins without a bottleneck finding | predicted balanced step vs the twin's "
             "own model (median) | twin: measured - own model (median, ms) | critical path: the slow rank's saving "
             "(median, ms) | off by |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for sched in sorted({r["schedule"] for r in rows}):
        for n in sorted({r["stages"] for r in rows}):
            rs = [r for r in rows if r["schedule"] == sched and r["stages"] == n]
            if not rs:
                continue
            meas = statistics.median(r["measured_ms"] for r in rs)
            pred = statistics.median(r["predicted_ms"] or 0.0 for r in rs)
            named = sum(r["heavy"].get("bottleneck_stage") == r.get("slow_stage", r["slow"]) for r in rs)
            clean = sum("pipeline_bottleneck" not in r["twin"].get("severity", {}) for r in rs)
            off = f"{(pred - meas) / meas:+.0%}" if meas else "n/a"
            own = [r for r in rs if r["twin"].get("model_step_ms")]
            vs = statistics.median(_balanced(r) / r["twin"]["model_step_ms"] - 1 for r in own) if own else None
            extra = statistics.median(r["twin_step_ms"] - r["twin"]["model_step_ms"] for r in own) if own else None
            sv = [_path_saving(r) for r in rs]
            path = statistics.median(v for v in sv if v is not None) if any(v is not None for v in sv) else None
            p_off = f"{(path - meas) / meas:+.0%}" if meas and path is not None else "n/a"
            lines.append(f"| {sched} | {n} | {len(rs)} | {meas:.1f} | {pred:.1f} | {off} | {named} / {len(rs)} | "
                         f"{clean} / {len(rs)} | {'n/a' if vs is None else f'{vs:+.0%}'} | "
                         f"{'n/a' if extra is None else f'{extra:+.1f}'} | "
                         f"{'n/a' if path is None else f'{path:.1f}'} | "
                         f"{p_off} |")
    return lines


def reanalyze(src: Path, out: Path, dest: str | None) -> None:
    """The predictions of a kept run's pairs again (the jobs' own step times stay as measured)."""
    rows = json.loads(src.read_text())["rows"]
    for r in rows:
        base = out / f"{r['schedule']}-{r.get('ranks', r['stages'])}-{r['i']}"
        r["heavy"], r["twin"] = analyze(Path(f"{base}-heavy")), analyze(Path(f"{base}-twin"))
        r["predicted_ms"] = r["heavy"].get("cost_ms")
        print(f"{r['schedule']}@{r['stages']} #{r['i']} slow={r['slow']}: measured {r['measured_ms']:+.1f} ms, "
              f"predicted {r['predicted_ms']} ms; heavy: model {r['heavy'].get('model_step_ms')} ms, measured "
              f"{r['heavy_step_ms']:.1f} ms; twin: model {r['twin'].get('model_step_ms')} ms, measured "
              f"{r['twin_step_ms']:.1f} ms", flush=True)
    print("\n".join([f"re-analyzed {src} ({len(rows)} pairs)", "", *table(rows)]))
    if dest:
        Path(dest).write_text(json.dumps({"command": sys.argv, "reanalyzed": str(src), "rows": rows}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedules", default="gpipe,1f1b")
    ap.add_argument("--stages", default="2,4")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--out", default="/tmp/rankscope-bench-pipeline")
    ap.add_argument("--amount", type=float, default=2.0,
                    help="the slow stage holds this many times the layers of each other stage (the twin: the same "
                         "total, even); 2 is the workload family's, a larger one lifts the effect above the noise")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--cpus", choices=["rotate", "free"], default="free",
                    help="rotate: each rank moves to CPU (rank + step) mod n each step, with its gloo threads, so at "
                         "most n ranks no two ranks share a CPU (bench/workloads.py --cpus); free: the OS places them")
    ap.add_argument("--json", default=None)
    ap.add_argument("--reanalyze", metavar="JSON", default=None,
                    help="run no job: analyze again the runs a --keep run left under --out (its results JSON), with "
                         "this tree's code, and print the table for them")
    args = ap.parse_args()
    if args.reanalyze:
        return reanalyze(Path(args.reanalyze), Path(args.out), args.json)
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan = [(s, int(n), i) for i in range(args.repeats) for s in args.schedules.split(",") for n in args.stages.split(",")]
    rows: list[dict[str, Any]] = []
    path = Path(args.json) if args.json else ROOT / ".bench" / "pipeline" / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for sched, n, i in plan:
        r = one_pair(sched, n, i, rng, args, out)
        rows.append(r)
        print(f"{sched}@{n} #{i} slow={r['slow']}: measured {r['measured_ms']:+.1f} ms, predicted "
              f"{r['predicted_ms']} ms, bottleneck {r['heavy'].get('bottleneck_stage')}, load {r['load']}; "
              f"balanced step predicted {_balanced(r):.1f} ms, the twin's own model {r['twin'].get('model_step_ms')} ms, "
              f"measured {r['twin_step_ms']:.1f} ms; path saving of the slow rank {_path_saving(r)} ms", flush=True)
        path.write_text(json.dumps({"command": sys.argv, "seed": args.seed, "rows": rows}, indent=1))  # kept if cut short
    loads = [v for r in rows for v in r["load"].values()] or [0.0]
    lines = [f"`PYTHONPATH=. .venv/bin/python bench/pipeline_twins.py {' '.join(sys.argv[1:])}` ({os.cpu_count()} CPUs; "
             f"seed {args.seed}; load during the jobs {min(loads)}-{max(loads)})", "", *table(rows)]
    print("\n".join(lines))
    path.write_text(json.dumps({"command": sys.argv, "seed": args.seed, "rows": rows}, indent=1))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
