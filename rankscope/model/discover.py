"""Find the ranks of a run: one task per rank directory (rankscope run) or per trace file.

Everything read here (run.json, meta.json, MANIFEST.json, directory listings) may be missing, damaged,
hostile or still being written: each problem becomes one line in ``Found.problems`` (or a reason in
``Found.absent`` for a rank that cannot be read at all), never an exception, except when there is
nothing to analyze at all (then one ``RankscopeError`` line saying what to do).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankscope.errors import RankscopeError, safe
from rankscope.model import sanity
from rankscope.model.info import Kind, Problem, compact_meta, os_problem
from rankscope.model.ingest import RankTask

TRACE_SUFFIXES = (".json", ".json.gz")
_NOT_TRACES = ("meta.json", "MANIFEST.json", "run.json", "info.json", "synth_truth.json")
MAX_FILES = 100_000  # a plain directory with more trace-named files than this is not one run


@dataclass
class Found:
    """What discovery found: tasks to ingest, the manifest, problems and ranks that cannot be read."""

    tasks: list[RankTask]
    manifest: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    absent: dict[int, str] = field(default_factory=dict)  # rank -> why it is not there (not published, ...)


def trace_name(name: str) -> bool:
    """Whether a file of this name is read as a trace (not a side file, a dump or a recorder file)."""
    return name.endswith(TRACE_SUFFIXES) and name not in _NOT_TRACES and not name.startswith(("comms.", "rpc.")) \
        and not name.endswith(".collectives.json.gz")


def is_trace(p: Path) -> bool:
    try:
        return trace_name(p.name) and p.is_file()
    except OSError:
        return False


def rank_from_name(p: Path) -> int | None:
    m = re.search(r"rank[-_]?(\d{1,7})", p.name, re.I) or re.search(r"worker(\d{1,7})", p.name, re.I)
    return int(m.group(1)) if m else None


def _is_run(d: Path) -> bool:
    try:
        return (d / "run.json").is_file() or (d / "ranks").is_dir()
    except OSError:
        return False


def discover(path: Path, cache: Path) -> Found:
    """Tasks for every rank (run directory) or every trace file (plain directory / one file)."""
    if path.is_file():
        return Found([RankTask((str(path),), str(cache), rank_from_name(path), None, "file name")])
    if not path.exists():
        raise RankscopeError(f"{safe(path)}: no such file or directory")
    from rankscope.model.readers.ascend import torch_npu as ascend

    from rankscope.model.readers.ascend import mindinsight

    if mindinsight.is_cluster(path):
        return _mindinsight(path, cache)
    npu = ascend.find_dirs(path)
    if npu:
        return Found([RankTask(ascend.source_files(d), str(cache), None, None, "ascend", "ascend", str(d))
                      for d in npu])
    if not _is_run(path):
        _refuse_parent(path)
    found = Found([])
    if (path / "run.json").exists():
        found.manifest = _run_json(path / "run.json", found.problems)
    if (path / "ranks").is_dir():
        _rank_dirs(path / "ranks", cache, found)
    if not found.tasks and not found.absent:
        files = _plain_files(path, found.problems)
        _refuse_plain_parent(path, files)
        found.tasks = [RankTask((str(p),), str(cache), rank_from_name(p), None, "file name") for p in files]
    if not found.tasks:
        raise RankscopeError(_nothing(path, found))
    return found


def _mindinsight(path: Path, cache: Path) -> Found:
    """One task per rank of a MindInsight-era cluster folder (model/readers/ascend/mindinsight.py); host IPs stay out."""
    from rankscope.model.readers.ascend import mindinsight

    try:
        members, problems = mindinsight.members(path)
    except OSError as exc:
        raise RankscopeError(f"{safe(path)}: cannot read the cluster layout ({exc.strerror or exc})") from exc
    found = Found([], problems=problems)
    for m in members:
        files = mindinsight.files(m)
        if not files:
            why = f"no {mindinsight.STEP_TRACE.format(m.device)} under {m.host}"
            found.problems.append(Problem(f"{safe(m.profiler_dir)}: {why}", Kind.NO_TRACE, str(m.profiler_dir), m.rank))
            if m.rank is not None:
                found.absent[m.rank] = why
            continue
        found.tasks.append(RankTask(files, str(cache), m.rank, {"host": m.host, "device_id": m.device},
                                    "hccl.json rank table", "mindinsight", str(m.profiler_dir)))
    if not found.tasks:
        first = f" ({found.problems[0]})" if found.problems else ""
        raise RankscopeError(f"{safe(path)}: a MindInsight cluster folder, but no rank has a step_trace_raw file{first}")
    return found


def _nothing(path: Path, found: Found) -> str:
    if found.absent and all("not published" in w for w in found.absent.values()):
        return (f"{safe(path)}: not published yet (no rank has its MANIFEST.json): is the job still running? "
                "Analyze it once the profiling window has been written")
    if _is_run(path):
        return (f"{safe(path)}: a rankscope run, but it holds no trace files: did the training loop call "
                "prof.step() every iteration? (traces are written when a profiling window completes)")
    return (f"{safe(path)}: no trace files found (expected *.json or *.json.gz, or a rankscope run directory "
            "with ranks/<rank>/)")


def _refuse_parent(path: Path) -> None:
    """A directory holding several runs is not one run: list them instead of analyzing the first."""
    try:
        runs = sorted(d.name for d in path.iterdir() if d.is_dir() and _is_run(d))
    except OSError:
        return
    if len(runs) >= 2:
        shown = ", ".join(safe(r) for r in runs[:8]) + (f" and {len(runs) - 8} more" if len(runs) > 8 else "")
        raise RankscopeError(f"{safe(path)} holds {len(runs)} runs ({shown}); pass one of them, "
                             f"e.g. {safe(path / runs[0])}")


def _refuse_plain_parent(path: Path, files: list[Path]) -> None:
    """Folders of traces side by side whose file names claim the same rank (or say none, twice) are
    separate runs, not one: list them (per-host folders of one run, rank0-3 / rank4-7, pass)."""
    if any(f.parent == path for f in files):
        return
    by_dir: dict[str, list[int | None]] = {}
    for f in files:
        by_dir.setdefault(f.relative_to(path).parts[0], []).append(rank_from_name(f))
    if len(by_dir) < 2:
        return
    seen: dict[int | None, str] = {}
    for d, ranks in sorted(by_dir.items()):
        for r in set(ranks):
            if r in seen and seen[r] != d:
                names = sorted(by_dir)
                shown = ", ".join(safe(n) for n in names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
                raise RankscopeError(f"{safe(path)} holds traces of {len(names)} separate runs ({shown}: "
                                     f"{'rank ' + str(r) if r is not None else 'a trace with no rank'} appears in "
                                     f"{safe(seen[r])} and {safe(d)}); pass one of them, e.g. {safe(path / names[0])}")
            seen[r] = d


def _run_json(p: Path, problems: list[str]) -> dict[str, Any]:
    return check_run(sanity.read_object(p, problems), str(p), problems)


def check_run(doc: dict[str, Any], p: str, problems: list[str]) -> dict[str, Any]:
    """run.json's content with every field checked (the same for a local run and one on remote storage)."""
    raw = sanity.clean(doc, sanity.RUN, p, problems)
    man: dict[str, Any] = {k: v for k, v in raw.items() if k not in ("world_size", "ranks_expected", "run_id")}
    rid = sanity.typed(raw, "run_id", str, p, problems)
    if rid:
        man["run_id"] = rid
    world = sanity.world_size(raw.get("world_size"), str(p), problems)
    if world:
        man["world_size"] = world
    exp = sanity.typed(raw, "ranks_expected", list, p, problems)
    if exp is not None:
        ok = [r for r in exp if type(r) is int and 0 <= r < sanity.MAX_WORLD]
        if len(ok) != len(exp):
            n = len(exp) - len(ok)
            problems.append(Problem(f"{safe(p)}: {n} entries of 'ranks_expected' are not valid ranks; ignored",
                                    Kind.BAD_FIELD, str(p), count=n))
        man["ranks_expected"] = sorted(set(ok))
    return man


def _rank_dirs(ranks: Path, cache: Path, found: Found) -> None:
    try:
        with os.scandir(ranks) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        raise RankscopeError(f"{safe(ranks)}: cannot list ({exc.strerror or exc})") from exc
    dirs = []
    for e in entries:
        bad = _link_problem(e.path) if e.is_symlink() else None
        if bad is not None:  # ranks/<r> is a link that leads nowhere: named, not "no trace found"
            _absent(found, Path(e.path), _rank_num(e.name), *bad)
        elif _is_dir(e):
            dirs.append(Path(e.path))
    published = any(os.path.exists(d / "MANIFEST.json") for d in dirs)
    for d in dirs:
        task = _rank_dir_task(d, cache, found, published)
        if task is not None:
            found.tasks.append(task)


def _is_dir(e: os.DirEntry[str]) -> bool:
    try:
        return e.is_dir()
    except OSError:
        return False


def _rank_num(name: str) -> int | None:
    return int(name) if name.isdigit() and len(name) < 8 else None


def _link_problem(path: str | Path) -> tuple[Kind, str] | None:
    """(kind, why) for a symbolic link that cannot be followed (a loop, a dangling link), else None."""
    try:
        os.stat(path)
    except OSError as exc:
        return os_problem(str(path), exc)
    return None


def _absent(found: Found, where: Path, num: int | None, kind: Kind, why: str, count: int = 1) -> None:
    """One line for a rank that cannot be read at all, and the reason kept for its coverage."""
    found.problems.append(Problem(f"{safe(where)}: {why}", kind, str(where), num, count))
    if num is not None:
        found.absent[num] = why


def _listing(d: Path) -> list[str]:
    """The names in rank directory ``d``; OSError when it cannot be listed or its files cannot be
    opened (read permission without search permission lists names but opens nothing)."""
    names = sorted(os.listdir(d))
    if names:
        os.lstat(d / names[0])
    return names


def _rank_dir_task(d: Path, cache: Path, found: Found, published: bool) -> RankTask | None:
    num = _rank_num(d.name)
    try:
        names = _listing(d)
    except OSError as exc:
        _absent(found, d, num, Kind.DIR_UNREADABLE, f"directory unreadable ({exc.strerror or exc})")
        return None
    said: list[tuple[Path, Kind, str]] = []  # (where, kind, why) said about this directory's files
    files = []
    for n in names:
        bad = _link_problem(d / n) if trace_name(n) and os.path.islink(d / n) else None
        if bad is not None:
            said.append((d / n, *bad))
        elif trace_name(n) and os.path.isfile(d / n):
            files.append(str(d / n))
    mine: list[str] = []
    has_manifest = "MANIFEST.json" in names
    expected = _manifest(d, mine) if has_manifest else ()
    gone = [n for n, _, _ in expected if n not in names]  # a dangling link is in names: said as a link
    if gone:
        said.append((d / "MANIFEST.json", Kind.MANIFEST_ABSENT, f"lists {len(gone)} files that are absent "
                     f"({', '.join(safe(n) for n in gone[:4])}{' ...' if len(gone) > 4 else ''})"))
    if not files:  # the first thing said is why the rank cannot be read; without any, say why here
        why = said[0] if said else (d, *_why_no_trace(num, has_manifest))
        found.problems += [p.with_rank(num) if isinstance(p, Problem) else p for p in mine]
        for where, kind, text in said[1:]:
            found.problems.append(Problem(f"{safe(where)}: {text}", kind, str(where), num, _count(kind, gone)))
        _absent(found, why[0], num, why[1], why[2], _count(why[1], gone))
        return None
    if "meta.json" in names:
        # world-sized member lists in every rank's meta.json: O(world²) memory unless compacted
        meta = compact_meta(sanity.read_meta(d / "meta.json", mine))
    else:
        meta = {}
    if published and not has_manifest:
        said.append((d, Kind.NOT_PUBLISHED, "not published yet (no MANIFEST.json: is the job still writing?); "
                     "read as found"))
    hint = sanity.rank(meta.get("rank"), f"{d / 'meta.json'}", mine)
    rank = num if hint is None else hint
    found.problems += [Problem(f"{safe(w)}: {t}", k, str(w), rank, _count(k, gone)) for w, k, t in said]
    found.problems += [p.with_rank(rank) if isinstance(p, Problem) else p for p in mine]
    lost = tuple(n for n in gone if trace_name(n))  # listed trace files that are absent: the rank is not whole
    if hint is None and num is not None:
        return RankTask(tuple(files), str(cache), num, meta, "directory name", expected=expected, lost=lost)
    return RankTask(tuple(files), str(cache), hint, meta, "meta.json", expected=expected, lost=lost)


def _count(kind: Kind, gone: list[str]) -> int:
    return len(gone) if kind is Kind.MANIFEST_ABSENT else 1


def _why_no_trace(num: int | None, has_manifest: bool) -> tuple[Kind, str]:
    """Kind and reason for a rank directory that holds no trace file and says nothing else."""
    if num is None:
        return Kind.STRAY, "not a rank directory (no rank number, no trace); ignored"
    if not has_manifest:
        return Kind.NOT_PUBLISHED, "not published yet (no MANIFEST.json: is the job still writing?)"
    return Kind.NO_TRACE, "no trace written (no profiling window completed: does the loop call prof.step()?)"


def _manifest(d: Path, problems: list[str]) -> tuple[tuple[str, int, str], ...]:
    """(name, size, sha256) of every file MANIFEST.json lists; odd entries are reported and skipped."""
    p = d / "MANIFEST.json"
    man = sanity.read_object(p, problems)
    files = sanity.typed(man, "files", list, p, problems) or []
    out, bad = [], 0
    for f in files:
        ok = isinstance(f, dict) and isinstance(f.get("path"), str) and type(f.get("size")) is int \
            and isinstance(f.get("sha256"), str)
        if ok:
            out.append((Path(f["path"]).name, f["size"], f["sha256"].lower()))
        else:
            bad += 1
    if bad:
        problems.append(Problem(f"{safe(p)}: {bad} entries without path, size and sha256; those files are not checked",
                                Kind.MANIFEST_ENTRIES, str(p), count=bad))
    return tuple(out)


def _plain_files(path: Path, problems: list[str]) -> list[Path]:
    """Trace files under a plain directory (links to directories not followed, ``analysis/`` skipped);
    a folder that cannot be listed and a link that leads nowhere are each said on one line."""
    out: list[Path] = []

    def unreadable(exc: OSError) -> None:
        where = exc.filename or path
        problems.append(Problem(f"{safe(where)}: directory unreadable ({exc.strerror or exc}); its traces are not read",
                                Kind.DIR_UNREADABLE, str(where)))

    for top, dirs, names in os.walk(path, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if d != "analysis")
        for n in sorted(names):
            p = Path(top) / n
            bad = _link_problem(p) if trace_name(n) and os.path.islink(p) else None
            if bad is not None:
                problems.append(Problem(f"{safe(p)}: {bad[1]}", bad[0], str(p), rank_from_name(p)))
            elif trace_name(n) and os.path.isfile(p):
                out.append(p)
            if len(out) > MAX_FILES:
                problems.append(Problem(f"{safe(path)}: more than {MAX_FILES} trace files; only the first are read",
                                        Kind.TOO_LARGE, str(path)))
                return sorted(out)
    return sorted(out)
