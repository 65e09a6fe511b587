"""Find the ranks of a run: one task per rank directory (rankscope run) or per trace file.

Everything read here (run.json, meta.json, MANIFEST.json, directory listings) may be missing, damaged,
hostile or still being written: each problem becomes one line in ``Found.problems`` (or a reason in
``Found.absent`` for a rank that cannot be read at all), never an exception, except when there is
nothing to analyze at all (then one ``RankscopeError`` line saying what to do).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rankscope.errors import RankscopeError, safe
from rankscope.model import sanity
from rankscope.model.info import compact_meta
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


def is_trace(p: Path) -> bool:
    try:
        return p.name.endswith(TRACE_SUFFIXES) and p.name not in _NOT_TRACES and not p.name.startswith(("comms.", "rpc.")) \
            and not p.name.endswith(".collectives.json.gz") and p.is_file()
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
            found.problems.append(f"{safe(m.profiler_dir)}: {why}")
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
    raw = sanity.read_object(p, problems)
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
            problems.append(f"{safe(p)}: {len(exp) - len(ok)} entries of 'ranks_expected' are not valid ranks; ignored")
        man["ranks_expected"] = sorted(set(ok))
    return man


def _rank_dirs(ranks: Path, cache: Path, found: Found) -> None:
    try:
        dirs = sorted((d for d in ranks.iterdir() if d.is_dir()), key=lambda d: d.name)
    except OSError as exc:
        raise RankscopeError(f"{safe(ranks)}: cannot list ({exc.strerror or exc})") from exc
    published = any((d / "MANIFEST.json").exists() for d in dirs)
    for d in dirs:
        task = _rank_dir_task(d, cache, found, published)
        if task is not None:
            found.tasks.append(task)


def _rank_dir_task(d: Path, cache: Path, found: Found, published: bool) -> RankTask | None:
    num = int(d.name) if d.name.isdigit() and len(d.name) < 8 else None
    try:
        files = tuple(str(p) for p in sorted(d.iterdir()) if is_trace(p))
    except OSError as exc:
        why = f"directory unreadable ({exc.strerror or exc})"
        found.problems.append(f"{safe(d)}: {why}")
        if num is not None:
            found.absent[num] = why
        return None
    has_manifest = (d / "MANIFEST.json").exists()
    expected = _manifest(d, found.problems) if has_manifest else ()
    if not files:
        listed = any(n.endswith(TRACE_SUFFIXES) for n, _, _ in expected)
        why = "not published yet (no MANIFEST.json: is the job still writing?)" if not has_manifest else \
            "no readable trace file (removed, or a broken link?)" if listed else \
            "no trace written (no profiling window completed: does the loop call prof.step()?)"
        found.problems.append(f"{safe(d)}: {why}")
        if num is not None:
            found.absent[num] = why
        return None
    meta: dict[str, Any] = {}
    if (d / "meta.json").exists():
        # world-sized member lists in every rank's meta.json: O(world²) memory unless compacted
        meta = compact_meta(sanity.read_object(d / "meta.json", found.problems))
    if published and not has_manifest:
        found.problems.append(f"{safe(d)}: not published yet (no MANIFEST.json: is the job still writing?); "
                              "read as found")
    hint = sanity.rank(meta.get("rank"), f"{d / 'meta.json'}", found.problems)
    if hint is None and num is not None:
        return RankTask(files, str(cache), num, meta, "directory name", expected=expected)
    return RankTask(files, str(cache), hint, meta, "meta.json", expected=expected)


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
        problems.append(f"{safe(p)}: {bad} entries without path, size and sha256; those files are not checked")
    return tuple(out)


def _plain_files(path: Path, problems: list[str]) -> list[Path]:
    out: list[Path] = []
    try:
        for p in path.rglob("*"):
            if "analysis" in p.relative_to(path).parts or not is_trace(p):
                continue
            out.append(p)
            if len(out) > MAX_FILES:
                problems.append(f"{safe(path)}: more than {MAX_FILES} trace files; only the first are read")
                break
    except OSError as exc:
        problems.append(f"{safe(path)}: not every folder could be listed ({exc.strerror or exc})")
    return sorted(out)
