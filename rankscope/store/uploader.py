"""Background uploader: moves a rank's spool to shared storage without blocking training.

* bounded concurrency (``concurrency`` worker threads per rank);
* jittered start: each new file waits a random 0..``jitter_s`` seconds first, so thousands of
  ranks that flush at the same step do not hit storage in the same second;
* retries with exponential backoff (full jitter, capped at ``backoff_max_s``), forever while
  the process lives; one warning the first time storage fails;
* atomic publish: on file systems, upload to a hidden temporary name then rename (a rename
  within one directory is atomic on POSIX and SFTP); on object stores (S3, GCS, Azure) the
  object is written directly under its final key, because an object becomes visible only
  when its upload completes (single PUT, or CompleteMultipartUpload), never partially;
* ``ranks/<rank>/MANIFEST.json`` (sizes + sha256) is written after every file it lists, each
  time the queue drains: its presence marks the rank as published;
* :meth:`Uploader.close` waits a bounded time; what is left stays in the spool for
  ``rankscope upload --resume SPOOL``.
"""
from __future__ import annotations

import random
import threading
import time
import uuid
import warnings
from dataclasses import dataclass
from typing import Callable

from rankscope.store import layout
from rankscope.store.fs import Target, classify
from rankscope.store.spool import PENDING, STAGED, RankscopeWarning, Spool


@dataclass
class UploadConfig:
    """Knobs of the background uploader (defaults suit a large job)."""

    concurrency: int = 2
    jitter_s: float = 5.0
    backoff_base_s: float = 0.5
    backoff_max_s: float = 60.0
    exit_timeout_s: float = 30.0
    spool_max_bytes: int = 2 << 30
    gzip_level: int = 3
    # Nice value for the background threads (Linux: per thread). 0 = unchanged, the default: a
    # niced thread that holds the GIL when the OS preempts it stalls the training thread until
    # it runs again (measured: occasional 0.4-1.8 s stalls at nice 10 on a saturated 2-core host).
    nice: int = 0


def lower_thread_priority(nice: int) -> None:
    """Raise the calling thread's nice value (Linux: per thread), so training threads win the CPU.

    Exports, gzip and checksums are CPU work (mostly with the GIL released). Beware: Python code
    between those calls holds the GIL, and a low-priority thread preempted while holding it
    makes the training thread wait. No-op for ``nice <= 0`` or where per-thread priorities do
    not exist.
    """
    import os

    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), min(19, nice)))
    except OSError:
        pass


def publish_file(target: Target, local_path: str, rel: str, size: int) -> None:
    """Upload one local file to ``rel`` so that readers never see a partial file."""
    fs, dest = target.fs, target.path(rel)
    if target.object_store:
        fs.put_file(local_path, dest)
    else:
        fs.makedirs(target.path(rel.rsplit("/", 1)[0]) if "/" in rel else target.root, exist_ok=True)
        tmp = target.path(layout.tmp_rel(rel, uuid.uuid4().hex[:10]))
        try:
            fs.put_file(local_path, tmp)
            fs.mv(tmp, dest)
        except BaseException:
            try:
                fs.rm_file(tmp)
            except Exception:  # noqa: BLE001 - best effort; resume removes leftovers
                pass
            raise
    got = fs.size(dest)
    if got != size:
        raise OSError(f"{dest}: uploaded size {got} != {size}")


class Uploader:
    """Background threads draining one :class:`Spool` into one :class:`Target`."""

    def __init__(self, spool: Spool, target: Target, config: UploadConfig | None = None,
                 on_warning: Callable[[str], None] | None = None) -> None:
        self.spool, self.target = spool, target
        self.cfg = config or UploadConfig()
        self._cond = threading.Condition()
        self._not_before: dict[str, float] = {}
        self._attempts: dict[str, int] = {}
        self._inflight: set[str] = set()
        self._dirty = False
        self._stop = False
        self._warned = False
        self.last_error: str | None = None
        self.uploaded = 0
        self._warn = on_warning or (lambda m: warnings.warn(m, RankscopeWarning, stacklevel=2))
        self._threads = [threading.Thread(target=self._work, name=f"rankscope-upload-{i}", daemon=True)
                         for i in range(max(1, self.cfg.concurrency))]

    def start(self) -> Uploader:
        for t in self._threads:
            t.start()
        return self

    def kick(self) -> None:
        """Tell the workers new files are in the spool."""
        with self._cond:
            self._cond.notify_all()

    @property
    def warned(self) -> bool:
        return self._warned

    # ---- worker --------------------------------------------------------------------------
    def _pick(self) -> tuple[str | None, float]:
        """Next ready entry (or None) and seconds until one becomes ready."""
        now, soonest = time.monotonic(), 3600.0
        for e in self.spool.waiting():
            if e.rel in self._inflight:
                continue
            nb = self._not_before.setdefault(e.rel, now + random.uniform(0, self.cfg.jitter_s))
            if nb <= now:
                return e.rel, 0.0
            soonest = min(soonest, nb - now)
        return None, soonest

    def _work(self) -> None:
        lower_thread_priority(self.cfg.nice)
        while True:
            with self._cond:
                while True:
                    if self._stop:
                        return
                    rel, wait = self._pick()
                    if rel is None and self._dirty and not self._inflight:
                        rel = self._stage_manifest()
                    if rel is not None:
                        self._inflight.add(rel)
                        break
                    self._cond.wait(min(wait, 1.0))
            ok = False
            try:
                ok = self._one(rel)
            finally:
                with self._cond:
                    self._inflight.discard(rel)
                    if ok and rel != layout.manifest_rel(self.spool.rank):
                        self._dirty = True
                    self._cond.notify_all()

    def _stage_manifest(self) -> str:
        """Spool a fresh MANIFEST.json (called with the lock held, nothing in flight)."""
        self._dirty = False
        e = self.spool.add_bytes(layout.manifest_rel(self.spool.rank), self.spool.manifest(), kind="manifest")
        self._not_before[e.rel] = 0.0
        return e.rel

    def mark_dirty(self) -> None:
        """Force a MANIFEST.json rewrite once the queue drains (used by resume)."""
        with self._cond:
            self._dirty = True
            self._cond.notify_all()

    def _one(self, rel: str) -> bool:
        e = None
        try:
            e = self.spool.entries[rel]
            if e.state == STAGED:
                e = self.spool.compress(rel, self.cfg.gzip_level) or e
                if e.state != PENDING:
                    return False
            publish_file(self.target, self.spool.data_path(rel), rel, e.size)
            self.spool.mark_uploaded(rel, e.sha256)
            self.uploaded += 1
            self._attempts.pop(rel, None)
            self._not_before.pop(rel, None)
            return True
        except Exception as exc:  # noqa: BLE001 - storage errors are retried, never raised into training
            if self.spool.entries.get(rel) is not e:  # rewritten while uploading (meta.json): not a failure,
                return False  # the new version is pending and goes next
            self._failed(rel, exc)
            return False

    def _failed(self, rel: str, exc: Exception) -> None:
        n = self._attempts.get(rel, 0) + 1
        self._attempts[rel] = n
        delay = min(self.cfg.backoff_max_s, self.cfg.backoff_base_s * 2 ** (n - 1))
        self._not_before[rel] = time.monotonic() + random.uniform(0.5, 1.0) * delay
        self.last_error = (f"{type(exc).__name__}: {exc}".splitlines() or [type(exc).__name__])[0][:300]
        if not self._warned:
            self._warned = True
            try:
                kind = classify(exc)
            except Exception:  # noqa: BLE001 - a worker thread must survive any error
                kind = "error"
            self._warn(f"rankscope: cannot upload to {self.target.url} ({kind}: {self.last_error}); "
                       f"retrying in the background, files stay in spool {self.spool.dir} "
                       f"(finish later with `rankscope upload --resume {self.spool.dir}`)")

    # ---- draining ------------------------------------------------------------------------
    def idle(self) -> bool:
        """True when nothing waits, nothing is in flight and the manifest is current."""
        with self._cond:
            return not self._inflight and not self._dirty and not self.spool.waiting()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until idle (retrying failed files at once); True if everything was published."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            self._not_before = {k: min(v, time.monotonic()) for k, v in self._not_before.items()}
            self._cond.notify_all()
            while True:
                if not self._inflight and not self._dirty and not self.spool.waiting():
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.2 if left is None else min(0.2, left))

    def close(self, timeout_s: float | None = None) -> int:
        """Bounded wait for pending uploads, then stop; return how many files stay in the spool."""
        t = self.cfg.exit_timeout_s if timeout_s is None else timeout_s
        self.flush(t)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for th in self._threads:
            if th.is_alive():
                th.join(timeout=1.0)
        left = self.spool.waiting()
        if left and not self._warned:
            self._warned = True
            self._warn(f"rankscope: {len(left)} file(s) not uploaded to {self.target.url} "
                       f"({self.last_error or 'time ran out'}); they stay in spool {self.spool.dir}: "
                       f"run `rankscope upload --resume {self.spool.dir}`")
        return len(left)


@dataclass
class ResumeResult:
    """What ``upload --resume`` did for one spool."""

    spool: str
    url: str
    rank: int
    uploaded: int
    left: int
    verified: int
    bad: list[str]
    error: str | None


def verify_rank(target: Target, rank: int) -> tuple[int, list[str]]:
    """Check every file the rank's MANIFEST.json lists (size + sha256); (ok count, problems)."""
    import hashlib
    import json

    man = json.loads(target.fs.cat_file(target.path(layout.manifest_rel(rank))))
    ok: int = 0
    bad: list[str] = []
    for f in man["files"]:
        path = target.path(f"{layout.rank_dir(rank)}/{f['path']}")
        h = hashlib.sha256()
        with target.fs.open(path, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
        if h.hexdigest() == f["sha256"]:
            ok += 1
        else:
            bad.append(f"{f['path']}: sha256 differs")
    return ok, bad


def _remove_leftover_tmp(target: Target, rank: int) -> None:
    if target.object_store:
        return
    try:
        names = target.fs.ls(target.path(layout.rank_dir(rank)), detail=False)
    except FileNotFoundError:
        return
    for name in names:
        if layout.is_tmp(name.rsplit("/", 1)[-1]):
            target.fs.rm_file(name)


def _reconcile(sp: Spool, target: Target) -> None:
    """Make the journal agree with the spool's files (a process killed between two steps of a move)."""
    import os

    from rankscope.store.spool import sha256_file

    for e in sp.waiting():
        if e.state == PENDING and os.path.exists(sp.data_path(e.rel)):
            # Small files (meta.json, ...) are replaced in place: a kill between writing the new
            # version and the journal leaves the journal describing the old one. Files are always
            # complete (atomic rename), so the file on disk is the truth.
            e.size, e.sha256 = sha256_file(sp.data_path(e.rel))
        elif e.state == STAGED and not os.path.exists(sp.staging_path(e.rel)):
            e.state = "dropped"  # a staged export whose file vanished cannot be recovered
        elif e.state == PENDING and not os.path.exists(sp.data_path(e.rel)):
            try:  # uploaded, then killed before the journal said so?
                done = target.fs.size(target.path(e.rel)) == e.size
            except Exception:  # noqa: BLE001 - not there (or unreadable): nothing left to upload
                done = False
            e.state = "uploaded" if done else "dropped"
    with sp.lock:
        sp._save()


def resume(spool_dir: str, storage_options: dict | None = None, timeout_s: float | None = None,
           config: UploadConfig | None = None, verify: bool = True) -> ResumeResult:
    """Finish the uploads a (possibly killed) rank left in ``spool_dir``, then verify checksums."""
    import os

    from rankscope.store.fs import open_target

    sp = Spool.open(spool_dir)
    target = open_target(sp.url, storage_options)
    _reconcile(sp, target)
    cfg = config or UploadConfig(jitter_s=0.0, backoff_base_s=0.2, backoff_max_s=5.0)
    msgs: list[str] = []
    up = Uploader(sp, target, cfg, on_warning=msgs.append)
    try:
        _remove_leftover_tmp(target, sp.rank)
    except Exception as exc:  # noqa: BLE001 - reported as the error below if uploads fail too
        msgs.append(str(exc))
    up.start()
    up.mark_dirty()
    up.flush(timeout_s)
    left = up.close(0.0)
    ok, bad = 0, list[str]()
    if verify and left == 0:
        ok, bad = verify_rank(target, sp.rank)
    return ResumeResult(sp.dir, sp.url, sp.rank, up.uploaded, left, ok, bad, up.last_error if left else None)
