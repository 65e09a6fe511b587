"""Show what rankscope finds in a trace file or run: ranks (and where each rank number came from),
steps, event counts by kind, time range and problems. Reads the Parquet cache when present, so a
second inspect of a large run takes a moment; never stops on missing ranks (it lists them).

examples:
  rankscope inspect RUN
  rankscope inspect rank-0.pt.trace.json.gz --json
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

HELP = "show ranks, steps, event counts, time range and problems of a trace file or run"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="FILE_OR_RUN", help="a trace file, a directory of traces or a run directory")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                   help="worker processes for a first ingest (default: all cores)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON to stdout")
    from rankscope.commands.common import size_arg

    p.add_argument("--max-inflated-size", type=size_arg, default=None, metavar="SIZE",
                   help="largest decompressed trace read, e.g. 16G (default 8G; also lifts the gzip inflation-ratio check)")


def summarize(run: Any) -> dict[str, Any]:
    """Per-rank facts from RankInfo plus two small column reads (steps, kind) per rank."""
    import pyarrow.compute as pc

    ranks = []
    for r in run.rank_ids:
        info = run.ranks[r]
        kinds = pc.value_counts(run.table(r, "events", columns=["kind"]).column("kind").combine_chunks()
                                .dictionary_decode()).to_pylist() if info.counts.get("events") else []
        steps = run.table(r, "steps", columns=["step", "complete"]).to_pydict()
        ranks.append({"rank": r, "source": info.rank_source, "files": len(info.files), "partial": info.partial,
                      "steps": steps["step"], "incomplete_steps": [s for s, c in zip(steps["step"],
                                                                                     steps["complete"]) if not c],
                      "events": {k["values"]: k["counts"] for k in kinds}, "counts": info.counts,
                      "time_range_ns": list(info.time_range) if info.time_range else None,
                      "world_size": info.world_size, "backend": info.backend})
    from rankscope.model.info import records

    return {"coverage": run.coverage(), "path": run.path, "run_id": run.run_id, "world_size": run.world_size,
            "missing": run.missing, "ranks": ranks, "problems": [str(p) for p in run.problems],
            "issues": records(run.problems)}  # each line's kind, rank, file and count, as ``analyze --json``


def _table(s: dict[str, Any]) -> Any:
    from rich.table import Table

    from rich.markup import escape

    from rankscope.errors import safe

    t = Table(title=f"{escape(safe(s['path']))}  (world size {s['world_size'] or '?'}, {len(s['ranks'])} ranks read)")
    for col in ("rank", "from", "steps", "events", "span (ms)", "collectives", "memory", "partial"):
        t.add_column(col, justify="left" if col == "from" else "right")
    for r in s["ranks"]:
        tr = r["time_range_ns"]
        steps = f"{r['steps'][0]}-{r['steps'][-1]}" if len(r["steps"]) > 1 else ",".join(map(str, r["steps"]))
        t.add_row(str(r["rank"]), r["source"], steps or "-", f"{sum(r['events'].values()):,}",
                  f"{(tr[1] - tr[0]) / 1e6:,.1f}" if tr else "-", f"{r['counts'].get('collectives', 0):,}",
                  f"{r['counts'].get('memory', 0):,}", "yes" if r["partial"] else "")
    return t


def _kinds_table(s: dict[str, Any]) -> Any:
    """Event counts by kind over all ranks (total, and the least / most on one rank)."""
    from rich.table import Table

    kinds = sorted({k for r in s["ranks"] for k in r["events"]})
    t = Table(title="events by kind")
    for col in ("kind", "total", "min per rank", "max per rank"):
        t.add_column(col, justify="left" if col == "kind" else "right")
    rows = [(k, [r["events"].get(k, 0) for r in s["ranks"]]) for k in kinds]
    for k, per in sorted(rows, key=lambda kv: -sum(kv[1])):
        t.add_row(k, f"{sum(per):,}", f"{min(per):,}", f"{max(per):,}")
    return t


def run(args: argparse.Namespace) -> int:
    from rankscope.commands.common import apply_limits, out, progress
    from rankscope.model.run import load_run

    apply_limits(args)
    with progress() as prog:
        task = prog.add_task("reading ranks", total=None)
        r = load_run(args.run, jobs=args.jobs, allow_missing_ranks=True,
                     progress=lambda done, total: prog.update(task, completed=done, total=total))
    s = summarize(r)
    if args.json:  # coverage first: what the numbers below do not cover
        out.file.write(json.dumps(s, indent=1) + "\n")
        return 0
    out.print(_table(s))
    if s["ranks"]:
        out.print(_kinds_table(s))
    if s["ranks"] and s["ranks"][0]["time_range_ns"]:
        lo = min(x["time_range_ns"][0] for x in s["ranks"] if x["time_range_ns"])
        hi = max(x["time_range_ns"][1] for x in s["ranks"] if x["time_range_ns"])
        out.print(f"time range: {lo} .. {hi} ns ({(hi - lo) / 1e6:,.1f} ms, each rank's own clock)")
    from rankscope.commands.common import coverage_lines, warn

    for line in coverage_lines(r):
        out.print(line, highlight=False, markup=False, soft_wrap=True)
    for p in s["problems"]:
        warn(p)
    return 0
