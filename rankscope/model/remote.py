"""Discovering the ranks of a run on remote storage (any fsspec URL), without downloading it.

The same rules as for a local directory (``model.run.discover``): a rankscope run directory
(``run.json``, ``ranks/<rank>/`` with ``meta.json`` and traces), or any tree of Kineto traces.
Listings carry sizes and ETags, so nothing but ``run.json`` and the ``meta.json`` files is read
here; the traces are streamed later by the worker that parses each rank.

The Parquet cache of a remote run lives on this machine, keyed by the URL (``cache_dir``) and, per
rank, by the objects' sizes and ETags (``ingest.source_key``): a second analysis of an unchanged
run lists the run and reads only the cache.
"""
from __future__ import annotations

import hashlib
import os
import posixpath
from pathlib import Path
from typing import Any

from rankscope.errors import RankscopeError
from rankscope.model import sanity
from rankscope.model.discover import Found, check_run, rank_from_name
from rankscope.model.info import Kind, Problem, compact_meta
from rankscope.model.ingest import RankTask

SKIP = ("meta.json", "MANIFEST.json", "run.json", "info.json", "synth_truth.json")


def cache_dir(url: str) -> Path | str:
    """Where the Parquet cache of the run at ``url`` goes: ``url/analysis/cache`` when the storage
    takes a write there (every later analysis, from any machine, then reads only the cache), else
    this machine's ``$RANKSCOPE_CACHE`` or ``~/.cache/rankscope``, keyed by the URL.
    ``RANKSCOPE_REMOTE_CACHE=0`` keeps it local."""
    if os.environ.get("RANKSCOPE_REMOTE_CACHE", "1") != "0":
        from rankscope.store import source

        remote = f"{url.rstrip('/')}/analysis/cache"
        try:
            fs, root = source.filesystem(remote)
            fs.pipe_file(f"{root}/.writable", b"rankscope")  # one small PUT: can this machine write?
            return remote
        except Exception:  # noqa: BLE001 - read-only bucket, no permission, ...: the local cache
            pass
    return local_cache_dir(url)


def local_cache_dir(url: str) -> Path:
    """Local cache of a remote run: ``$RANKSCOPE_CACHE`` or ``~/.cache/rankscope``, by URL."""
    key = hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]
    root = Path(os.environ.get("RANKSCOPE_CACHE", Path.home() / ".cache" / "rankscope"))
    out = root / f"url-{key}"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _is_trace(name: str) -> bool:
    return name.endswith((".json", ".json.gz")) and name not in SKIP and not name.startswith(("comms.", "rpc.", ".")) \
        and not name.endswith(".collectives.json.gz")


def discover(url: str, cache: Path | str) -> Found:
    """Tasks for every rank of the run at ``url`` (same rules as a local directory)."""
    from rankscope.store import source

    fs, root = source.filesystem(url)
    proto = url.split("://", 1)[0]
    root = root.rstrip("/")

    def full(p: str) -> str:
        return f"{proto}://{p}"

    try:
        listing = fs.find(root, detail=True, withdirs=False)
    except FileNotFoundError:
        listing = {}
    except Exception as exc:  # noqa: BLE001 - any driver error: one line naming the URL
        raise RankscopeError(f"{url}: cannot list ({exc.__class__.__name__}: {exc})") from exc
    if not listing:
        raise RankscopeError(f"{url}: no such run (nothing stored under this prefix)")
    manifest: dict[str, Any] = {}
    problems: list[str] = []  # run.json and meta.json checked as for a local run, one line each
    if f"{root}/run.json" in listing:
        manifest = check_run(_object(full(f"{root}/run.json"), problems), full(f"{root}/run.json"), problems)
    by_rank: dict[str, list[str]] = {}
    for path in sorted(listing):
        rel = path[len(root) + 1:]
        parts = rel.split("/")
        if len(parts) == 3 and parts[0] == "ranks" and _is_trace(parts[2]):
            by_rank.setdefault(parts[1], []).append(path)
    tasks = []
    for name, files in sorted(by_rank.items()):
        meta_url = full(f"{root}/ranks/{name}/meta.json")
        said: list[str] = []
        meta = compact_meta(sanity.clean(_object(meta_url, said), sanity.META, meta_url, said)) \
            if f"{root}/ranks/{name}/meta.json" in listing else {}
        hint = sanity.rank(meta.get("rank"), meta_url, said)
        source_name = "meta.json" if hint is not None else "directory name"
        if hint is None:
            hint = int(name) if name.isdigit() and len(name) < 8 else None
        problems += [p.with_rank(hint) if isinstance(p, Problem) else p for p in said]
        tasks.append(RankTask(tuple(full(f) for f in files), str(cache), hint, meta, source_name))
    if not tasks:
        files = [p for p in sorted(listing) if _is_trace(posixpath.basename(p)) and "/analysis/" not in p]
        tasks = [RankTask((full(p),), str(cache), rank_from_name(Path(posixpath.basename(p))), None,
                          "file name") for p in files]
    if not tasks:
        raise RankscopeError(f"{url}: no trace files found (expected *.json or *.json.gz, or a rankscope "
                             "run directory with ranks/<rank>/)")
    return Found(tasks, manifest, problems)


def _object(url: str, problems: list[str]) -> dict[str, Any]:
    """A small JSON object file on remote storage ({} with one line when it is not one)."""
    from rankscope.store import source

    try:
        with source.open_binary(url) as fh:
            data = fh.read((64 << 20) + 1)  # larger is refused by parse_object
    except OSError as exc:
        problems.append(Problem(f"{url}: cannot read ({exc.strerror or exc}); ignored", Kind.FILE_UNREADABLE, url))
        return {}
    return sanity.parse_object(data, url, problems)
