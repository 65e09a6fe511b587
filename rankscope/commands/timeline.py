"""Write one merged multi-rank timeline: Perfetto protobuf (default) or Chrome trace JSON.

One process per rank (host alias and rank in its name), clock-aligned with the recorded offsets,
matched collectives linked across ranks by flow events, a memory counter per rank. Open the
.pftrace file in ui.perfetto.dev (it loads locally in the browser; nothing is uploaded).
Keep big runs loadable with --steps and --ranks.

examples:
  rankscope timeline RUN -o merged.pftrace
  rankscope timeline RUN --format json -o merged.json --steps 3-4 --ranks 0-7
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from rankscope.commands.common import add_run_arguments, apply_limits, console, default_output, ensure_output_dir
from rankscope.errors import safe

if TYPE_CHECKING:
    from rankscope.model.run import Run

HELP = "write a merged multi-rank timeline (Perfetto protobuf or Chrome JSON)"


def load_run_quiet(path: str, jobs: int, allow_missing: bool = True, strict: bool = False) -> Run:
    """Load a run (no analyses), printing what it covers and read problems as warnings."""
    from rankscope.commands.common import coverage_lines, warn
    from rankscope.errors import safe
    from rankscope.model.run import load_run

    with console.status(f"reading {escape(safe(path))}"):
        r = load_run(path, jobs=jobs, strict=strict)
    for line in coverage_lines(r) + r.problems:
        warn(line)
    return r


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_arguments(p)
    p.add_argument("-o", "--output", help="output file (default: RUN/merged.pftrace or RUN/merged.json)")
    p.add_argument("--format", choices=("perfetto", "json"), default=None,
                   help="perfetto protobuf (default) or Chrome trace JSON (default from the extension)")
    p.add_argument("--steps", help="only these steps, e.g. 3-5 or 3,7")
    p.add_argument("--ranks", help="only these ranks, e.g. 0-7 or 0,15")
    p.add_argument("--no-align", action="store_true",
                   help="use only the clock offsets recorded at collection (default: refine them with matched "
                        "collectives, as the clock analysis does)")


def run(args: argparse.Namespace) -> int:
    from rankscope.render.timeline import aligned_offsets, parse_ints, write_timeline

    fmt = args.format or ("json" if args.output and args.output.endswith((".json", ".json.gz")) else "perfetto")
    target = Path(args.output) if args.output else default_output(
        args.run, "merged.json" if fmt == "json" else "merged.pftrace")
    apply_limits(args)
    ensure_output_dir(str(target))
    r = load_run_quiet(args.run, args.jobs, True, args.strict)
    offsets = None if args.no_align else aligned_offsets(r)
    path = write_timeline(r, target, fmt=fmt, ranks=parse_ints(args.ranks, "--ranks"),
                          steps=parse_ints(args.steps, "--steps"), offsets=offsets)
    console.print(f"timeline: {escape(safe(path))} ({path.stat().st_size / 2**20:.1f} MiB)", highlight=False)
    return 0
