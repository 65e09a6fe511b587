"""``rankscope gather RUN --from HOST:PATH ...``: build one run directory from per-node copies.

Each source is ``[user@]host:/path`` (SFTP through fsspec/paramiko with the user's SSH keys or
agent; passwords are never read from files) or any fsspec URL (``file:///...``). A source
path may hold a node-local run directory (``ranks/<r>/...``, ``run.json``) and/or rank spools
(``*/spool.json`` with ``data/ranks/<r>/...``). Files are published atomically into RUN and
every gathered rank gets a fresh MANIFEST.json computed from what arrived.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from typing import Any

from rankscope.errors import RankscopeError

HELP = "copy rank files from nodes over SSH (keys/agent) into one run directory"
_RUN_FILE = re.compile(r"^(run\.json|ranks/\d+/[^/]+)$")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="destination run directory (path or fsspec URL)")
    p.add_argument("--from", dest="sources", action="append", required=True, metavar="HOST:PATH",
                   help="[user@]host:/path over SSH, or an fsspec URL; repeat for each node")
    p.add_argument("--port", type=int, default=22, help="SSH port (default 22)")


def open_source(src: str, port: int = 22) -> tuple[Any, str]:
    """(filesystem, path) for ``[user@]host:/path`` (SFTP) or an fsspec URL."""
    import fsspec.core

    if "://" in src:
        return fsspec.core.url_to_fs(src)
    m = re.fullmatch(r"(?:(?P<user>[^@:/]+)@)?(?P<host>[^:/]+):(?P<path>.+)", src)
    if not m:
        raise RankscopeError(f"gather: source {src!r} is not [user@]host:/path or an fsspec URL")
    from fsspec.implementations.sftp import SFTPFileSystem

    kw: dict[str, Any] = {"port": port, "allow_agent": True, "look_for_keys": True}
    if m["user"]:
        kw["username"] = m["user"]
    try:
        return SFTPFileSystem(m["host"], **kw), m["path"]
    except Exception as exc:  # noqa: BLE001 - paramiko raises many kinds; one clear line
        raise RankscopeError(f"gather: cannot open SFTP to {m['host']}:{port} ({type(exc).__name__}: {exc}); "
                             "check `ssh` works with your key or agent") from exc


def plan_copies(files: list[str], root: str) -> dict[str, str]:
    """Map source file -> run-relative destination; spool data/ files and run-dir files only."""
    out: dict[str, str] = {}
    root = root.rstrip("/")
    for f in files:
        rel = f[len(root):].lstrip("/") if f.startswith(root) else f
        if "/data/" in f"/{rel}":
            rel = rel.split("data/", 1)[1] if rel.startswith("data/") else rel.split("/data/", 1)[1]
        base = rel.rsplit("/", 1)[-1]
        if base.startswith(".") or base == "MANIFEST.json" or not _RUN_FILE.match(rel):
            continue
        out[f] = rel
    return out


def _sha(path: str) -> tuple[int, str]:
    from rankscope.store.spool import sha256_file

    return sha256_file(path)


def gather(run: str, sources: list[tuple[Any, str]]) -> dict[int, int]:
    """Copy every source into ``run``; returns files per rank. Newer copies of a file win."""
    from rankscope.store import layout as L
    from rankscope.store.fs import open_target
    from rankscope.store.uploader import publish_file

    target = open_target(run)
    per_rank: dict[int, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="rankscope-gather-") as tmp:
        for fs, root in sources:
            copies = plan_copies([str(f) for f in fs.find(root)], str(root))
            for src, rel in sorted(copies.items()):
                local = os.path.join(tmp, "f")
                fs.get_file(src, local)
                size, digest = _sha(local)
                publish_file(target, local, rel, size)
                rank = L.rank_of(rel)
                if rank is not None:
                    rows = [r for r in per_rank.setdefault(rank, []) if r["path"] != rel.split("/", 2)[2]]
                    rows.append({"path": rel.split("/", 2)[2], "size": size, "sha256": digest})
                    per_rank[rank] = rows
        for rank, rows in per_rank.items():
            body = {"format": L.MANIFEST_FORMAT, "rank": rank, "created_ns": time.time_ns(),
                    "files": sorted(rows, key=lambda r: r["path"]), "dropped": [], "gathered": True}
            data = json.dumps(body, indent=1).encode()
            local = os.path.join(tmp, "manifest")
            with open(local, "wb") as f:
                f.write(data)
            publish_file(target, local, L.manifest_rel(rank), len(data))
    return {r: len(v) for r, v in sorted(per_rank.items())}


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    sources = [open_source(s, args.port) for s in args.sources]
    counts = gather(args.run, sources)
    if not counts:
        raise RankscopeError(f"gather: no rank files found under {', '.join(args.sources)}; point --from at a "
                             "node's run directory or spool root")
    Console().print(f"gathered {sum(counts.values())} file(s) for {len(counts)} rank(s) into {args.run}")
    return 0
