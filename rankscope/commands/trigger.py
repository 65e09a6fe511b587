"""``rankscope trigger RUN --steps N``: ask a running job to capture a window now.
``rankscope trigger RUN --dump``: ask every rank to dump its collective recorder now (a hung job too:
the dump runs on rankscope's own thread), then ``rankscope hang RUN``.

examples:
  rankscope trigger runs/exp1 --steps 5
  rankscope trigger runs/exp1 --dump            (the job runs with comms=True or RANKSCOPE_COMMS=1)
  rankscope trigger runs/exp1 --steps 3 --dump --ranks 0-7
"""
from __future__ import annotations

import argparse

from rankscope.intlist import parse_int_list

HELP = "ask a running job (profiled with rankscope.profile) to capture N steps now, or to dump its collectives"


def _ranks(text: str) -> list[int]:
    try:
        return parse_int_list(text)
    except ValueError as exc:  # argparse shows ArgumentTypeError's message, not ValueError's
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or fsspec URL the job writes to")
    p.add_argument("--steps", type=int, default=0, help="steps to record (needed unless --dump)")
    p.add_argument("--dump", action="store_true", help="every rank dumps its collective recorder to the run now "
                                                       "(read it with `rankscope hang RUN`)")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps before recording (default 1)")
    p.add_argument("--ranks", type=_ranks, default=None, help="ranks to capture, e.g. 0-3,8 (default all)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankscope.collect.trigger import write_request
    from rankscope.errors import RankscopeError

    if (args.steps < 1 and not args.dump) or args.steps < 0 or args.warmup < 0:
        raise RankscopeError("trigger: give --steps N (N >= 1) to capture, --dump to dump the collectives, or both; "
                             "--warmup >= 0")
    rid, path = write_request(args.run, args.steps, args.warmup, args.ranks, dump=args.dump)
    what = " and ".join(x for x in (f"capture {args.steps} steps" if args.steps else "",
                                    "dump collectives" if args.dump else "") if x)
    Console().print(f"trigger {rid} ({what}) written to {path}; ranks see it within ~1 s"
                    + (" plus a few steps" if args.steps else "") + (f"; then: rankscope hang {args.run}"
                                                                     if args.dump else ""))
    return 0
