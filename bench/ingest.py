"""Ingest benchmark: rankscope vs Holistic Trace Analysis (HTA), side by side, in one run.

For each input it runs, each in a fresh process pinned to one core, ``--repeats`` times:
  floor      gunzip + orjson.loads of every file (the parse floor)
  rankscope  load_run(jobs=1) with an empty cache + HTA-compatible temporal breakdown per rank
  cached     the same with the Parquet cache already there (re-analysis)
  hta        TraceAnalysis(trace_dir=...) + get_temporal_breakdown(visualize=False)
and reports median wall time of the timed section and the process's peak RSS (wait4 ru_maxrss).
HTA (``holistictraceanalysis`` from PyPI) is installed into its own venv under .bench/ (git-ignored).

usage: .venv/bin/python bench/ingest.py [--repeats 3] [--ranks 8,64] [--no-hta] [--write]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data" / "hta"
HTA_VENV = ROOT / ".bench" / "hta-venv"
SHARED_INPUTS = ["df_index_resolver", "trace_filter", "nccl_parser_config", "negative_queue_length_values_check"]

CHILD = {
    "floor": """
import gzip, orjson, time, pathlib, sys
files = [p for p in sorted(pathlib.Path(sys.argv[1]).rglob('*.json*')) if 'analysis' not in p.parts
         and p.name != 'synth_truth.json' and p.name != 'meta.json' and p.name != 'run.json']
import numpy
t0 = t = time.perf_counter()
for f in files:
    b = f.read_bytes()
    orjson.loads(gzip.decompress(b) if b[:2] == b'\\x1f\\x8b' else b)
print(0.0, time.perf_counter() - t)
""",
    "rankscope": """
import time, sys
t0 = time.perf_counter()
from rankscope.model.run import load_run
from rankscope.analysis.compat.hta import temporal
import pyarrow, pyarrow.parquet, pyarrow.compute, numpy, msgspec
t = time.perf_counter()
run = load_run(sys.argv[1], jobs=1, allow_missing_ranks=True)
for r in run.rank_ids:
    temporal(run, r)
print(t - t0, time.perf_counter() - t)
""",
    "hta": """
import time, sys, logging
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
import json, pathlib
m = pathlib.Path(sys.argv[1], "ranks.map")  # explicit rank -> file, see flat_view
files = {int(k): v for k, v in json.loads(m.read_text()).items()} if m.exists() else None
a = TraceAnalysis(trace_files=files, trace_dir=sys.argv[1])
a.get_temporal_breakdown(visualize=False)
print(t - t0, time.perf_counter() - t)
""",
}


def ensure_hta() -> Path | None:
    """The HTA venv's python, installing holistictraceanalysis there on first use."""
    py = HTA_VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
    if subprocess.run([str(py), "-c", "import hta"], capture_output=True).returncode != 0:
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "holistictraceanalysis"])
        if r.returncode != 0:
            return None
    return py


def run_child(python: str, what: str, path: Path) -> tuple[float, float, float]:
    """(import seconds, work seconds, peak RSS MB): times from the child's stdout, RSS from wait4."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", ARROW_NUM_THREADS="1",
               POLARS_MAX_THREADS="1")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.sched_setaffinity(0, {0})
        os.dup2(w, 1)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        os.close(r)
        os.execve(python, [python, "-c", CHILD[what], str(path)], env)
    os.close(w)
    with os.fdopen(r) as fh:
        out = fh.read()
    _, status, ru = os.wait4(pid, 0)
    if status != 0 or not out.strip():
        raise RuntimeError(f"{what} on {path} failed (status {status}); run it by hand to see why")
    imp, work = out.strip().splitlines()[-1].split()
    return float(imp), float(work), ru.ru_maxrss / 1024


def clear_cache(path: Path) -> None:
    shutil.rmtree(path / "analysis", ignore_errors=True)
    shutil.rmtree(os.environ["RANKSCOPE_CACHE"], ignore_errors=True)


def flat_view(path: Path) -> Path:
    """HTA reads trace files from one folder: links to a run directory's per-rank traces."""
    flat = path.parent / (path.name + "_flat")
    if not flat.exists():
        flat.mkdir()
        ranks = {}
        for f in trace_files(path):
            (flat / f.name).symlink_to(f)
            ranks[int(f.parent.name)] = f.name
        # HTA finds a file's rank with a regex that misses compact JSON ("rank":3): without this
        # map it files every synthetic rank as rank 0 and silently keeps one of them.
        (flat / "ranks.map").write_text(json.dumps(ranks))
    return flat


def bench_one(name: str, path: Path, repeats: int, hta_py: Path | None) -> dict[str, object]:
    row: dict[str, object] = {"input": name, "json_mb": round(json_mb(path), 1),
                              "ranks": sum(1 for _ in trace_files(path))}
    tools = [w for w in ("floor", "rankscope", "cached", "hta") if w != "hta" or hta_py is not None]
    got: dict[str, tuple[list[float], list[float], list[float]]] = {w: ([], [], []) for w in tools}
    for _ in range(repeats):  # round-robin, so that every tool sees the same load on a shared machine
        for what in tools:
            if what == "rankscope":
                clear_cache(path)
            py = str(hta_py) if what == "hta" else sys.executable
            src = flat_view(path) if what == "hta" and (path / "ranks").is_dir() else path
            for acc, v in zip(got[what], run_child(py, "rankscope" if what == "cached" else what, src)):
                acc.append(v)
    if "hta" in got:  # ratio per round (same load for both), then the median over rounds
        row["paired"] = round(statistics.median(h / r for h, r in zip(got["hta"][1], got["rankscope"][1])), 1)
    for what in tools:
        imps, secs, rss = got[what]
        row[f"{what}_s"] = round(statistics.median(secs), 3)
        row[f"{what}_import_s"] = round(statistics.median(imps), 3)
        row[f"{what}_rss_mb"] = round(statistics.median(rss), 1)
        print(f"  {name:<36} {what:<10} {row[f'{what}_s']:>8.3f} s (+{row[f'{what}_import_s']:.2f} s imports) "
              f"{row[f'{what}_rss_mb']:>8.1f} MB", flush=True)
    return row


def trace_files(path: Path):  # type: ignore[no-untyped-def]
    skip = {"synth_truth.json", "meta.json", "run.json", "MANIFEST.json"}
    return (p for p in sorted(path.rglob("*.json*")) if "analysis" not in p.parts and p.name not in skip)


def json_mb(path: Path) -> float:
    import gzip

    total = 0
    for f in trace_files(path):
        b = f.read_bytes()
        total += len(gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b)
    return total / 1e6


def inputs(work: Path, ranks: list[int]) -> list[tuple[str, Path]]:
    """Copies of the shared traces (the cache goes next to them) and synthetic clusters."""
    out = []
    for name in SHARED_INPUTS:
        src = SHARED / name
        if src.is_dir():
            dst = work / name
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("analysis"))
            for d in [dst, *dst.rglob("*")]:  # the shared data is read-only; its cache goes next to the copy
                d.chmod(d.stat().st_mode | 0o200)
            out.append((name, dst))
    try:
        from rankscope.synth import generate
    except ImportError:
        print("rankscope.synth.generate not available: synthetic clusters skipped")
        return out
    for n in ranks:
        dst = work / f"synth_{n}"
        t = time.perf_counter()
        generate(dst, ranks=n, steps=5, seed=1, jobs=os.cpu_count() or 1)
        print(f"generated synth_{n} in {time.perf_counter() - t:.1f} s")
        out.append((f"synth {n} ranks", dst))
    return out


def table(rows: list[dict[str, object]]) -> str:
    cols = ["input", "ranks", "json_mb", "floor_s", "rankscope_s", "cached_s", "hta_s",
            "rankscope_import_s", "hta_import_s", "rankscope_rss_mb", "cached_rss_mb", "hta_rss_mb"]
    extra = ["HTA/rankscope", "HTA/rankscope paired", "HTA/cached", "rankscope/floor", "RSS rankscope/HTA"]
    lines = ["| " + " | ".join(cols + extra) + " |", "|" + "---|" * (len(cols) + len(extra))]
    for r in rows:
        hta = "hta_s" in r
        ratios = [f"{r['hta_s'] / r['rankscope_s']:.1f}x" if hta else "-", f"{r['paired']}x" if hta else "-",
                  f"{r['hta_s'] / r['cached_s']:.0f}x" if hta else "-",
                  f"{r['rankscope_s'] / r['floor_s']:.2f}x",
                  f"{r['rankscope_rss_mb'] / r['hta_rss_mb']:.0%}" if hta else "-"]
        lines.append("| " + " | ".join(str(r.get(c, "-")) for c in cols + []) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def machine_note(load_before: tuple[float, float, float]) -> str:
    busy = "quiet" if load_before[0] < 0.5 else (
        f"NOT quiet: 1-min load average {load_before[0]:.2f} before the run (other processes were running)")
    return (f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d %H:%M')}; every measurement pinned to one core; {busy}.")


def write_results(text: str) -> None:
    res = ROOT / "bench" / "RESULTS.md"
    old = res.read_text() if res.exists() else "# Benchmark results\n"
    start = old.find("\n## ingest\n")
    if start >= 0:
        end = old.find("\n## ", start + 5)
        old = old[:start] + (old[end:] if end >= 0 else "\n")
    res.write_text(old.rstrip("\n") + "\n\n" + text.strip() + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ranks", default="8,64", help="synthetic cluster sizes, comma separated ('' for none)")
    ap.add_argument("--only", default="", help="comma separated input names to run (default: all)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md (## ingest)")
    a = ap.parse_args()
    load = os.getloadavg()
    hta_py = None if a.no_hta else ensure_hta()
    work = Path(tempfile.mkdtemp(prefix="rankscope-bench-"))
    os.environ["RANKSCOPE_CACHE"] = str(work / "fallback-cache")  # children inherit it
    try:
        ins = inputs(work, [int(x) for x in a.ranks.split(",") if x])
        if a.only:
            ins = [(n, p) for n, p in ins if n in a.only.split(",")]
        rows = [bench_one(n, p, a.repeats, hta_py) for n, p in ins]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tab = table(rows)
    print(tab)
    cmd = "`.venv/bin/python bench/ingest.py " + " ".join(sys.argv[1:]) + "`"
    text = (f"## ingest\n\nCommand: {cmd}  \n{machine_note(load)}  \n"
            f"Seconds of load + temporal breakdown of every rank after the imports (`*_import_s`: the imports), "
            f"median of {a.repeats} rounds (each round runs every tool once, so all see the same load; "
            f"`paired` = median over rounds of that round's HTA/rankscope); peak RSS (MB) of the whole "
            f"child process (wait4). `floor` = gunzip + "
            f"orjson.loads of the same files; `cached` = rankscope again with the Parquet cache present.\n\n"
            f"{tab}\n")
    if a.write:
        write_results(text)
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
