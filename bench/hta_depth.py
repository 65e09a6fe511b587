"""GPU analyses at HTA's depth (issue 26): what they cost in ``rankscope analyze``, side by side with HTA.

Each round runs every variant once, in a fresh process pinned to one core, on a fresh copy of the
trace (cold cache); whole-process wall time (fork to exit, imports included) and peak RSS (wait4):
  before     ``rankscope analyze DIR`` at the commit before issue 26 (a git worktree, --before REV)
  without    today's ``rankscope analyze DIR`` with the analyses of analysis/gpu/ left out of the registry
  with       today's ``rankscope analyze DIR`` (every analysis)
  hta        HTA 0.5.0: TraceAnalysis(trace_dir) + the same analyses (temporal, overlap, kernel breakdown,
             idle time, launch stats, queue length series / summary / full queue, memory bandwidth series /
             summary, GPU and CPU annotation breakdowns, kernels with annotations, aten op kernels,
             frequent kernel sequences of one operator, CUPTI counters), in .bench/hta-venv (pandas < 3)
Reports medians over rounds and the per-round ratios' medians (each round sees the same load).

usage: .venv/bin/python bench/hta_depth.py [--repeats 5] [--trace df_index_resolver] [--before REV] [--write]
"""
from __future__ import annotations

import argparse
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
HTA_PY = ROOT / ".bench" / "hta-venv" / "bin" / "python"
BEFORE = "a2b936d^"  # the commit before issue 26's first

ANALYZE = "from rankscope.cli import main; import sys; sys.exit(main(['analyze', sys.argv[1], '-j', '1']))"
# without issue 26's analyses: every one under analysis/gpu/ but the older kernels analysis
WITHOUT = ("import rankscope.analysis.registry as R; A = R.analyses(); [A.pop(n) for n in list(A) if "
           "A[n].run.__module__.startswith('rankscope.analysis.gpu.') and n != 'kernels']; " + ANALYZE)
HTA = """
import logging, sys, tempfile, warnings
warnings.filterwarnings('ignore'); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1]); r = ta.t.get_ranks()
ta.get_temporal_breakdown(visualize=False); ta.get_comm_comp_overlap(visualize=False)
ta.get_gpu_kernel_breakdown(visualize=False)
ta.get_idle_time_breakdown(ranks=r, visualize=False, show_idle_interval_stats=True)
ta.get_cuda_kernel_launch_stats(ranks=r, visualize=False)
q = ta.get_queue_length_time_series(ranks=r); ta.get_queue_length_summary(ranks=r)
ta.get_time_spent_blocked_on_full_queue(q)
ta.get_memory_bw_time_series(ranks=r); ta.get_memory_bw_summary(ranks=r)
ta.get_gpu_user_annotation_breakdown(visualize=False)
ta.get_gpu_user_annotation_breakdown(use_gpu_annotation=False, visualize=False)
for k in r: ta.get_gpu_kernels_with_user_annotations(rank=k)
ta.get_aten_op_kernels_and_delay(ranks=r)
ta.get_frequent_cuda_kernel_sequences(operator_name='aten::linear', output_dir=tempfile.mkdtemp(), rank=r[0],
                                      visualize=False)
ta.get_cupti_counter_data_with_operators(ranks=r)
"""


def run_child(python: str, code: str, path: Path, pythonpath: Path) -> tuple[float, float, float]:
    """(wall seconds of the whole process, peak RSS MB, CPU seconds: user + system)."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath), OMP_NUM_THREADS="1", ARROW_NUM_THREADS="1",
               POLARS_MAX_THREADS="1", RANKSCOPE_CACHE=str(path.parent / "fallback-cache"))
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.sched_setaffinity(0, {0})
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.chdir(str(pythonpath))
        os.execve(python, [python, "-c", code, str(path)], env)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise RuntimeError(f"{code[:60]}... on {path} failed (status {status}); run it by hand to see why")
    return wall, ru.ru_maxrss / 1024, ru.ru_utime + ru.ru_stime


def fresh(src: Path, work: Path) -> Path:
    """A new copy of the trace folder: no analysis cache (cold)."""
    dst = Path(tempfile.mkdtemp(dir=work)) / src.name
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("analysis"))
    return dst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--trace", default="df_index_resolver")
    ap.add_argument("--before", default=BEFORE, help="commit of the 'before' variant")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md (## hta_depth)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rankscope-hta-depth-"))
    tree = work / "before"
    subprocess.run(["git", "worktree", "add", "-f", "--detach", str(tree), a.before], cwd=ROOT, check=True,
                   capture_output=True)
    variants = {"before": (sys.executable, ANALYZE, tree), "without": (sys.executable, WITHOUT, ROOT),
                "with": (sys.executable, ANALYZE, ROOT)}
    if not a.no_hta and HTA_PY.exists():
        variants["hta"] = (str(HTA_PY), HTA, ROOT)
    got: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
    loads = []
    try:
        for _ in range(a.repeats):
            for v, (py, code, path) in variants.items():
                loads.append(os.getloadavg()[0])
                got[v].append(run_child(py, code, fresh(SHARED / a.trace, work), path))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    text = report(a, got, loads)
    print(text)
    if a.write:
        write_results(text)
    return 0


def report(a: argparse.Namespace, got: dict[str, list[tuple[float, float, float]]], loads: list[float]) -> str:
    med = {v: [statistics.median(x[i] for x in xs) for i in range(3)] for v, xs in got.items()}
    paired = lambda x, y, i=0: statistics.median(p[i] / q[i] for p, q in zip(got[x], got[y]))  # noqa: E731
    lines = ["| variant | wall s (median) | CPU s (median) | peak RSS MB (median) | walls s |", "|---|---|---|---|---|"]
    for v, (w, m, c) in med.items():
        lines.append(f"| {v} | {w:.2f} | {c:.2f} | {m:.0f} | {', '.join(f'{x[0]:.2f}' for x in got[v])} |")
    lines.append("")
    lines.append(f"- GPU analyses' cost, paired per round (median): with / without = {paired('with', 'without'):.2f} "
                 f"wall, {paired('with', 'without', 2):.2f} CPU; with / before = {paired('with', 'before'):.2f} wall, "
                 f"{paired('with', 'before', 2):.2f} CPU")
    if "hta" in got:
        lines.append(f"- HTA load + the same analyses / rankscope analyze (with) = {paired('hta', 'with'):.1f}x wall, "
                     f"{paired('hta', 'with', 2):.1f}x CPU; peak RSS rankscope / HTA = {med['with'][1] / med['hta'][1]:.0%}")
    cmd = "`.venv/bin/python bench/hta_depth.py " + " ".join(sys.argv[1:]) + "`"
    note = (f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d %H:%M')}; every process pinned to one core; 1-min load average before "
            f"each run: median {statistics.median(loads):.1f} (min {min(loads):.1f}, max {max(loads):.1f}).")
    return (f"## hta_depth\n\nCommand: {cmd}  \n{note}  \nInput: {a.trace} (HTA's test data), cold cache each "
            f"run; {a.repeats} rounds, variants interleaved; 'before' = {a.before}.\n\n" + "\n".join(lines) + "\n")


def write_results(text: str) -> None:
    res = ROOT / "bench" / "RESULTS.md"
    old = res.read_text() if res.exists() else "# Benchmark results\n"
    start = old.find("\n## hta_depth\n")
    if start >= 0:
        end = old.find("\n## ", start + 5)
        old = old[:start] + (old[end:] if end >= 0 else "\n")
    res.write_text(old.rstrip("\n") + "\n\n" + text.strip() + "\n")


if __name__ == "__main__":
    sys.exit(main())
