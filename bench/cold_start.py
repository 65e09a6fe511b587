"""Cold start of the CLI, side by side: ``rankscope --help`` and ``rankscope analyze`` of a cached one-rank
run, whole process, for two source trees (e.g. before and after a reshape), interleaved repeats, medians;
plus which heavy libraries each command imports (``python -X importtime``).

    python bench/cold_start.py --before /tmp/rs-before --after . [--trace DIR] [--repeats 9]

``--before`` is a checkout of another commit (``git worktree add /tmp/rs-before <commit>``); both trees run
with this interpreter, each put first on ``PYTHONPATH``. The run is a copy of ``--trace`` (default:
HTA's df_index_resolver trace) analyzed once first, so both then read only the Parquet cache (the cache
is rebuilt if a tree's format differs).
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("polars", "pyarrow", "numpy", "plotly", "torch", "rich", "pandas")


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _cmd(args: list[str], importtime: bool = False) -> list[str]:
    return [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "rankscope.cli", *args]


def _time(tree: Path, args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child; steadier than wall on a busy machine)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(_cmd(args), env=_env(tree), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def _heavy(tree: Path, args: list[str]) -> list[str]:
    err = subprocess.run(_cmd(args, importtime=True), env=_env(tree), capture_output=True, text=True).stderr
    tops = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    return [h for h in HEAVY if h in tops]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=ROOT)
    ap.add_argument("--trace", type=Path, default=ROOT.parent / "shared" / "data" / "hta" / "df_index_resolver")
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args()
    trees = {"before": a.before.resolve(), "after": a.after.resolve()}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name, tree in trees.items():
            runs[name] = Path(tmp) / name
            shutil.copytree(a.trace, runs[name])
            subprocess.run(_cmd(["analyze", str(runs[name])]), env=_env(tree), capture_output=True, check=False)
        cases = {"--help": lambda n: ["--help"], "analyze (cached)": lambda n: ["analyze", str(runs[n])]}
        print(f"load average {os.getloadavg()[0]:.1f}; {a.repeats} interleaved repeats; medians in seconds")
        for case, args in cases.items():
            times: dict[str, list[tuple[float, float]]] = {n: [] for n in trees}
            for _ in range(a.repeats):
                for n, tree in trees.items():
                    times[n].append(_time(tree, args(n)))
            b, f = (statistics.median(w for w, _ in times[n]) for n in ("before", "after"))
            bc, fc = (statistics.median(c for _, c in times[n]) for n in ("before", "after"))
            print(f"{case:18s} wall before {b:.3f}  after {f:.3f}  ratio {f / b:.2f} | CPU before {bc:.3f}  after {fc:.3f}  "
                  f"ratio {fc / bc:.2f}   "
                  f"heavy imports before {_heavy(trees['before'], args('before'))} "
                  f"after {_heavy(trees['after'], args('after'))}")


if __name__ == "__main__":
    main()
