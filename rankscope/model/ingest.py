"""Per-rank ingest: trace files -> Parquet tables in the cache + a small RankInfo summary.

Runs inside worker processes; the parent only ever receives the summary, never raw events.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from rankscope.errors import TraceError
from rankscope.model.info import Kind, Problem, RankInfo, compact_groups, os_problem, prefixed

log = logging.getLogger(__name__)
CACHE_VERSION = "7"  # 7: events bytes / bandwidth / counters (issue 26). 6: collectives peer / issue time / all_to_all splits, is_comm of functional and FSDP spans (issue 25). 5: Ascend summary tables (issue 13). 4: RankInfo.damage, bounded fields (issue 11): older entries are re-read
TABLE_NAMES = ("events", "collectives", "memory", "steps", "comm_ops", "comm_links", "step_times")
ROW_GROUP = 1 << 17  # rows per Parquet row group: bounds the writer's buffers on very large ranks


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


def source_key(files: tuple[str, ...], expected: tuple[tuple[str, int, str], ...] = (),
               meta: dict[str, Any] | None = None) -> str:
    """Cache key: size, mtime and a hash of the first 64 KiB of every source file (objects on
    remote storage: size and ETag, no read), the MANIFEST entries they are checked against and
    the rank's meta.json."""
    from rankscope.store import source

    h = hashlib.sha256(CACHE_VERSION.encode())
    for e in expected:  # a changed MANIFEST re-checks the files
        h.update(repr(e).encode())
    if meta:  # meta.json feeds the RankInfo (host, clock offsets) and its problems: a change re-reads
        h.update(json.dumps(meta, sort_keys=True, default=str).encode("utf-8", "backslashreplace"))
    for f in files:
        h.update(f"{os.path.basename(f)}:{source.version(f)}".encode())
        if not source.is_url(f):
            with open(source.local_path(f), "rb") as fh:
                h.update(fh.read(65536))
    return h.hexdigest()[:24]


def cached(task: RankTask, key: str) -> RankInfo | None:
    from rankscope.store import source

    if source.is_url(task.cache_dir):  # the cache of a run on object storage, next to it
        url = source.join(task.cache_dir, key, "info.json")
        try:
            got = RankInfo.from_json(json.loads(source.read_text(url)))
        except (OSError, ValueError, TypeError):  # absent (FileNotFoundError) or unreadable: re-read
            return None
        got.cache = source.join(task.cache_dir, key)
        got.files = list(task.files)
        return got
    info = Path(task.cache_dir) / key / "info.json"
    if not info.exists():
        return None
    try:
        got = RankInfo.from_json(json.loads(info.read_text()))
    except (ValueError, TypeError):
        return None
    got.cache = str(info.parent)
    got.files = list(task.files)  # the run may have moved since it was cached
    return got


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
        key = source_key(task.files, task.expected, task.meta)
    except OSError as exc:
        kind, why = os_problem(getattr(exc, "filename", None) or where, exc)
        return TraceError(getattr(exc, "filename", None) or where, why, kind)
    except (TypeError, ValueError, RecursionError):  # an odd meta.json must not cost the rank
        key = source_key(task.files, task.expected)
    try:
        hit = cached(task, key)
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
    from rankscope.store import source

    if source.is_url(task.cache_dir):
        return _write_remote(info, parts, source.join(task.cache_dir, key))
    return _write(info, parts, Path(task.cache_dir) / key)


def _read_kineto(task: RankTask) -> tuple[RankInfo, list[dict[str, Any]]] | TraceError:
    from rankscope.model import sanity

    parts: list[dict[str, Any]] = []
    errors: list[TraceError] = []
    # meta.json as discovery checked it (said there); checked again for callers that skip discovery
    info = RankInfo(rank=-1, files=list(task.files), meta=sanity.clean(task.meta or {}, sanity.META, "meta.json", []))
    expected = {name: (size, sha) for name, size, sha in task.expected}
    for f in task.files:
        try:
            raw, tabs, problems = _read_one(f)
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
        _identity(info, raw, task)
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


def _read_one(f: str) -> tuple[Any, dict[str, Any], list[str]]:
    """Stream a large file (bounded memory); read small or unusual ones whole (salvages damage)."""
    from rankscope.model import stream, tables
    from rankscope.model.readers import kineto

    if stream.inflated_size(f) >= stream.stream_threshold():
        raw: Any = stream.StreamTrace(f)
        try:
            tabs, problems = tables.build(raw)
            return raw, tabs, problems
        except stream.StreamFallback as why:
            log.debug("%s: not streamed (%s); reading it whole", f, why)
    raw = kineto.decode(f)
    tabs, problems = tables.build(raw)
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
        tabs = mindinsight.step_tables(Path(task.files[0]), int(meta.get("device_id", 0)))
    except (OSError, ValueError, KeyError, IndexError, csv.Error, pa.ArrowException) as exc:
        return TraceError(task.files[0], f"not a MindSpore step trace ({str(exc)[:200]})")
    return info, [tabs]


READERS: dict[str, Callable[[RankTask], "tuple[RankInfo, list[dict[str, Any]]] | TraceError"]] = {
    "kineto": _read_kineto, "ascend": _read_ascend, "mindinsight": _read_mindinsight,
}


def _identity(info: RankInfo, raw: Any, task: RankTask) -> None:
    from rankscope.model import sanity

    from rankscope.model.readers.kineto import dist_info

    d = dist_info(raw.trace)
    if raw.trace.distributedInfo is not None and d is None:
        info.problems.append(Problem(f"{raw.path}: distributedInfo is not an object; ignored", Kind.BAD_FIELD, raw.path))
    content_rank = sanity.rank(d.rank, f"{raw.path}: distributedInfo", info.problems) if d is not None else None
    if d is not None and content_rank is not None:
        if info.rank >= 0 and info.rank != content_rank:
            info.problems.append(Problem(f"{raw.path}: distributedInfo says rank {content_rank}, "
                                         f"other files of this rank say {info.rank}", Kind.IDENTITY, raw.path))
        info.rank, info.rank_source = content_rank, "content"
        info.world_size = sanity.world_size(d.world_size, f"{raw.path}: distributedInfo", info.problems)
        info.backend = d.backend if isinstance(d.backend, str) else None
        info.process_groups = compact_groups(_groups(d.pg_config, raw.path, info.problems))
    elif info.rank < 0 and task.rank_hint is not None:
        info.rank, info.rank_source = task.rank_hint, task.hint_source
    if task.rank_hint is not None and content_rank is not None and task.rank_hint != content_rank:
        info.problems.append(Problem(f"{raw.path}: {task.hint_source} says rank {task.rank_hint} "
                                     f"but the trace content says rank {content_rank} (content wins)",
                                     Kind.IDENTITY, raw.path))
    _from_meta(info, raw, info.meta)


def _from_meta(info: RankInfo, raw: Any, meta: dict[str, Any]) -> None:
    """Host, run id, clock offsets and device memory from meta.json and the trace header, each
    bounded (model/sanity.py): a bad value drops that field with one line, never the rank."""
    from rankscope.model import sanity

    info.base_time_ns = sanity.base_time(raw.trace.baseTimeNanoseconds, raw.path, info.problems)
    where = f"meta.json of rank {info.rank}"
    info.host = _str(meta.get("host")) or info.host
    info.run_id = _str(meta.get("run_id")) or info.run_id
    info.world_size = info.world_size or sanity.world_size(meta.get("world_size"), where, info.problems)
    info.backend = info.backend or _str(meta.get("backend"))
    clock: dict[str, Any] = meta["clock"] if isinstance(meta.get("clock"), dict) else {}
    info.clock_offset_ns = sanity.clock_offset(clock.get("offset_to_rank0_ns"), where, info.problems)
    info.clock_error_ns = sanity.clock_offset(clock.get("offset_error_ns"), where, info.problems)
    props = raw.trace.deviceProperties
    if props is not None and not (isinstance(props, list) and all(isinstance(p, dict) for p in props)):
        info.problems.append(Problem(f"{raw.path}: deviceProperties is not a list of objects; ignored",
                                     Kind.BAD_FIELD, raw.path))
        props = None
    dev = meta.get("device")
    total = device_memory(props, dev if isinstance(dev, str) else None)
    if total:
        info.meta = {**info.meta, "device_memory_bytes": total}


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _groups(cfg: Any, path: str, problems: list[str]) -> list[dict[str, Any]]:
    """Process groups from distributedInfo.pg_config; odd entries (not an object, members not a list
    of ranks) are left out with one line."""
    from rankscope.model.sanity import MAX_WORLD

    if cfg is None:
        return []
    items = cfg if isinstance(cfg, list) else [cfg]
    out = []
    for p in items:
        ranks = p.get("ranks") if isinstance(p, dict) else False
        if ranks is None or (isinstance(ranks, list) and len(ranks) <= MAX_WORLD
                             and all(type(r) is int and 0 <= r < MAX_WORLD for r in ranks)):
            out.append({"name": _str(p.get("pg_name")) or "", "desc": _str(p.get("pg_desc")) or "", "ranks": ranks})
    if len(out) < len(items):
        n = len(items) - len(out)
        problems.append(Problem(f"{path}: {n} entries of distributedInfo.pg_config are not process groups "
                                "(an object with a list of ranks); left out", Kind.BAD_FIELD, path, count=n))
    return out


def device_memory(props: list[dict[str, Any]] | None, device: str | None) -> int | None:
    """Total memory of the rank's device from Kineto's ``deviceProperties`` (``totalGlobalMem``).

    The rank's own device (meta.json "cuda:N") when known, else the first device listed.
    """
    if not props:
        return None
    want = int(device.split(":")[1]) if device and ":" in device and device.split(":")[1].isdigit() else None
    chosen = next((p for p in props if want is not None and p.get("id") == want), props[0])
    v = chosen.get("totalGlobalMem")
    return int(v) if isinstance(v, (int, float)) and v > 0 else None


def _write_remote(info: RankInfo, parts: list[dict[str, Any]], url: str) -> RankInfo:
    """The cache entry written locally, then uploaded file by file with info.json last (an object
    store publishes each object whole, so info.json still marks a complete entry)."""
    import tempfile

    from rankscope.store import source

    fs, root = source.filesystem(url)
    with tempfile.TemporaryDirectory(prefix="rankscope-cache-") as tmp:
        got = _write_files(info, parts, Path(tmp))
        for name in TABLE_NAMES:
            fs.put_file(str(Path(tmp) / f"{name}.parquet"), f"{root}/{name}.parquet")
        fs.put_file(str(Path(tmp) / "info.json"), f"{root}/info.json")
    got.cache = url
    return got


def _write(info: RankInfo, parts: list[dict[str, Any]], out: Path) -> RankInfo:
    """The cache entry ``out``, whole or absent: written into a private directory beside it, then renamed.

    Two readers of one rank at once (the web server's run table and page, two ``analyze`` runs) each
    write their own entry; the first rename wins and the other's copy is dropped. Writing in place let
    one thread truncate ``events.parquet`` while another read it (a 500 in the served UI)."""
    import shutil
    import threading

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        got = _write_files(info, parts, tmp)
        try:
            os.rename(tmp, out)
        except OSError:
            if (out / "info.json").exists():  # another writer's whole entry: keep it
                pass
            elif out.is_dir():  # a partial entry left by an interrupted older version: replace it
                shutil.rmtree(out, ignore_errors=True)
                os.rename(tmp, out)
            else:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    got.cache = str(out)
    return got


def _write_files(info: RankInfo, parts: list[dict[str, Any]], out: Path) -> RankInfo:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    for name in TABLE_NAMES:
        from rankscope.model import schema

        got = [p.get(name, schema.empty(name)) for p in parts]  # Ascend-only tables are empty elsewhere
        t = pa.concat_tables(got).unify_dictionaries() if len(got) > 1 else got[0]
        if name in ("events", "collectives", "steps", "memory") and t.num_rows:
            t = t.sort_by("ts") if name != "events" else t
        info.counts[name] = t.num_rows
        # Parquet dictionary pages only for the (interned) string columns: dictionary-encoding the
        # int64 columns (ts, ids) builds a hash table per column for ~no gain: 3x the write time,
        # +25 MB peak RSS and a larger file on df_index_resolver.
        dict_cols = [f.name for f in t.schema if pa.types.is_dictionary(f.type)]
        pq.write_table(t, out / f"{name}.parquet", compression="zstd", use_dictionary=dict_cols or False,
                       row_group_size=ROW_GROUP)
        if name == "events" and t.num_rows:
            import pyarrow.compute as pc

            ends = pc.add(t.column("ts"), t.column("dur"))
            info.time_range = (int(pc.min(t.column("ts")).as_py()), int(pc.max(ends).as_py()))
    tmp = out / "info.json.tmp"
    tmp.write_text(json.dumps(info.to_json()))
    os.replace(tmp, out / "info.json")  # written last: its presence means the cache entry is whole
    info.cache = str(out)
    return info
