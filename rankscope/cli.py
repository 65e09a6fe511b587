"""The ``rankscope`` command: a thin layer of verbs. Only the CLI prints and exits.

Each verb lives in its own module (``VERBS`` below) exposing ``HELP``, ``add_arguments(p)`` and
``run(args) -> int``. Exit codes: 0 ok, 1 failure (one clear line; traceback with --debug),
2 usage error.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Sequence

VERBS: dict[str, str] = {
    "demo": "rankscope.commands.demo",
    "analyze": "rankscope.commands.analyze",
    "report": "rankscope.commands.report",
    "version": "rankscope.commands.version",
    "synth": "rankscope.commands.synth",
    "inspect": "rankscope.commands.inspect",
    "timeline": "rankscope.commands.timeline",
    "diff": "rankscope.commands.diff",
    "serve": "rankscope.commands.serve",
    "upload": "rankscope.commands.upload",
    "trigger": "rankscope.commands.trigger",
    "gather": "rankscope.commands.gather",
    "hang": "rankscope.commands.hang",
    "watch": "rankscope.commands.watch",
}

_ENV_OPTIONS = ("RANKSCOPE_MAX_JSON_BYTES", "RANKSCOPE_CLOCK_ALIGN", "RANKSCOPE_DASK")

EPILOG = """examples:
  rankscope demo                       profile a real 4-rank DDP job on this machine and diagnose it
  rankscope demo --slow-rank 2 --slow-kind data
  rankscope analyze RUN                per-rank breakdown and straggler verdict of a run directory
  rankscope report RUN -o report.html  self-contained HTML report (--baseline RUN_B adds a diff view)
  rankscope analyze RUN --export csv   every table as CSV (+ Ascend cluster_*.csv/json files)
  rankscope timeline RUN -o merged.pftrace   one clock-aligned multi-rank timeline for Perfetto
  rankscope diff RUN_A RUN_B           what changed between two runs
  rankscope serve DIR                  local web UI over the runs under DIR (127.0.0.1)
  rankscope synth OUT --ranks 64       a synthetic cluster of realistic traces (tests, benchmarks)
  rankscope trigger RUN --steps 3      capture 3 steps of a running job now
  rankscope upload --resume SPOOL      finish uploads that a killed rank left in its spool
  rankscope hang FR_DUMP_DIR           which rank never joined which collective (Flight Recorder dumps)
  rankscope watch RUN                  follow a running job's live straggler signal (RUN/live.jsonl)
"""


def _verb_of(argv: Sequence[str]) -> str | None:
    """The verb ``argv`` names (its first word that is no option: the only top-level options are flags), or None."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in VERBS else None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of every verb; with ``argv`` naming a verb, only that verb's module is imported (the others
    are listed by name): each verb's imports cost memory for the whole run (peak RSS, issue 26)."""
    chosen = _verb_of(argv) if argv is not None else None
    p = argparse.ArgumentParser(prog="rankscope", description="Profile PyTorch distributed training on every "
                                "rank and turn the per-rank traces into one diagnosis.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    for name, mod in VERBS.items():
        if chosen is not None and name != chosen:
            sub.add_parser(name)
            continue
        m = importlib.import_module(mod)
        sp = sub.add_parser(name, help=m.HELP, description=(m.__doc__ or m.HELP).strip(),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        sp.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        m.add_arguments(sp)
        sp.set_defaults(_module=m)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if not getattr(args, "verb", None):
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from rankscope.commands.common import ALLOCATOR_ENV, lean_allocators
    from rankscope.errors import RankscopeError, safe

    # Verbs pass options to ingest workers through the environment (--max-inflated-size,
    # --no-clock-align, --dask); put it back afterwards so that an in-process caller (tests, notebooks) is unchanged.
    saved = {k: os.environ.get(k) for k in (*_ENV_OPTIONS, *ALLOCATOR_ENV)}
    lean_allocators()  # before pyarrow and polars load (a fresh process): peak RSS, issue 26
    if getattr(args, "dask", None):  # read by rankscope.model.run.load_run, whichever verb loads runs
        os.environ["RANKSCOPE_DASK"] = args.dask
    try:
        return int(args._module.run(args) or 0)
    except RankscopeError as exc:
        if args.debug:
            raise
        print(f"rankscope: error: {safe(exc)}", file=sys.stderr)
        return 1
    except (OSError, MemoryError, RecursionError) as exc:  # a file system or memory problem: one line
        if args.debug:
            raise
        where = getattr(exc, "filename", None)
        what = getattr(exc, "strerror", None) or exc.__class__.__name__
        print(f"rankscope: error: {safe(where) + ': ' if where else ''}{safe(what)} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("rankscope: interrupted", file=sys.stderr)
        return 130
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    sys.exit(main())
