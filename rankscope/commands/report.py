"""Write a self-contained HTML report of a run (opens offline; no network at view time).

With --baseline RUN_B the report gets a diff view comparing the run with RUN_B.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rankscope.commands.common import (add_run_arguments, apply_limits, default_output, ensure_output_dir,
                                       load_and_analyze, print_summary)

HELP = "write the HTML report of a run"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
    p.add_argument("-o", "--output", help="output file (default: RUN/report.html)")
    p.add_argument("--baseline", metavar="RUN_B", help="add a diff view comparing the run with RUN_B")


def run(args: argparse.Namespace) -> int:
    from rankscope.render.html import render

    apply_limits(args)
    ensure_output_dir(args.output)
    r, results = load_and_analyze(args.run, args.jobs, True, args.clock_align, args.strict)
    diff = None
    if getattr(args, "baseline", None):
        from rankscope.analysis.compare.diff import run_diff

        b, rb = load_and_analyze(args.baseline, args.jobs, True, args.clock_align, args.strict)
        diff = run_diff(r, results, b, rb)
    target = Path(args.output) if args.output else default_output(args.run, "report.html")
    path = render(r, results, target, diff=diff)
    print_summary(r, results, str(path))
    return 0
