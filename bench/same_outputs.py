"""Two source trees, the same runs: are the verdicts and exported tables identical? (issue 24's check)

Each run is copied (without its cache) and analyzed by each tree as a subprocess with that tree first on
``PYTHONPATH``: ``rankscope analyze RUN --json`` compared key by key, ``--export csv`` file by file, floats
to 1e-9 relative (polars' multithreaded sums differ in their last digits between two runs of one tree).
Timings and the run's own path are left out. One line per run; exit 1 when anything differs.

    git worktree add /tmp/rs-before <commit>
    python bench/same_outputs.py /tmp/rs-before . RUN [RUN ...]
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SKIP = ("seconds", "elapsed_s", "wall_s", "created_ns")


def analyze(tree: Path, run: Path, tmp: Path) -> tuple[Any, dict[str, str], Path, str]:
    d = tmp / f"{tree.resolve().name}-{run.name}"
    shutil.copytree(run, d, ignore=shutil.ignore_patterns("analysis", "report.html"))
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    cli = [sys.executable, "-m", "rankscope.cli", "analyze", str(d), "-j", "1"]
    out = subprocess.run(cli + ["--json"], env=env, capture_output=True, text=True)
    exp = tmp / f"exp-{d.name}"
    subprocess.run(cli + ["--export", "csv", "--export-dir", str(exp)], env=env, capture_output=True, text=True)
    try:
        doc = json.loads(out.stdout)
    except ValueError:
        doc = {"_error": out.stdout[-500:] + out.stderr[-500:]}
    files = {str(f.relative_to(exp)): hashlib.sha256(f.read_bytes()).hexdigest()
             for f in sorted(exp.rglob("*")) if f.is_file()} if exp.exists() else {}
    return doc, files, exp, str(d)


def close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and (isinstance(a, float) or isinstance(b, float)):
        return abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-300) or (a != a and b != b)
    return bool(a == b)


def cells(line: str) -> list[Any]:
    out: list[Any] = []
    for x in line.split(","):
        try:
            out.append(float(x))
        except ValueError:
            out.append(x)
    return out


def close_files(a: Path, b: Path) -> bool:
    if not (a.exists() and b.exists()):
        return False
    if a.suffix == ".json":
        return close(json.loads(a.read_text()), json.loads(b.read_text()))
    if a.suffix == ".csv":
        ra, rb = sorted(a.read_text().splitlines()), sorted(b.read_text().splitlines())
        return len(ra) == len(rb) and all(close(cells(x), cells(y)) for x, y in zip(ra, rb))
    return False


def scrub(x: Any, path: str) -> Any:
    if isinstance(x, dict):
        return {k: scrub(v, path) for k, v in x.items() if k not in SKIP}
    if isinstance(x, list):
        return [scrub(v, path) for v in x]
    return x.replace(path, "RUN") if isinstance(x, str) else x


def main() -> int:
    before, after, runs = Path(sys.argv[1]), Path(sys.argv[2]), [Path(p) for p in sys.argv[3:]]
    bad = 0
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for run in runs:
            (db, fb, eb, pb), (da, fa, ea, pa) = analyze(before, run, tmp), analyze(after, run, tmp)
            ja, jb = scrub(da, pa), scrub(db, pb)
            an_a, an_b = ja.get("analyses", {}), jb.get("analyses", {})
            diffs = sorted(k for k in set(an_a) | set(an_b) if not close(an_a.get(k), an_b.get(k)))
            other = sorted(k for k in set(ja) | set(jb) if k not in ("analyses", "run") and not close(ja.get(k), jb.get(k)))
            fd = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k) and not close_files(eb / k, ea / k))
            bad += bool(diffs or other or fd)
            print(f"{run.name}: analyses {len(an_a)} vs {len(an_b)}; differing analyses {diffs}; other keys {other}; "
                  f"export files {len(fa)} vs {len(fb)}, differing {fd[:8]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
