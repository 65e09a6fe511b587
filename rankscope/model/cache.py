"""The Parquet cache of ingested ranks: one directory per rank and source version (``source_key``), its
tables and ``info.json`` (the RankInfo), written last so its presence marks a whole entry. Locally the
entry is written beside its final name and renamed; on object storage, uploaded file by file with
``info.json`` last.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from rankscope.model.info import RankInfo

CACHE_VERSION = "9"  # 9: the peers of sends / receives through a pipeline group the trace does not name (issue 25). 8: whole members of groups over 30 ranks, tids true / 1.0, problem records (issue 23). 7: events bytes / bandwidth / counters (issue 26). 6: collectives peer / issue time / all_to_all splits, is_comm of functional and FSDP spans (issue 25). 5: Ascend summary tables (issue 13). 4: RankInfo.damage, bounded fields (issue 11): older entries are re-read
TABLE_NAMES = ("events", "collectives", "memory", "steps", "comm_ops", "comm_links", "step_times")
ROW_GROUP = 1 << 17  # rows per Parquet row group: bounds the writer's buffers on very large ranks


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


def cached(cache_dir: str, files: tuple[str, ...], key: str) -> RankInfo | None:
    """The cache entry ``key`` of a rank read from ``files``, None when absent or unreadable."""
    from rankscope.store import source

    if source.is_url(cache_dir):  # the cache of a run on object storage, next to it
        url = source.join(cache_dir, key, "info.json")
        try:
            got = RankInfo.from_json(json.loads(source.read_text(url)))
        except (OSError, ValueError, TypeError):  # absent (FileNotFoundError) or unreadable: re-read
            return None
        got.cache = source.join(cache_dir, key)
        got.files = list(files)
        return got
    info = Path(cache_dir) / key / "info.json"
    if not info.exists():
        return None
    try:
        got = RankInfo.from_json(json.loads(info.read_text()))
    except (ValueError, TypeError):
        return None
    got.cache = str(info.parent)
    got.files = list(files)  # the run may have moved since it was cached
    return got


def write(info: RankInfo, parts: list[dict[str, Any]], cache_dir: str, key: str) -> RankInfo:
    """The cache entry ``key`` under ``cache_dir`` (a local directory or a URL) from the reader's tables."""
    from rankscope.store import source

    if source.is_url(cache_dir):
        return _write_remote(info, parts, source.join(cache_dir, key))
    return _write(info, parts, Path(cache_dir) / key)


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
