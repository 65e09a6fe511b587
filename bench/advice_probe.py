"""Print, per run, the compute-imbalance advice ("rank 2 computes 1.20x the other ranks' median per step") as the
"advice" analysis gives it: its severity, the rank, and its reading on the critical path where it has one
(``advice_path.path_saving``: the rank's what-if saving against its extra compute), beside the straggler verdict.
Run it with two trees (``PYTHONPATH=<worktree>``) to see what a change to the advice did on the same runs.

    .venv/bin/python bench/advice_probe.py /tmp/wl-sweep.json [--families fsdp-healthy,tpfsdp-healthy]
    .venv/bin/python bench/advice_probe.py RUN [RUN ...]

Reads bench/workloads.py's results file (``--keep``: its rows name each run's directory) or run directories, and
analyzes each run in this process (the ingest cache is kept). Runs without the advice print nothing; the last line
counts them.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bound_probe import runs  # noqa: E402  (the same reading of a results file)


def probe(run_dir: str) -> list[str]:
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    res = run_all(load_run(run_dir, jobs=1))
    verdict = str(res["straggler"].summary.get("verdict") or res["straggler"].skipped or "")
    out = []
    for f in res["advice"].findings:
        if f.kind != "advice.dp_imbalance":
            continue
        ev = f.evidence
        path = (f"path saving {ev['path_saving_ns'] / 1e6:.1f} ms of {ev['extra_compute_ns'] / 1e6:+.1f} ms extra compute"
                if "path_saving_ns" in ev else "no path reading")
        out.append(f"{f.severity.value} rank {f.ranks[0]} {float(ev.get('ratio') or 0):.2f}x; {path}; "
                   f"verdict: {verdict[:90]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="bench/workloads.py results files (.json) or run directories")
    ap.add_argument("--families", default="", help="comma list: only these families' runs")
    args = ap.parse_args()
    todo = runs(args.paths, {f for f in args.families.split(",") if f})
    hits = 0
    for name, run_dir in todo:
        if not (Path(run_dir) / "run.json").exists():
            print(f"{name}: run not kept ({run_dir})", flush=True)
            continue
        for line in probe(run_dir):
            hits += 1
            print(f"{name}: {line}", flush=True)
    print(f"{hits} compute-imbalance findings in {len(todo)} runs")


if __name__ == "__main__":
    main()
