"""``rankscope upload --resume SPOOL``: finish uploads a rank left in its local spool."""
from __future__ import annotations

import argparse

from rankscope.errors import RankscopeError

HELP = "finish uploading spooled traces to the run directory (after a crash or a storage outage)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--resume", metavar="SPOOL", required=True,
                   help="a rank's spool directory, or a directory holding several (searched recursively)")
    p.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds per spool")
    p.add_argument("--no-verify", action="store_true", help="skip re-reading uploaded files to check sha256")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rankscope.store.spool import find_spools
    from rankscope.store.uploader import resume

    con = Console()
    spools = find_spools(args.resume)
    if not spools:
        raise RankscopeError(f"{args.resume}: no rankscope spool found (no spool.json below it); "
                             "pass the spool directory the warning named")
    failed = 0
    for sp in spools:
        res = resume(sp, timeout_s=args.timeout, verify=not args.no_verify)
        if res.left or res.bad:
            failed += 1
            why = res.error or "; ".join(res.bad)
            con.print(f"[red]rank {res.rank}[/]: {res.left} file(s) still in {res.spool} ({why})")
        else:
            con.print(f"rank {res.rank}: uploaded {res.uploaded} file(s) to {res.url}; "
                      f"{res.verified} checksum(s) verified")
    return 1 if failed else 0
