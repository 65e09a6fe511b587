"""A ``Run``: every rank of one profiled job, with tables cached as Parquet.

``load_run(path)`` discovers the ranks (rankscope run directory or a plain directory of
Kineto traces), ingests each rank in a process pool (workers write Parquet and return only a
summary), checks for missing / duplicate / foreign ranks, and returns a ``Run`` whose tables
are read from the cache on demand.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rankscope.errors import RankscopeError, TraceError
from rankscope.intlist import format_int_list
from rankscope.model.executors import run_tasks
from rankscope.model.info import RankInfo, compact_meta
from rankscope.model.ingest import RankTask, ingest, system_pool

TRACE_SUFFIXES = (".json", ".json.gz")
Progress = Callable[[int, int], None]


@dataclass
class Run:
    """All ranks of one run. Plain data: tables live in Parquet files under ``cache_dir``."""

    path: str
    run_id: str
    ranks: dict[int, RankInfo]
    world_size: int | None = None
    missing: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)
    format_version: int = 1

    @property
    def rank_ids(self) -> list[int]:
        return sorted(self.ranks)

    def table(self, rank: int, name: str, columns: list[str] | None = None) -> Any:
        """One rank's table (pyarrow.Table) read from the cache."""
        import pyarrow.parquet as pq

        info = self.ranks[rank]
        if info.cache is None:
            raise RankscopeError(f"rank {rank} of {self.path} has no cached tables")
        if info.counts.get(name) == 0:  # known empty (counted at ingest): no file to open
            from rankscope.model import schema

            empty = schema.empty(name)
            return empty.select(columns) if columns is not None else empty
        # ParquetFile.read: half the fixed cost of read_table (no dataset discovery), which counts
        # when analyses open the small per-rank tables of hundreds of ranks. The system allocator
        # hands the buffers back when the table is dropped (Arrow's default pool keeps ~20 MB of
        # them per rank-sized table: peak RSS, no speed difference measured).
        with system_pool(), pq.ParquetFile(os.path.join(info.cache, name + ".parquet")) as f:
            return f.read(columns=columns)

    def only(self, rank: int) -> "Run":
        """The same run reduced to one rank (what a per-rank task on another process needs)."""
        from dataclasses import replace

        return replace(self, ranks={rank: self.ranks[rank]}, problems=[])

    def to_json(self) -> dict[str, Any]:
        return {"format_version": self.format_version, "path": self.path, "run_id": self.run_id,
                "world_size": self.world_size, "missing": self.missing, "problems": self.problems,
                "manifest": self.manifest, "ranks": [self.ranks[r].to_json() for r in self.rank_ids]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Run":
        ranks = {i.rank: i for i in (RankInfo.from_json(x) for x in d["ranks"])}
        return cls(path=d["path"], run_id=d["run_id"], ranks=ranks, world_size=d.get("world_size"),
                   missing=list(d.get("missing", [])), problems=list(d.get("problems", [])),
                   manifest=d.get("manifest", {}), format_version=d.get("format_version", 1))


def _is_trace(p: Path) -> bool:
    return p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name not in (
        "meta.json", "MANIFEST.json", "run.json", "info.json", "synth_truth.json") and not p.name.startswith("comms.")


def private_cache(root: str | os.PathLike[str], run_path: Path) -> Path:
    """``root/<hash of the run's path>``: a cache that writes nothing into the run."""
    out = Path(root) / hashlib.sha256(str(run_path.resolve()).encode()).hexdigest()[:16]
    out.mkdir(parents=True, exist_ok=True)
    return out


def cache_root(run_path: Path) -> Path:
    """RUN/analysis/cache when writable, else a per-user cache keyed by the run's path."""
    target = run_path / "analysis" / "cache" if run_path.is_dir() else run_path.parent / ".rankscope-cache"
    # Mode bits too, not only os.access: root may write anywhere, but a directory marked read-only
    # (shared reference data) must not get a cache folder written into it.
    owner = run_path if run_path.is_dir() else run_path.parent
    try:
        if owner.stat().st_mode & 0o200 or target.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            if os.access(target, os.W_OK) and target.stat().st_mode & 0o200:
                return target
    except OSError:
        pass
    key = hashlib.sha256(str(run_path.resolve()).encode()).hexdigest()[:16]
    home = Path(os.environ.get("RANKSCOPE_CACHE", Path.home() / ".cache" / "rankscope")) / key
    home.mkdir(parents=True, exist_ok=True)
    return home


def discover(path: Path, cache: Path) -> tuple[list[RankTask], dict[str, Any]]:
    """Tasks for every rank (run directory) or every trace file (plain directory / one file)."""
    if path.is_file():
        return [RankTask((str(path),), str(cache), _rank_from_name(path), None, "file name")], {}
    if not path.exists():
        raise RankscopeError(f"{path}: no such file or directory")
    from rankscope.model import ascend

    npu = ascend.find_dirs(path)
    if npu:
        return [RankTask(ascend.source_files(d), str(cache), None, None, "ascend", "ascend", str(d))
                for d in npu], {}
    manifest = {}
    if (path / "run.json").exists():
        try:
            manifest = json.loads((path / "run.json").read_text())
        except ValueError as exc:
            raise RankscopeError(f"{path / 'run.json'}: not valid JSON ({exc})") from exc
    rank_dirs = sorted((d for d in (path / "ranks").iterdir() if d.is_dir()), key=lambda d: d.name) \
        if (path / "ranks").is_dir() else []
    tasks = [t for t in (_rank_dir_task(d, cache) for d in rank_dirs) if t is not None]
    if not tasks:
        files = sorted(p for p in path.rglob("*") if _is_trace(p) and "analysis" not in p.parts)
        tasks = [RankTask((str(p),), str(cache), _rank_from_name(p), None, "file name") for p in files]
    if not tasks:
        raise RankscopeError(f"{path}: no trace files found (expected *.json or *.json.gz, "
                             "or a rankscope run directory with ranks/<rank>/)")
    return tasks, manifest


def _rank_dir_task(d: Path, cache: Path) -> RankTask | None:
    files = tuple(str(p) for p in sorted(d.iterdir()) if _is_trace(p))
    if not files:
        return None
    meta: dict[str, Any] = {}
    if (d / "meta.json").exists():
        try:
            meta = json.loads((d / "meta.json").read_text())
        except ValueError:
            meta = {"problem": f"{d / 'meta.json'}: not valid JSON"}
    meta = compact_meta(meta)  # world-sized member lists, once per rank: O(world²) otherwise
    hint = meta.get("rank")
    if hint is None and d.name.isdigit():
        return RankTask(files, str(cache), int(d.name), meta, "directory name")
    return RankTask(files, str(cache), hint, meta, "meta.json")


def _rank_from_name(p: Path) -> int | None:
    import re

    m = re.search(r"rank[-_]?(\d+)", p.name, re.I) or re.search(r"worker(\d+)", p.name, re.I)
    return int(m.group(1)) if m else None


def load_run(path: str | os.PathLike[str], *, jobs: int | None = None, allow_missing_ranks: bool = False,
             progress: Progress | None = None, dask: str | None = None,
             cache_dir: str | os.PathLike[str] | None = None) -> Run:
    """Ingest (or re-open from the cache) every rank under ``path``.

    ``jobs`` worker processes (1: in this process), or a Dask cluster with ``dask="local"`` or a
    scheduler address (``rankscope.model.executors``; default: ``$RANKSCOPE_DASK``, which the
    CLI's ``--dask`` sets). ``cache_dir``: keep the Parquet cache there (keyed by the run's path)
    instead of next to the run, e.g. to leave a served directory untouched.
    """
    dask = dask or os.environ.get("RANKSCOPE_DASK") or None
    from rankscope.store import source

    if source.is_url(str(path)):  # streamed from remote storage, cached on this machine
        from rankscope.model import remote

        url = str(path).rstrip("/")
        p: Path | str = url
        cache = remote.cache_dir(url)
        tasks, manifest = remote.discover(url, cache)
    else:
        p = Path(source.local_path(str(path)))
        cache = private_cache(cache_dir, p) if cache_dir else cache_root(p)
        tasks, manifest = discover(p, cache)
    jobs = jobs or os.cpu_count() or 1
    infos: list[RankInfo] = []
    problems: list[str] = []
    for res in run_tasks(ingest, tasks, jobs=jobs, dask=dask, progress=progress):
        if isinstance(res, TraceError):
            problems.append(str(res))
        else:
            infos.append(res)
    run = _assemble(p, infos, problems, manifest)
    _check(run, allow_missing_ranks)
    return run


def _assemble(p: Path | str, infos: list[RankInfo], problems: list[str], manifest: dict[str, Any]) -> Run:
    ranks: dict[int, RankInfo] = {}
    known = [i for i in infos if i.rank >= 0]
    unknown = [i for i in infos if i.rank < 0]
    # Files that say nothing of their rank get numbers after every rank that did say, so an
    # assigned number never collides with a real one.
    next_free = max((i.rank for i in known), default=-1) + 1
    for n, info in enumerate(unknown):
        info.rank, info.rank_source = next_free + n, "assigned"
        problems.append(f"{info.files[0]}: rank unknown (no distributedInfo, meta.json or rank in the "
                        f"file name); analyzed as rank {info.rank}")
    for info in known + unknown:
        if info.rank in ranks:
            other = ranks[info.rank]
            problems.append(f"duplicate rank {info.rank}: {other.files[0]} and {info.files[0]} both claim it; "
                            f"keeping the first")
            continue
        ranks[info.rank] = info
    run_ids = {i.run_id for i in ranks.values() if i.run_id}
    expected_id = manifest.get("run_id")
    for r, info in list(ranks.items()):
        if expected_id and info.run_id and info.run_id != expected_id:
            problems.append(f"rank {r} ({info.files[0]}) belongs to run {info.run_id!r}, not {expected_id!r}; "
                            "left out")
            del ranks[r]
    world = manifest.get("world_size") or max((i.world_size or 0 for i in ranks.values()), default=0) or None
    expected = manifest.get("ranks_expected") or (list(range(world)) if world else [])
    missing = sorted(set(expected) - set(ranks))
    if len(run_ids) > 1 and not expected_id:
        problems.append(f"ranks come from {len(run_ids)} different runs: {', '.join(sorted(run_ids))}")
    for info in ranks.values():
        problems += [f"rank {info.rank}: {x}" for x in info.problems]
    name = p.name if isinstance(p, Path) else p.rstrip("/").rsplit("/", 1)[-1]
    return Run(path=str(p), run_id=expected_id or name, ranks=ranks, world_size=world,
               missing=missing, problems=problems, manifest=manifest)


def _check(run: Run, allow_missing: bool) -> None:
    if not run.ranks:
        raise RankscopeError(f"{run.path}: no rank could be read ({'; '.join(run.problems[:3])})")
    dups = [x for x in run.problems if x.startswith("duplicate rank")]
    if (run.missing or dups) and not allow_missing:
        what = []
        if run.missing:
            what.append(f"ranks {format_int_list(run.missing)} of {run.world_size} are missing")
        if dups:
            what.append(dups[0])
        raise RankscopeError(f"{run.path}: {'; '.join(what)}. Pass --allow-missing-ranks to analyze "
                             "the ranks that are there (every output then names the missing ones).")
