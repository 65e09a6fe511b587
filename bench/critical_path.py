"""Critical path across ranks (issue 25): its time at 64 synthetic ranks, what it adds to `rankscope
analyze` on df_index_resolver, and how well its what-if predicts a twin run without the delay.

Three parts, each side by side in one invocation (the machine's load average is printed with them:
on a shared 2-core VM, compare ratios, not absolute seconds):

- ``scale``: a synthetic run (``rankscope.synth``, seed 1, ``--ranks`` ranks, rank 3's data loading 3x)
  is generated once into ``--cache`` and ingested; then, ``--repeats`` times in a child process each,
  the ``critical_path`` analysis alone (cached tables: what the issue's "under 10 s" is about) and,
  for scale, every other analysis of ``rankscope analyze``.
- ``analyze``: ``rankscope analyze df_index_resolver --json`` whole process, cached tables, with and
  without ``critical_path`` (dropped from the registry in the child), interleaved.
- ``twins``: synthetic runs with an injected delay and their twins (same seed, no delay): the
  bounding rank and its what-if against the twin's measured step time.
- ``demo`` (not by default: minutes): real gloo jobs, a slow rank and the healthy twin, the same way.

    .venv/bin/python bench/critical_path.py [--ranks 64] [--repeats 3] [--parts scale analyze twins]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DFI = ROOT.parent / "shared" / "data" / "hta" / "df_index_resolver"

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from rankscope.analysis import registry
from rankscope.model.run import load_run
run = load_run(sys.argv[1], jobs=1)
names = list(registry.analyses())
only = sys.argv[2]
want = ["critical_path"] if only == "critical_path" else [n for n in names if n != "critical_path"]
t = time.perf_counter()
res = registry.run_all(run, want)
dt = time.perf_counter() - t
cp = res.get("critical_path")
b = cp.summary.get("bounding") if cp is not None and not cp.skipped else None
print(json.dumps({"seconds": dt, "bounding": None if b is None else {k: b[k] for k in ("rank", "cost_ms", "steps", "of_steps")}}))
"""

ANALYZE = r"""
import sys
from rankscope.analysis import registry
if sys.argv[1] == "without":
    registry.analyses().pop("critical_path")
from rankscope.cli import main
sys.argv = ["rankscope", "analyze", sys.argv[2], "--json"]
main()
"""


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def env(cache: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), RANKSCOPE_CACHE=str(cache), POLARS_MAX_THREADS="2")


def child(code: str, *args: str, cache: Path) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code, *args], env=env(cache), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return time.perf_counter() - t, p.stdout


def scale(cache: Path, ranks: int, repeats: int) -> None:
    from rankscope.model.run import load_run
    from rankscope.synth import generate

    run = cache / f"cp-r{ranks}"
    if not (run / "run.json").exists():
        generate(run, ranks=ranks, steps=5, seed=1, stragglers=["3:data:3"], jobs=2, overwrite=True)
    os.environ["RANKSCOPE_CACHE"] = str(cache / "rs-cache")
    load_run(run, jobs=2)  # ingest once: the timings below read the cached tables
    rows: dict[str, list[float]] = {"critical_path": [], "others": []}
    found = None
    for _ in range(repeats):
        for what in rows:
            _, out = child(CHILD, str(run), what, cache=cache / "rs-cache")
            got = json.loads(out.strip().splitlines()[-1])
            rows[what].append(got["seconds"])
            found = got["bounding"] or found
    print(f"\n### scale: {ranks} synthetic ranks, 5 steps, rank 3 data 3x (load {load()})\n")
    print("| analyses | median s | runs |\n|---|---|---|")
    for what, xs in rows.items():
        print(f"| {what} | {statistics.median(xs):.2f} | {', '.join(f'{x:.2f}' for x in xs)} |")
    print(f"\nbounding: {found}")


def analyze(cache: Path, repeats: int) -> None:
    c = cache / "dfi-cache"
    child(ANALYZE, "with", str(DFI), cache=c)  # ingest once
    rows: dict[str, list[float]] = {"without": [], "with": []}
    for _ in range(repeats):
        for what in rows:
            rows[what].append(child(ANALYZE, what, str(DFI), cache=c)[0])
    w, wo = statistics.median(rows["with"]), statistics.median(rows["without"])
    print(f"\n### analyze df_index_resolver --json, whole process, cached tables (load {load()})\n")
    print("| critical_path | median s | runs |\n|---|---|---|")
    for what, xs in rows.items():
        print(f"| {what} | {statistics.median(xs):.2f} | {', '.join(f'{x:.2f}' for x in xs)} |")
    print(f"\nratio with / without: {w / wo:.2f}")


TWINS = [("data 3x, 8 ranks", 8, "3:data:3", 3), ("compute 1.15x, 8 ranks", 8, "5:compute:1.15", 5),
         ("host 1.3x, 8 ranks", 8, "2:host:1.3", 2), ("compute 1.3x, 4 ranks", 4, "1:compute:1.3", 1),
         ("data 2x, 16 ranks", 16, "9:data:2", 9)]


def twins(cache: Path, seed: int) -> None:
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run
    from rankscope.synth import generate

    os.environ["RANKSCOPE_CACHE"] = str(cache / "rs-cache")
    print(f"\n### twins: what-if of the bounding rank vs the same run without the delay (seed {seed}, load {load()})\n")
    print("| case | bounding rank (injected) | steps bound | cost ms | step ms | predicted ms | twin ms | error |")
    print("|---|---|---|---|---|---|---|---|")
    for name, ranks, strag, truth in TWINS:
        med = {}
        for kind, s in (("slow", [strag]), ("twin", [])):
            path = cache / f"twin-{ranks}-{strag.replace(':', '_')}-{seed}-{kind}"
            if not (path / "run.json").exists():
                generate(path, ranks=ranks, steps=5, seed=seed, stragglers=s, overwrite=True)
            res = run_all(load_run(path, jobs=1), ["critical_path"])["critical_path"]
            med[kind] = res.summary
        b = med["slow"]["bounding"] or {}
        twin_ms = statistics.median(s["step_ms"] for s in med["twin"]["per_step"])
        pred = b.get("step_ms_if_median", float("nan"))
        print(f"| {name} | {b.get('rank')} ({truth}) | {b.get('steps')} of {b.get('of_steps')} | {b.get('cost_ms', 0):.2f} | "
              f"{b.get('step_ms', 0):.2f} | {pred:.2f} | {twin_ms:.2f} | {100 * (pred - twin_ms) / twin_ms:+.1f} % |")


def demo(cache: Path, kinds: list[str], steps: int) -> None:
    """Real gloo jobs (``rankscope demo``, 2 ranks, vCPUs rotated): a slow rank and the healthy twin."""
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    os.environ["RANKSCOPE_CACHE"] = str(cache / "rs-cache")
    print(f"\n### demo: real gloo jobs, 2 ranks, {steps} steps, vCPUs rotated (load {load()})\n")
    print("| slow kind (rank 1) | bounding rank | steps bound | cost ms | step ms | predicted ms | healthy ms | error |")
    print("|---|---|---|---|---|---|---|---|")
    runs = {}
    for kind in ["healthy"] + kinds:
        out = cache / f"demo-{kind}-{int(time.time())}"
        extra = [] if kind == "healthy" else ["--slow-rank", "1", "--slow-kind", kind]
        subprocess.run([sys.executable, "-m", "rankscope.cli", "demo", "--ranks", "2", "--steps", str(steps),
                        "--warmup", "2", "--rotate-cpus", "--out", str(out), "--run-id", "r", *extra],
                       env=env(cache / "rs-cache"), capture_output=True, check=True)
        runs[kind] = run_all(load_run(out / "r", jobs=1), ["critical_path"])["critical_path"].summary
    healthy = statistics.median(s["step_ms"] for s in runs["healthy"]["per_step"])
    for kind in kinds:
        b = runs[kind]["bounding"] or {}
        pred = b.get("step_ms_if_median", float("nan"))
        print(f"| {kind} | {b.get('rank')} | {b.get('steps')} of {b.get('of_steps')} | {b.get('cost_ms', 0):.1f} | "
              f"{b.get('step_ms', 0):.1f} | {pred:.1f} | {healthy:.1f} | {100 * (pred - healthy) / healthy:+.1f} % |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--parts", nargs="+", default=["scale", "analyze", "twins"], help="also: demo (real gloo jobs)")
    ap.add_argument("--demo-kinds", nargs="+", default=["data", "host", "compute"])
    ap.add_argument("--demo-steps", type=int, default=8)
    ap.add_argument("--cache", type=Path, default=ROOT / ".bench" / "critical_path")
    a = ap.parse_args()
    a.cache.mkdir(parents=True, exist_ok=True)
    print(f"bench/critical_path.py {' '.join(sys.argv[1:])}  (load {load()}, {os.cpu_count()} CPUs)")
    if "scale" in a.parts:
        scale(a.cache, a.ranks, a.repeats)
    if "analyze" in a.parts:
        analyze(a.cache, a.repeats)
    if "twins" in a.parts:
        twins(a.cache, a.seed)
    if "demo" in a.parts:
        demo(a.cache, a.demo_kinds, a.demo_steps)


if __name__ == "__main__":
    main()
