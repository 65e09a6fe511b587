"""``rankscope trigger RUN --steps N``: ask a running job to capture a window now."""
from __future__ import annotations

import argparse

from rankscope.intlist import parse_int_list

HELP = "ask a running job (profiled with rankscope.profile) to capture N steps now"


def _ranks(text: str) -> list[int]:
    try:
        return parse_int_list(text)
    except ValueError as exc:  # argparse shows ArgumentTypeError's message, not ValueError's
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="run directory or fsspec URL the job writes to")
    p.add_argument("--steps", type=int, required=True, help="steps to record")
    p.add_argument("--warmup", type=int, default=1, help="warm-up steps before recording (default 1)")
    p.add_argument("--ranks", type=_ranks, default=None, help="ranks to capture, e.g. 0-3,8 (default all)")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankscope.collect.trigger import write_request
    from rankscope.errors import RankscopeError

    if args.steps < 1 or args.warmup < 0:
        raise RankscopeError("trigger: --steps must be >= 1 and --warmup >= 0")
    rid, path = write_request(args.run, args.steps, args.warmup, args.ranks)
    Console().print(f"trigger {rid} written to {path}; ranks start within ~1 s plus a few steps")
    return 0
