"""Analyze a run: per-rank × per-step breakdown and the straggler verdict.

Reads every rank (in parallel, cached as Parquet under RUN/analysis/cache so a second run only
reads the cache), runs every registered analysis and prints a per-rank table.

Missing and damaged ranks (unreadable, truncated, gzip CRC, MANIFEST.json sha256 mismatch) are named
first, each with its reason; the ranks that are there are analyzed, and the straggler verdict never
uses a damaged rank. --strict exits 1 instead. A bad value in a file drops only that field or event,
with one warning line.
"""
from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from rankscope.commands import common
from rankscope.commands.common import add_run_arguments, apply_limits, load_and_analyze, print_summary

if TYPE_CHECKING:
    from rankscope.analysis.base import Result
    from rankscope.model.run import Run

HELP = "analyze a run and print the per-rank breakdown and straggler verdict"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
    p.add_argument("--json", action="store_true", help="print a machine-readable summary to stdout")
    p.add_argument("--export", choices=("csv", "json", "parquet"),
                   help="write every analysis table (and Ascend-compatible cluster files) in this format")
    p.add_argument("--export-dir", default=None,
                   help="where --export writes (default: RUN/analysis/export, or ./rankscope-export)")


def summary_json(run: Run, results: dict[str, Result]) -> dict[str, Any]:
    """The run and every analysis's summary and findings, as JSON-ready dicts (``--json``)."""
    return {"coverage": run.coverage(), "run": run.to_json(), "analyses": {
        n: {"skipped": r.skipped, "summary": r.summary, "findings": [f.to_json() for f in r.findings]}
        for n, r in results.items()}}


def run(args: argparse.Namespace) -> int:
    apply_limits(args)
    r, results = load_and_analyze(args.run, args.jobs, True, args.clock_align, args.strict)
    if getattr(args, "export", None):
        _export(args, r, results)
    if args.json:
        common.out.file.write(json.dumps(summary_json(r, results), default=str, indent=1) + "\n")
    else:
        print_summary(r, results)
    return 0


def _export(args: argparse.Namespace, r: Run, results: dict[str, Result]) -> None:
    from pathlib import Path

    from rankscope.commands.common import console
    from rankscope.render.export import export

    run_dir = Path(args.run)
    target = args.export_dir or (run_dir / "analysis" / "export" if run_dir.is_dir() else Path("rankscope-export"))
    paths = export(r, results, args.export, target)
    console.print(f"exported {len(paths)} files to {target}", highlight=False)
