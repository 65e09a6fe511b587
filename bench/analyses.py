"""All registered analyses on synthetic clusters (8, 64, 256 ranks): time and peak RSS.

Clusters come from ``rankscope.synth.generate`` into a cache directory (generated once, kept
between runs); ingest is timed on the first load (Parquet cache written next to the run), then a
fresh child process per cluster size re-opens the run from the Parquet cache and runs every
analysis, timing each one, so its peak RSS (ru_maxrss) is the analyses' own footprint.

    .venv/bin/python bench/analyses.py --ranks 8 64 256 --cache /tmp/rankscope-bench-cache
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ensure(cache: Path, ranks: int, steps: int, ops: int, jobs: int) -> tuple[Path, float]:
    """The synthetic run of ``ranks`` ranks (generated if missing) and its cold ingest time."""
    from rankscope.model.run import load_run
    from rankscope.synth import generate

    path = cache / f"synth-r{ranks}-s{steps}-o{ops}"
    if not (path / "run.json").exists():
        generate(path, ranks=ranks, steps=steps, ops_per_step=ops, seed=1, stragglers=[f"{ranks // 2}:compute:1.3"],
                 jobs=jobs, overwrite=True)
    shutil.rmtree(path / "analysis" / "cache", ignore_errors=True)  # time a cold ingest every time
    t0 = time.perf_counter()
    load_run(path, jobs=jobs)
    return path, time.perf_counter() - t0


def child(path: str) -> None:
    """Run in a fresh process: open from cache, time each analysis, print JSON."""
    sys.path.insert(0, str(ROOT))
    from rankscope.analysis import registry
    from rankscope.model.run import load_run

    t0 = time.perf_counter()
    run = load_run(path, jobs=1)
    reopen = time.perf_counter() - t0
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times: dict[str, float] = {}
    last = [time.perf_counter(), ""]

    def tick(name: str) -> None:
        now = time.perf_counter()
        if last[1]:
            times[str(last[1])] = now - float(last[0])
        last[0], last[1] = now, name

    t1 = time.perf_counter()
    res = registry.run_all(run, progress=tick)
    tick("")
    total = time.perf_counter() - t1
    print(json.dumps({"reopen_s": reopen, "events_rank0": run.table(run.rank_ids[0], "events", columns=["ts"]).num_rows, "analyses_s": total, "per_analysis_s": times,
                      "rss_before_mb": rss0 / 1024, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "skipped": {n: r.skipped for n, r in res.items() if r.skipped}}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--ops", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/rankscope-bench-cache"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child)
        return
    sys.path.insert(0, str(ROOT))
    a.cache.mkdir(parents=True, exist_ok=True)
    import platform

    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d')}; ingest with --jobs {a.jobs}; {a.steps} steps x {a.ops} ops per rank\n")
    print("| ranks | events/rank | ingest (s) | analyses (s) | slowest analyses (s) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    for n in a.ranks:
        path, ingest = ensure(a.cache, n, a.steps, a.ops, a.jobs)
        out = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True, text=True,
                             check=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        slow = sorted(r["per_analysis_s"].items(), key=lambda kv: -kv[1])[:4]
        print(f"| {n} | {r['events_rank0']} | {ingest:.1f} | {r['analyses_s']:.2f} | "
              + ", ".join(f"{k} {v:.2f}" for k, v in slow) + f" | {r['peak_rss_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
