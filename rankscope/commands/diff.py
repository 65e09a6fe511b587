"""Compare a run with a baseline run: what changed, on which rank, and which operators explain it.

Per rank and step: breakdown deltas (X, XBase, XDiff); per operator and kernel: time per step,
mean over ranks with its spread (min..max), deltas; per collective (op, group): calls, bytes and
time deltas. Steps are paired by position (i-th profiled step with the baseline's i-th).

examples:
  rankscope diff RUN_A RUN_B
  rankscope diff RUN_A RUN_B --json > diff.json
  rankscope report RUN_A --baseline RUN_B      (the same comparison as a report view)
"""
from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING

from rankscope.commands.common import console, load_and_analyze, out
from rankscope.errors import safe

if TYPE_CHECKING:
    from rankscope.analysis.base import Result
    from rankscope.model.run import Run

HELP = "compare a run with a baseline run (breakdown, operator, kernel and collective deltas)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN_A", help="the run to look at")
    p.add_argument("baseline", metavar="RUN_B", help="the baseline it is compared with")
    p.add_argument("--json", action="store_true", help="print the diff as JSON to stdout")
    p.add_argument("--top", type=int, default=15, help="rows per table in the terminal (default 15)")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1, help="worker processes for ingest")
    p.add_argument("--allow-missing-ranks", action="store_true",
                   help="accepted for old scripts; the default now (the ranks that are there are compared)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a rank of either run is missing or damaged")


def compute(run_path: str, base_path: str, jobs: int, allow_missing: bool = True, strict: bool = False
            ) -> tuple[Run, dict[str, Result], Result]:
    """Load and analyze both runs; return (run, results, diff result)."""
    from rankscope.analysis.compare.diff import run_diff

    a, ra = load_and_analyze(run_path, jobs, allow_missing, strict=strict)
    b, rb = load_and_analyze(base_path, jobs, allow_missing, strict=strict)
    d = run_diff(a, ra, b, rb)
    d.summary["coverage"] = {"run": a.coverage(), "baseline": b.coverage()}  # named first by both outputs
    return a, ra, d


def run(args: argparse.Namespace) -> int:
    from rankscope.render.diff import terminal_tables, to_json

    _, _, d = compute(args.run, args.baseline, args.jobs, True, args.strict)
    if args.json:
        out.file.write(json.dumps({"coverage": d.summary["coverage"], **to_json(d)}, default=str, indent=1) + "\n")
        return 0
    for which, cov in d.summary["coverage"].items():
        for m in cov["missing"][:8]:
            out.print(f"{which}: missing rank {m['rank']} ({safe(m['why'])})", highlight=False, markup=False, soft_wrap=True)
        for m in cov["damaged"]:
            out.print(f"{which}: damaged rank {m['rank']} ({safe(m['why'])})", highlight=False, markup=False, soft_wrap=True)
    out.print(f"[bold]{d.summary['run']}[/] vs baseline [bold]{d.summary['baseline']}[/]", highlight=False)
    for f in d.findings:
        out.print(f"• {f.title}", highlight=False)
    for t in terminal_tables(d, args.top):
        out.print(t)
    return 0
