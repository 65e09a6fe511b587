"""Peak RSS of ``rankscope analyze DIR -j 1`` per commit (issue 26), side by side.

Each round runs every commit once (a git worktree each), in a fresh process pinned to one core, on a
fresh copy of the trace (cold cache), as bench/hta_depth.py does; whole-process peak RSS from wait4.
Prints one table row per commit: peak RSS median (range), wall and CPU seconds (medians).

usage: .venv/bin/python bench/peak_rss.py [--repeats 3] [--trace df_index_resolver] REV [REV ...]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hta_depth as H  # noqa: E402 - run_child, fresh, the ANALYZE command and the trace folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("revs", nargs="+", help="commits to compare (HEAD: the checked-out tree's commit)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--trace", default="df_index_resolver")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rankscope-peak-rss-"))
    trees = {r: work / f"tree{k}" for k, r in enumerate(a.revs)}
    got: dict[str, list[tuple[float, float, float]]] = {r: [] for r in a.revs}
    loads = []
    try:
        for r, t in trees.items():
            subprocess.run(["git", "worktree", "add", "-f", "--detach", str(t), r], cwd=H.ROOT, check=True,
                           capture_output=True)
        for _ in range(a.repeats):
            for r, t in trees.items():
                loads.append(os.getloadavg()[0])
                got[r].append(H.run_child(sys.executable, H.ANALYZE, H.fresh(H.SHARED / a.trace, work), t))
    finally:
        for t in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(t)], cwd=H.ROOT, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print("| commit | peak RSS MB, median (range) | wall s | CPU s |\n|---|---|---|---|")
    for r, xs in got.items():
        m = [x[1] for x in xs]
        print(f"| {r} | {statistics.median(m):.1f} ({min(m):.1f}-{max(m):.1f}) | "
              f"{statistics.median(x[0] for x in xs):.2f} | {statistics.median(x[2] for x in xs):.2f} |")
    print(f"\n{a.repeats} rounds, commits interleaved; 1-min load average before each run: median "
          f"{statistics.median(loads):.1f} (min {min(loads):.1f}, max {max(loads):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
