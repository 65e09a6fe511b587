"""A ``Run``: every rank of one profiled job, with tables cached as Parquet.

``load_run(path)`` discovers the ranks (rankscope run directory or a plain directory of
Kineto traces), ingests each rank in a process pool (workers write Parquet and return only a
summary), checks for missing / duplicate / foreign ranks, and returns a ``Run`` whose tables
are read from the cache on demand.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from rankscope.errors import RankscopeError, TraceError, safe
from rankscope.intlist import format_int_list
from rankscope.model.discover import TRACE_SUFFIXES, discover
from rankscope.engine.executors import run_tasks
from rankscope.model.info import Kind, Problem, RankInfo, at_rank, records, restore
from rankscope.model.ingest import RankTask, ingest, system_pool

__all__ = ["Run", "load_run", "discover", "cache_root", "TRACE_SUFFIXES"]
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
    # rank -> why it could not be read at all (not published yet, unreadable directory, no usable data)
    absent: dict[int, str] = field(default_factory=dict)

    @property
    def damaged(self) -> dict[int, str]:
        """Ranks read but not whole (truncated, CRC, MANIFEST mismatch): analyzed, never in a verdict."""
        return {r: "; ".join(i.damage) for r, i in sorted(self.ranks.items()) if i.damage}

    def coverage(self) -> dict[str, Any]:
        """What the results cover, for the top of every output: ranks read, missing and damaged."""
        return {"world_size": self.world_size, "ranks_read": len(self.ranks),
                "missing": [{"rank": r, "why": self.absent.get(r, "no trace found")} for r in self.missing],
                "damaged": [{"rank": r, "why": w} for r, w in self.damaged.items()]}

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
        from rankscope.store import source

        where: Any = source.join(info.cache, name + ".parquet")
        if source.is_url(where):  # the cache of a run on object storage, kept next to it
            where = source.open_binary(where)
        with system_pool(), pq.ParquetFile(where) as f:
            return f.read(columns=columns)

    def only(self, rank: int) -> "Run":
        """The same run reduced to one rank (what a per-rank task on another process needs)."""
        from dataclasses import replace

        return replace(self, ranks={rank: self.ranks[rank]}, problems=[])

    def to_json(self) -> dict[str, Any]:
        return {"format_version": self.format_version, "path": self.path, "run_id": self.run_id,
                "world_size": self.world_size, "missing": self.missing, "problems": [str(p) for p in self.problems],
                "issues": records(self.problems),  # each line's kind, rank, file and count (model/info.Problem)
                "coverage": self.coverage(), "absent": {str(k): v for k, v in self.absent.items()},
                "manifest": self.manifest, "ranks": [self.ranks[r].to_json() for r in self.rank_ids]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Run":
        ranks = {i.rank: i for i in (RankInfo.from_json(x) for x in d["ranks"])}
        return cls(path=d["path"], run_id=d["run_id"], ranks=ranks, world_size=d.get("world_size"),
                   missing=list(d.get("missing", [])), problems=restore(list(d.get("problems", [])), d.get("issues")),
                   manifest=d.get("manifest", {}), format_version=d.get("format_version", 1),
                   absent={int(k): v for k, v in d.get("absent", {}).items()})


def private_cache(root: str | os.PathLike[str], run_path: Path | str) -> Path:
    """``root/<hash of the run's path or URL>``: a cache that writes nothing into the run."""
    where = run_path if isinstance(run_path, str) else str(run_path.resolve())
    out = Path(root) / hashlib.sha256(where.encode()).hexdigest()[:16]
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


def _map(tasks: list[RankTask], jobs: int, progress: Progress | None) -> Iterable[RankInfo | TraceError]:
    if jobs <= 1 or len(tasks) <= 1:
        for i, t in enumerate(tasks):
            yield ingest(t)
            if progress:
                progress(i + 1, len(tasks))
        return
    # the pool's modules (multiprocessing) only where a pool runs: one rank is read here (peak RSS, issue 26)
    from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(ingest, t) for t in tasks]
        for i, (t, fut) in enumerate(zip(tasks, futures)):
            try:
                yield fut.result()
            except BrokenProcessPool:
                # A worker died (killed for memory, a crash in a native library): every unfinished rank
                # is read again in a process of its own, so one bad file costs only itself.
                yield _isolated(t)
            except Exception as exc:  # noqa: BLE001 - a result that cannot come back is that rank's problem only
                yield TraceError(t.files[0] if t.files else str(t.root), f"could not be read in a worker ({exc})",
                                 Kind.READER_FAILED)
            if progress:
                progress(i + 1, len(tasks))


def _isolated(task: RankTask) -> RankInfo | TraceError:
    """``ingest(task)`` in a fresh one-worker pool: if it dies, only this rank is lost, with a line."""
    from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(ingest, task).result()
        except BrokenProcessPool:
            return TraceError(task.files[0] if task.files else str(task.root),
                              "the reader process died on this file (out of memory, or a crash in a native "
                              "library); rerun with --jobs 1 --debug to see where", Kind.READER_FAILED)


def load_run(path: str | os.PathLike[str], *, jobs: int | None = None, allow_missing_ranks: bool = True,
             strict: bool = False, progress: Progress | None = None, dask: str | None = None,
             cache_dir: str | os.PathLike[str] | None = None) -> Run:
    """Ingest (or re-open from the cache) every rank under ``path`` (a directory, a trace file or
    any fsspec URL: ``s3://bucket/run``).

    The ranks that can be read are analyzed; missing and damaged ranks are named in ``Run.coverage()``.
    ``strict=True`` raises instead when any rank is missing, duplicated or damaged (scripts that want
    all or nothing). ``allow_missing_ranks`` is accepted for compatibility and has no effect.
    ``jobs`` worker processes (1: in this process), or a Dask cluster with ``dask="local"`` or a
    scheduler address (``rankscope.engine.executors``; default: ``$RANKSCOPE_DASK``, which the CLI's
    ``--dask`` sets). ``cache_dir``: keep the Parquet cache there (keyed by the run's path) instead
    of next to the run, e.g. to leave a served directory untouched.
    """
    from rankscope.engine.memory import pyarrow_without_pandas
    from rankscope.store import source

    pyarrow_without_pandas()  # before any table work here or in forked ingest workers
    dask = dask or os.environ.get("RANKSCOPE_DASK") or None
    if source.is_url(str(path)):  # streamed from remote storage, cached on this machine
        from rankscope.model import remote

        url = str(path).rstrip("/")
        p: Path | str = url
        found = remote.discover(url, remote.local_cache_dir(url))
        # only once the run is known to exist, as it may write there; a private cache_dir wins
        cache: Path | str = private_cache(cache_dir, url) if cache_dir else remote.cache_dir(url)
        if cache != remote.local_cache_dir(url):
            from dataclasses import replace

            found.tasks = [replace(t, cache_dir=str(cache)) for t in found.tasks]
    else:
        p = Path(source.local_path(str(path)))
        cache = private_cache(cache_dir, p) if cache_dir else cache_root(p)
        found = discover(p, cache)
    jobs = jobs or os.cpu_count() or 1
    infos: list[RankInfo] = []
    problems: list[str] = list(found.problems)
    failed: list[tuple[RankTask, TraceError]] = []
    results = run_tasks(ingest, found.tasks, jobs=jobs, dask=dask, progress=progress) if dask \
        else _map(found.tasks, jobs, progress)
    for task, res in zip(found.tasks, results):
        if isinstance(res, TraceError):
            problems.append(Problem(str(res), res.kind, res.path, _rank_of(task, res)))
            failed.append((task, res))
        else:
            infos.append(res)
    run = _assemble(p, infos, problems, found.manifest)
    for task, err in failed:  # an unreadable rank whose number is known is missing *for a reason*
        r = _rank_of(task, err)
        if r is not None and r not in run.ranks:
            run.absent.setdefault(r, err.problem)
            if r not in run.missing and (run.world_size is None or r < run.world_size):
                run.missing = sorted(run.missing + [r])
    for r, why in found.absent.items():
        run.absent.setdefault(r, why)
    _check(run, strict)
    return run


def _rank_of(task: RankTask, err: TraceError) -> int | None:
    """The rank an unreadable task was for: discovery's hint, else what its reader learned first."""
    return task.rank_hint if task.rank_hint is not None else err.rank


def _assemble(p: Path | str, infos: list[RankInfo], problems: list[str], manifest: dict[str, Any]) -> Run:
    ranks: dict[int, RankInfo] = {}
    known = [i for i in infos if i.rank >= 0]
    unknown = [i for i in infos if i.rank < 0]
    # Files that say nothing of their rank get numbers after every rank that did say, so an
    # assigned number never collides with a real one.
    next_free = max((i.rank for i in known), default=-1) + 1
    for n, info in enumerate(unknown):
        info.rank, info.rank_source = next_free + n, "assigned"
        problems.append(Problem(f"{info.files[0]}: rank unknown (no distributedInfo, meta.json or rank in the "
                                f"file name); analyzed as rank {info.rank}", Kind.RANK_UNKNOWN, info.files[0], info.rank))
    for info in known + unknown:
        if info.rank in ranks:
            other = ranks[info.rank]
            problems.append(Problem(f"duplicate rank {info.rank}: {other.files[0]} and {info.files[0]} both claim it; "
                                    "keeping the first", Kind.IDENTITY, info.files[0], info.rank))
            continue
        ranks[info.rank] = info
    run_ids = {i.run_id for i in ranks.values() if i.run_id}
    expected_id = manifest.get("run_id")
    if expected_id and run_ids and expected_id not in run_ids:
        # No rank agrees with run.json: run.json is the odd one out (edited, copied from another run),
        # not every rank. Keep the ranks, say so.
        problems.append(Problem(f"run.json names run {expected_id!r} but the ranks say "
                                f"{', '.join(repr(x) for x in sorted(run_ids))}; run.json's run id ignored",
                                Kind.IDENTITY, f"{str(p).rstrip('/')}/run.json"))
        expected_id = None
    for r, info in list(ranks.items()):
        if expected_id and info.run_id and info.run_id != expected_id:
            problems.append(Problem(f"rank {r} ({info.files[0]}) belongs to run {info.run_id!r}, not {expected_id!r}; "
                                    "left out", Kind.IDENTITY, info.files[0], r))
            del ranks[r]
    world = manifest.get("world_size") or max((i.world_size or 0 for i in ranks.values()), default=0) or None
    expected = manifest.get("ranks_expected") or (range(world) if world else [])
    # world is bounded (sanity.MAX_WORLD), so this list is too
    missing = [r for r in expected if r not in ranks]
    if len(run_ids) > 1 and not expected_id:
        problems.append(Problem(f"ranks come from {len(run_ids)} different runs: {', '.join(sorted(run_ids))}",
                                Kind.IDENTITY, count=len(run_ids)))
    for info in ranks.values():
        problems += [at_rank(x, info.rank) for x in info.problems]
    name = p.name if isinstance(p, Path) else p.rstrip("/").rsplit("/", 1)[-1]
    return Run(path=str(p), run_id=expected_id or name, ranks=ranks, world_size=world,
               missing=missing, problems=problems, manifest=all_groups(manifest, ranks))


def all_groups(manifest: dict[str, Any], ranks: dict[int, RankInfo]) -> dict[str, Any]:
    """run.json with the process groups of every rank: rank 0 writes it knowing only the groups it is in
    (torch tells a rank nothing of a group it is not in), every rank's trace and meta.json lists its own.
    Groups are keyed by name and members; a new dict (the manifest read from disk is not changed)."""
    from rankscope.model.info import compact_groups

    seen: dict[tuple[str, str], dict[str, Any]] = {}
    own = manifest.get("process_groups") if isinstance(manifest.get("process_groups"), list) else []
    for g in compact_groups(own) + [g for r in sorted(ranks) for g in ranks[r].process_groups or []]:
        name = str(g.get("name", g.get("pg_name", "")))
        key = (name, str(g.get("ranks", "")))
        if key not in seen:
            seen[key] = {"name": name, "desc": str(g.get("desc", g.get("pg_desc", ""))), "ranks": g.get("ranks", "")}
    if not seen:
        return manifest
    return {**manifest, "process_groups": sorted(seen.values(), key=lambda g: (_num(g["name"]), g["name"]))}


def _num(name: str) -> int:
    return int(name) if name.isdigit() else 1 << 62


def _check(run: Run, strict: bool) -> None:
    if not run.ranks:
        reasons = "; ".join(safe(x) for x in run.problems[:5]) or "no usable data"
        raise RankscopeError(f"{safe(run.path)}: no rank could be read ({reasons})")
    if not strict:
        return
    dups = [x for x in run.problems if x.startswith("duplicate rank")]
    what = []
    if run.missing:
        what.append(f"ranks {format_int_list(run.missing)} of {run.world_size} are missing")
    if run.damaged:
        what.append(f"ranks {format_int_list(list(run.damaged))} are damaged "
                    f"({safe(next(iter(run.damaged.values())))})")
    if dups:
        what.append(safe(dups[0]))
    if what:
        raise RankscopeError(f"{safe(run.path)}: {'; '.join(what)} (--strict); without --strict the ranks that "
                             "are there are analyzed and every output names the missing and damaged ones")
