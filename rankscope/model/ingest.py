"""Per-rank ingest: trace files -> Parquet tables in the cache + a small RankInfo summary.

Runs inside worker processes; the parent only ever receives the summary, never raw events. Pattern: a
task names its reader (``READERS``: Kineto, Ascend, MindInsight); the reader returns the RankInfo and the
tables, or a ``TraceError``; the cache (``model/cache.py``) is looked up first and written after. Who the
rank is comes from ``model/identity.py``.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from rankscope.errors import TraceError
from rankscope.model import cache
from rankscope.model.cache import CACHE_VERSION, TABLE_NAMES  # noqa: F401 - where callers found them before
from rankscope.model.identity import device_memory, identity  # noqa: F401 - device_memory: as above
from rankscope.model.info import Kind, Problem, RankInfo, compact_groups, os_problem, prefixed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RankTask:
    """What one worker ingests: the files of one rank (or one file whose rank is unknown yet)."""

    files: tuple[str, ...]
    cache_dir: str
    rank_hint: int | None = None
    meta: dict[str, Any] | None = None
    hint_source: str = "meta.json"
    reader: str = "kineto"  # key of READERS
    root: str | None = None  # the directory an "ascend" task reads
    # (file name, size, sha256) per file from the rank's MANIFEST.json: checked while the file is read.
    expected: tuple[tuple[str, int, str], ...] = ()
    # trace files the MANIFEST lists that are absent (discovery said so): the rank is not whole
    lost: tuple[str, ...] = ()


def ingest(task: RankTask) -> RankInfo | TraceError:
    """Decode, build tables, write Parquet; a fully unreadable rank comes back as a TraceError.

    Never raises (it runs in pool workers: whatever happens comes back as plain data, one line)."""
    got = _ingest(task)
    if task.lost and isinstance(got, RankInfo):  # said by discovery; marked here, after the cache
        got.damage += [f"{n}: listed in MANIFEST.json, absent" for n in task.lost]
        got.partial = True
    return got


def _ingest(task: RankTask) -> RankInfo | TraceError:
    where = task.files[0] if task.files else str(task.root)
    try:
        key = cache.source_key(task.files, task.expected, task.meta)
    except OSError as exc:
        kind, why = os_problem(getattr(exc, "filename", None) or where, exc)
        return TraceError(getattr(exc, "filename", None) or where, why, kind)
    except (TypeError, ValueError, RecursionError):  # an odd meta.json must not cost the rank
        key = cache.source_key(task.files, task.expected)
    try:
        hit = cache.cached(task.cache_dir, task.files, key)
        if hit is not None:
            return hit
        with system_pool():
            return _ingest_uncached(task, key)
    except TraceError as err:
        return err
    except OSError as exc:
        kind, why = os_problem(getattr(exc, "filename", None) or where, exc)
        return TraceError(getattr(exc, "filename", None) or where, why, kind)
    except RecursionError:
        return TraceError(where, "JSON nested too deeply to be a trace", Kind.TOO_DEEP)
    except Exception as exc:  # noqa: BLE001 - a worker must hand back one line, never crash the pool
        log.debug("ingest of %s failed", task.files, exc_info=True)
        return TraceError(where, f"could not be read ({exc.__class__.__name__}: {exc}); "
                          "rerun with --debug for details", Kind.READER_FAILED)


@contextlib.contextmanager
def system_pool() -> Iterator[None]:
    """Arrow's default pool (mimalloc/jemalloc) keeps freed chunk buffers around for reuse: ~20-30 MB
    of peak RSS per rank here. The system allocator returns them; restored afterwards."""
    import pyarrow as pa

    old = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(old)


def _ingest_uncached(task: RankTask, key: str) -> RankInfo | TraceError:
    got = READERS[task.reader](task)
    if isinstance(got, TraceError):
        return got
    info, parts = got
    return cache.write(info, parts, task.cache_dir, key)


def _read_kineto(task: RankTask) -> tuple[RankInfo, list[dict[str, Any]]] | TraceError:
    from rankscope.model import sanity

    parts: list[dict[str, Any]] = []
    errors: list[TraceError] = []
    # meta.json as discovery checked it (said there); checked again for callers that skip discovery
    info = RankInfo(rank=-1, files=list(task.files), meta=sanity.clean(task.meta or {}, sanity.META, "meta.json", []))
    expected = {name: (size, sha) for name, size, sha in task.expected}
    for f in task.files:
        try:
            raw, tabs, problems = _read_one(f, info.meta.get("layout"))
        except TraceError as err:
            if len(task.files) == 1:
                return err
            errors.append(err)
            info.problems.append(Problem(str(err), err.kind, err.path))
            info.damage.append(f"{os.path.basename(f)} unreadable")
            info.partial = True
            continue
        info.problems += [prefixed(f, p) for p in raw.problems + problems]
        damage = _damage(f, raw, expected.get(os.path.basename(f)))
        info.problems += [Problem(f"{os.path.dirname(f)}/{d}", d.kind, f) for d in damage  # said like the rest
                          if isinstance(d, Problem) and d.kind == Kind.MANIFEST_MISMATCH.value]
        info.damage += damage
        info.partial |= bool(info.damage)
        identity(info, raw, task.rank_hint, task.hint_source)
        del raw
        parts.append(tabs)
    if not parts:
        return TraceError(task.files[0], "no readable trace among the rank's files",
                          errors[0].kind if errors else Kind.NO_USABLE_EVENTS)
    if not any(p["events"].num_rows for p in parts):  # nothing usable left: the rank is dropped, with why
        why = "; ".join(x.split(": ", 1)[-1] for x in info.problems[:3]) or "no usable events"
        kinds = {getattr(p, "kind", "") for p in info.problems}
        return TraceError(task.files[0] if len(task.files) == 1 else os.path.dirname(task.files[0]),
                          f"no usable trace events ({why})",
                          Kind.NO_EVENTS if Kind.NO_EVENTS.value in kinds else Kind.NO_USABLE_EVENTS)
    return info, parts


def _damage(f: str, raw: Any, want: tuple[int, str] | None) -> list[str]:
    """Why this file's content is not whole: truncation, gzip CRC, or a MANIFEST size/sha256 mismatch
    (the hash was computed while the file was read: no second pass). Problem lines ("name: why")."""
    name = os.path.basename(f)
    out: list[str] = [prefixed(name, d) for d in (raw.source.damage if raw.source else [])]
    if raw.partial and not out:
        out.append(Problem(f"{name}: truncated", Kind.TRUNCATED, f))
    if want is not None and raw.source is not None and raw.source.size:
        size, sha = want
        if raw.source.size != size:
            out.append(Problem(f"{name}: size {raw.source.size} differs from MANIFEST.json ({size})",
                               Kind.MANIFEST_MISMATCH, f))
        elif raw.source.sha256 != sha:
            out.append(Problem(f"{name}: sha256 differs from MANIFEST.json", Kind.MANIFEST_MISMATCH, f))
    return out


def _read_one(f: str, layout: Any = None) -> tuple[Any, dict[str, Any], list[str]]:
    """Stream a large file (bounded memory); read small or unusual ones whole (salvages damage). ``layout``:
    meta.json's (the pipeline's group, where the trace does not name the group of a send / receive)."""
    from rankscope.model import stream, tables
    from rankscope.model.readers import kineto

    if stream.inflated_size(f) >= stream.stream_threshold():
        raw: Any = stream.StreamTrace(f)
        try:
            tabs, problems = tables.build(raw, layout)
            return raw, tabs, problems
        except stream.StreamFallback as why:
            log.debug("%s: not streamed (%s); reading it whole", f, why)
    raw = kineto.decode(f)
    tabs, problems = tables.build(raw, layout)
    return raw, tabs, problems


def _read_ascend(task: RankTask) -> tuple[RankInfo, list[dict[str, Any]]] | TraceError:
    from rankscope.model.readers.ascend import reader
    from rankscope.model.readers.ascend import torch_npu as ascend

    d = Path(task.root or task.files[0])
    said: list[str] = []
    rank, source, dist = ascend.identity(d, said)
    meta = {**(task.meta or {}), **({"distributed_args": dist} if dist else {}), "ascend_export": reader.export_form(d)}
    info = RankInfo(rank=-1 if rank is None else rank, files=list(task.files), meta=meta,
                    rank_source=source, world_size=dist.get("world_size"), backend=dist.get("backend") or "hccl",
                    process_groups=compact_groups(ascend.process_groups(d)))
    try:
        tabs, problems, partial = reader.read(d)
    except TraceError as err:
        err.rank = rank  # known from profiler_info: the rank is named missing with this reason
        return err
    info.problems += said + problems
    info.partial = partial
    return info, [tabs]


def _read_mindinsight(task: RankTask) -> tuple[RankInfo, list[dict[str, Any]]] | TraceError:
    import csv

    import pyarrow as pa

    from rankscope.model.readers.ascend import mindinsight

    meta = dict(task.meta or {})
    info = RankInfo(rank=-1 if task.rank_hint is None else task.rank_hint, files=list(task.files), meta=meta,
                    rank_source=task.hint_source if task.rank_hint is not None else "unknown",
                    backend="hccl", host=str(meta.get("host", "")))
    try:
        tabs = mindinsight.step_tables(Path(task.files[0]), int(meta.get("device_id", 0)), info.problems)
    except (OSError, ValueError, KeyError, IndexError, csv.Error, pa.ArrowException) as exc:
        return TraceError(task.files[0], f"not a MindSpore step trace ({str(exc)[:200]})", Kind.BAD_TABLE,
                          task.rank_hint)
    if not tabs["steps"].num_rows:
        why = f" ({info.problems[0].split(': ', 1)[-1]})" if info.problems else ""
        return TraceError(task.files[0], f"no step rows in this MindSpore step trace{why}", Kind.NO_USABLE_EVENTS,
                          task.rank_hint)
    return info, [tabs]


READERS: dict[str, Callable[[RankTask], "tuple[RankInfo, list[dict[str, Any]]] | TraceError"]] = {
    "kineto": _read_kineto, "ascend": _read_ascend, "mindinsight": _read_mindinsight,
}
