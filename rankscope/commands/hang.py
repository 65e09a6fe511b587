"""Find the collective a hung job is stuck in, and desyncs between ranks, from per-rank dumps.

Reads PyTorch Flight Recorder dumps (the pickle files ``TORCH_FR_DUMP_TEMP_FILE`` writes, one per
rank, or their JSON form) from a directory and matches every rank's collectives by (process group,
sequence number): the first collective some ranks never joined, op / size / dtype mismatches (a rank
that skipped one), a collective every rank joined but some had not started or completed when the others
had (Flight Recorder on NCCL with ``TORCH_NCCL_ENABLE_TIMING=1``, rankscope's timed engine), and each
rank's last collective per group. The first line is the root cause (the problem whose missing or different
call explains the others); each consequence follows it, marked as one; then where every rank is.

    TORCH_FR_BUFFER_SIZE=2000 torchrun ... train.py      # record; dump on a hang or at will
    rankscope hang /tmp/fr_dumps                           # which rank is missing from which collective
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from rich.markup import escape

from rankscope.commands.common import console, out

HELP = "name the collective a hung job waits in, and desyncs between ranks (Flight Recorder dumps)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dumps", metavar="DIR", help="directory (or one file, or an fsspec URL prefix such as "
                                                "s3://bucket/job/fr) of per-rank Flight Recorder dumps")
    p.add_argument("--world-size", type=int, default=None, help="expected ranks, to name the ones that sent no dump")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")


def run(args: argparse.Namespace) -> int:
    from rankscope.analysis.hang import describe, diagnose
    from rankscope.analysis.hang.words import whereabouts
    from rankscope.errors import RankscopeError, TraceError, safe
    from rankscope.model.readers import frdump

    from rankscope.model.info import Kind, Problem, records

    dumps, said = [], []
    for f in frdump.find(args.dumps):
        try:
            dumps.append(frdump.read(f))
            said += dumps[-1].problems
        except TraceError as exc:
            said.append(Problem(str(exc), exc.kind, exc.path, exc.rank))
        except OSError as exc:
            said.append(Problem(f"{f}: cannot read ({exc.strerror or exc})", Kind.FILE_UNREADABLE, str(f)))
    for line in said:
        console.print(f"[yellow]warning:[/] {escape(safe(line))}", highlight=False, soft_wrap=True)
    if not dumps:
        raise RankscopeError(f"{safe(args.dumps)}: no Flight Recorder dump found (files named PREFIX<rank>, "
                             "pickle or JSON)")
    # a run directory holds several dumps per rank (comms.<n>-<reason>): the latest (highest n, read last) wins
    latest = {d.rank: d for d in dumps if d.path.rsplit("/", 1)[-1].startswith("comms.")}
    dumps = [d for d in dumps if not d.path.rsplit("/", 1)[-1].startswith("comms.") or latest[d.rank] is d]
    v = diagnose(dumps, args.world_size)
    if args.json:  # issues: each warning's kind, file, rank and count (model/info.Problem)
        out.file.write(json.dumps({**v.to_dict(), "issues": records(said)}, indent=1, default=str) + "\n")
        return 0
    mark = "✓ " if not v.problems else "⚠ " if v.problems[0].kind in ("behind", "pg_inconsistent") else "✖ "
    out.print(f"[bold]{mark}{safe(v.headline)}[/]", highlight=False, soft_wrap=True)
    for i, p in enumerate(v.problems[1:], 1):
        tag = f"consequence of #{p.consequence_of + 1}" if p.consequence_of is not None else f"#{i + 1}, also"
        out.print(f"  ↳ {tag}: {safe(describe(p, v.where))}", highlight=False, soft_wrap=True)
    if v.problems:
        for r, w in sorted(v.where.items()):
            extra = f", issued at {w.frame}" if w.state == "waiting" and w.frame else ""
            out.print(f"  rank {r} {safe(whereabouts(w))}{extra}", highlight=False, soft_wrap=True)
    for g in v.groups:
        last = ", ".join(f"{r}:#{s}" for r, s in sorted(g["last_seq"].items()))
        done = g.get("last_completed")
        tail = ("; last completed " + ", ".join(f"{r}:#{s}" if s is not None else f"{r}:none"
                                                for r, s in sorted(done.items()))) if done else ""
        out.print(f"  group {g['group']} ({g['desc'] or '-'}): last collective per rank {last}{tail}", highlight=False)
    return 0
