"""Serve a local, read-only web UI over the runs under DIR (default ./rankscope-runs).

Lists the runs, shows each run's report views, compares two runs (diff view), and serves each
run's merged multi-rank timeline for ui.perfetto.dev (/runs/NAME/timeline?steps=3-4&ranks=0-7). Binds
127.0.0.1 by default: the traces stay on this machine. --host 0.0.0.0 exposes them to the
network, without authentication; rankscope warns when you do that.

examples:
  rankscope serve rankscope-runs            then open http://127.0.0.1:8765/
  rankscope serve /data/runs --port 9000
"""
from __future__ import annotations

import argparse
from pathlib import Path

from rankscope.commands.common import console
from rankscope.errors import RankscopeError

HELP = "serve a read-only web UI over the runs under a directory"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", nargs="?", default="rankscope-runs", metavar="DIR",
                   help="directory of runs, or an fsspec URL prefix of runs (s3://bucket/runs)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="keep the parsed runs' Parquet cache here between servers (default: a private temporary "
                        "directory, removed at exit; nothing is ever written under the served DIR)")


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from rankscope.web.app import create_app
    except ImportError as exc:
        raise RankscopeError(f"rankscope serve needs starlette and uvicorn ({exc.name} is missing): "
                             "pip install 'rankscope[web]'") from exc

    from rankscope.store import source

    root: Path | str = args.dir if source.is_url(args.dir) else Path(args.dir)
    if isinstance(root, Path) and not root.is_dir():
        raise RankscopeError(f"{root}: no such directory; pass the directory (or URL) that holds your runs")
    if args.host not in LOOPBACK:
        console.print(f"[yellow]warning:[/] serving on {args.host}: anyone who can reach this address can read "
                      "these traces (no authentication)", highlight=False, soft_wrap=True)
    shown = root if isinstance(root, str) else root.resolve()
    console.print(f"serving {shown} on http://{args.host}:{args.port}/ (Ctrl-C to stop)", highlight=False,
                  soft_wrap=True)
    uvicorn.run(create_app(root, args.cache_dir), host=args.host, port=args.port, log_level="warning")
    return 0
