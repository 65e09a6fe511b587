"""Local spool: where a rank's files wait (on local disk) until they reach shared storage.

Layout of one rank's spool directory::

    SPOOL/spool.json      {"format": "rankscope.spool/1", "url", "rank", "run_id"}
    SPOOL/journal.json    every file: state (staged|pending|uploaded|dropped), size, sha256, seq
    SPOOL/data/<rel>      files waiting for upload, at their run-relative path
    SPOOL/staging/<rel>   raw (not yet gzipped) trace exports

The journal is rewritten atomically (temp file + rename) on every change, so a killed
process leaves a spool that ``rankscope upload --resume SPOOL`` can finish. Secrets
(storage options) are never written here. The spool keeps at most ``max_bytes`` of data
waiting: when full, the oldest trace windows are dropped with a warning.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

from rankscope.errors import RankscopeError
from rankscope.store import layout

STAGED, PENDING, UPLOADED, DROPPED = "staged", "pending", "uploaded", "dropped"
WAITING = (STAGED, PENDING)


class RankscopeWarning(UserWarning):
    """Something the user should know that does not stop training."""


@dataclass
class Entry:
    """One journal row."""

    rel: str
    state: str
    seq: int
    size: int = 0
    sha256: str = ""
    kind: str = "trace"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "seq": self.seq, "size": self.size, "sha256": self.sha256, "kind": self.kind}


def sha256_file(path: str) -> tuple[int, str]:
    """(size, sha256 hex) of a local file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
            n += len(block)
    return n, h.hexdigest()


def _atomic_write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class Spool:
    """One rank's spool directory. Thread-safe within a process."""

    def __init__(self, directory: str, info: dict[str, Any], entries: dict[str, Entry], max_bytes: int) -> None:
        self.dir = os.path.abspath(directory)
        self.info = info
        self.entries = entries
        self.max_bytes = max_bytes
        self.lock = threading.RLock()
        self._seq = max((e.seq for e in entries.values()), default=0)

    # ---- opening -------------------------------------------------------------------------
    @classmethod
    def create(cls, directory: str, url: str, rank: int, run_id: str, max_bytes: int = 2 << 30) -> Spool:
        """Create (or reopen) the spool of ``rank`` for run ``url``."""
        os.makedirs(directory, exist_ok=True)
        info = {"format": layout.SPOOL_FORMAT, "url": url, "rank": int(rank), "run_id": run_id}
        if os.path.exists(os.path.join(directory, "spool.json")):
            old = cls.open(directory, max_bytes)
            if old.info.get("url") == url and old.info.get("rank") == rank:
                return old
        _atomic_write(os.path.join(directory, "spool.json"), json.dumps(info).encode())
        sp = cls(directory, info, {}, max_bytes)
        sp._save()
        return sp

    @classmethod
    def open(cls, directory: str, max_bytes: int = 2 << 30) -> Spool:
        """Open an existing spool (e.g. left by a killed rank)."""
        try:
            with open(os.path.join(directory, "spool.json"), "rb") as f:
                info = json.load(f)
            with open(os.path.join(directory, "journal.json"), "rb") as f:
                raw = json.load(f)["files"]
        except (OSError, ValueError, KeyError) as exc:
            raise RankscopeError(f"{directory}: not a rankscope spool ({exc}); pass the directory "
                                 "that holds spool.json") from exc
        entries = {rel: Entry(rel=rel, **row) for rel, row in raw.items()}
        return cls(directory, info, entries, max_bytes)

    @property
    def rank(self) -> int:
        return int(self.info["rank"])

    @property
    def url(self) -> str:
        return str(self.info["url"])

    def data_path(self, rel: str) -> str:
        return os.path.join(self.dir, "data", *rel.split("/"))

    def staging_path(self, rel: str) -> str:
        """Where a raw JSON export for ``rel`` (a .gz path) is written before gzip."""
        base = rel[:-3] if rel.endswith(".gz") else rel
        return os.path.join(self.dir, "staging", *base.split("/"))

    def _save(self) -> None:
        body = {"files": {rel: e.to_json() for rel, e in self.entries.items()}}
        _atomic_write(os.path.join(self.dir, "journal.json"), json.dumps(body).encode())

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # ---- adding --------------------------------------------------------------------------
    def add_bytes(self, rel: str, data: bytes, kind: str = "meta") -> Entry:
        """Spool a small file (meta.json, run.json, ...); replaces an older version."""
        import hashlib as _h

        with self.lock:
            _atomic_write(self.data_path(rel), data)
            e = Entry(rel, PENDING, self._next_seq(), len(data), _h.sha256(data).hexdigest(), kind)
            self.entries[rel] = e
            self._save()
            return e

    def add_staged(self, rel: str) -> Entry:
        """Register a raw export already written at :meth:`staging_path` (gzip happens later)."""
        with self.lock:
            size = os.path.getsize(self.staging_path(rel))
            e = Entry(rel, STAGED, self._next_seq(), size, "", "trace")
            self.entries[rel] = e
            self._save()
        self.enforce_cap()
        return e

    def compress(self, rel: str, level: int = 3) -> Entry | None:
        """gzip a staged export into data/, hashing on the way; None if it was dropped meanwhile."""
        src, dst = self.staging_path(rel), self.data_path(rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        tmp = f"{dst}.tmp-{threading.get_ident()}"
        with open(src, "rb") as fin, open(tmp, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0) as gz:
                shutil.copyfileobj(fin, gz, 1 << 20)
        size, digest = sha256_file(tmp)
        with self.lock:
            e = self.entries.get(rel)
            if e is None or e.state != STAGED:
                os.remove(tmp)
                return None
            os.replace(tmp, dst)
            e.state, e.size, e.sha256 = PENDING, size, digest
            self._save()  # journal first: a kill before it leaves a STAGED entry that is simply redone
            os.remove(src)
            return e

    # ---- state ---------------------------------------------------------------------------
    def waiting(self) -> list[Entry]:
        """Entries not yet uploaded, oldest first."""
        with self.lock:
            return sorted((e for e in self.entries.values() if e.state in WAITING), key=lambda e: e.seq)

    def mark_uploaded(self, rel: str, sha256: str) -> bool:
        """Record a finished upload; False if the entry changed meanwhile (upload again)."""
        with self.lock:
            e = self.entries.get(rel)
            if e is None or e.state != PENDING or e.sha256 != sha256:
                return False
            e.state = UPLOADED
            self._save()  # journal first: a kill before the removal leaves only a stray local copy
            try:
                os.remove(self.data_path(rel))
            except FileNotFoundError:
                pass
            return True

    def waiting_bytes(self) -> int:
        with self.lock:
            return sum(e.size for e in self.entries.values() if e.state in WAITING)

    def enforce_cap(self) -> list[str]:
        """Drop the oldest waiting trace windows while over ``max_bytes``; return dropped paths."""
        dropped: list[str] = []
        with self.lock:
            total = self.waiting_bytes()
            for e in self.waiting():
                if total <= self.max_bytes:
                    break
                if e.kind != "trace":
                    continue
                for p in (self.data_path(e.rel), self.staging_path(e.rel)):
                    if os.path.exists(p):
                        os.remove(p)
                e.state = DROPPED
                total -= e.size
                dropped.append(e.rel)
            if dropped:
                self._save()
        if dropped:
            warnings.warn(f"rankscope: spool {self.dir} is over its cap of {self.max_bytes} bytes; dropped "
                          f"{len(dropped)} oldest window(s): {', '.join(dropped)}", RankscopeWarning, stacklevel=2)
        return dropped

    def manifest(self, created_ns: int | None = None) -> bytes:
        """MANIFEST.json body for this rank: every uploaded file under ranks/<rank>/."""
        prefix = layout.rank_dir(self.rank) + "/"
        man_rel = layout.manifest_rel(self.rank)
        with self.lock:
            files = [{"path": e.rel[len(prefix):], "size": e.size, "sha256": e.sha256}
                     for e in sorted(self.entries.values(), key=lambda e: e.rel)
                     if e.state == UPLOADED and e.rel.startswith(prefix) and e.rel != man_rel]
            dropped = sorted(e.rel[len(prefix):] for e in self.entries.values()
                             if e.state == DROPPED and e.rel.startswith(prefix))
        body = {"format": layout.MANIFEST_FORMAT, "rank": self.rank, "run_id": self.info.get("run_id"),
                "created_ns": created_ns or time.time_ns(), "files": files, "dropped": dropped}
        return json.dumps(body, indent=1).encode()


def find_spools(root: str) -> list[str]:
    """Every spool directory (holding spool.json) at or under ``root``, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        if "spool.json" in filenames:
            out.append(dirpath)
            dirnames[:] = []  # a spool's data/ never holds another spool
    return sorted(out)
