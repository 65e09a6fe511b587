"""Spool-first trace handling: export locally, return at once, upload in the background.

:func:`trace_handler` is a drop-in for ``torch.profiler.tensorboard_trace_handler``::

    import torch, rankscope
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
                                on_trace_ready=rankscope.trace_handler("s3://bucket/runs/exp1")) as p:
        for batch in loader:
            train_step(batch)
            p.step()

The training loop pays only for torch's own ``stop_trace``; the Kineto JSON export
(:mod:`rankscope.collect.export`), gzip, checksums and the upload happen on background
threads (:mod:`rankscope.store.uploader`).
"""
from __future__ import annotations

import atexit
import json
import os
import re
import tempfile
import time
import warnings
from typing import Any

from rankscope.collect import meta as M
from rankscope.collect.export import Exporter, detach_result, warn_failed
from rankscope.store import layout as L
from rankscope.store.fs import open_target, probe
from rankscope.store.spool import RankscopeWarning, Spool
from rankscope.store.uploader import UploadConfig, Uploader


def default_run_id(url: str) -> str:
    """Run id from the last component of the run URL (the same on every rank)."""
    tail = url.rstrip("/").rsplit("/", 1)[-1] or "run"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", tail)


def default_spool_dir(run_id: str, rank: int) -> str:
    """``$RANKSCOPE_SPOOL`` (or the temp dir's rankscope-spool) / run id / rank-N."""
    root = os.environ.get("RANKSCOPE_SPOOL") or os.path.join(tempfile.gettempdir(), "rankscope-spool")
    return os.path.join(root, run_id, f"rank-{rank}")


class Collector:
    """One rank's writer of windows + metadata into a spool drained to the run directory."""

    def __init__(self, run: str, ident: M.RankIdentity, *, run_id: str | None = None, spool_dir: str | None = None,
                 storage_options: dict[str, Any] | None = None, upload: UploadConfig | None = None,
                 metadata: dict[str, Any] | None = None, layout: dict[str, int] | None = None,
                 ranks_expected: list[int] | None = None, probe_timeout_s: float = 10.0) -> None:
        self.run, self.ident = run, ident
        self.run_id = run_id or default_run_id(run)
        self.cfg = upload or UploadConfig()
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.layout = layout
        self.ranks_expected = ranks_expected if ranks_expected is not None else list(range(ident.world_size))
        self.windows: list[dict[str, Any]] = []
        self._exported: set[str] = set()
        self.anchors: list[dict[str, Any]] = [M.anchor("start")]
        self.extra: dict[str, Any] = {}
        self.versions = M.versions()
        self.target = open_target(run, storage_options)
        # Configuration errors raise here, before training begins; a dead store only warns.
        self.unreachable = probe(self.target, ident.rank, probe_timeout_s)
        sdir = spool_dir or default_spool_dir(self.run_id, ident.rank)
        self.spool = Spool.create(sdir, run, ident.rank, self.run_id, self.cfg.spool_max_bytes)
        self.uploader = Uploader(self.spool, self.target, self.cfg)
        self.exporter = Exporter(self._staged, self._export_failed, self.cfg.nice)
        if self.unreachable:
            self.uploader._warned = True  # one warning in all, this one
            warnings.warn(f"rankscope: storage {run} unreachable at start ({self.unreachable}); training goes on, "
                          f"traces stay in spool {self.spool.dir} (later: `rankscope upload --resume "
                          f"{self.spool.dir}`)", RankscopeWarning, stacklevel=3)

    def open(self) -> Collector:
        """Start uploading; rank 0 spools run.json; every rank spools its meta.json."""
        self.uploader.start()
        if self.ident.rank == 0:
            doc = M.run_doc(self.ident, self.run_id, self.ranks_expected, self.layout, self.versions)
            self.spool.add_bytes(L.RUN_JSON, json.dumps(doc, indent=1).encode(), kind="run")
        self.write_meta()
        return self

    def write_meta(self) -> None:
        doc = M.meta_doc(self.ident, self.run_id, self.anchors, self.windows, self.metadata, self.layout,
                         self.versions, self.extra)
        self.spool.add_bytes(L.meta_rel(self.ident.rank), json.dumps(doc, indent=1).encode(), kind="meta")
        self.uploader.kick()

    def add_window(self, prof: Any, steps: list[int], start_wall_ns: int | None, *, sync: bool = False,
                   **extra: Any) -> str:
        """Record the window and export ``prof``'s trace to the spool (raw JSON; gzip later).

        The export runs on a background thread when the backend allows it
        (:func:`rankscope.collect.export.detach_result`), else (or with ``sync``) here.
        """
        index = len(self.windows)
        name = L.window_name(index)
        rel = L.trace_rel(self.ident.rank, name)
        staging = self.spool.staging_path(rel)
        self.windows.append({"index": index, "steps": list(steps), "file": name + L.TRACE_SUFFIX,
                             "start_wall_ns": start_wall_ns, "end_wall_ns": time.time_ns(), **extra})
        result = None if sync else detach_result(prof)
        if result is None:
            self.exporter.wait(self.cfg.exit_timeout_s)  # keep windows in order
            os.makedirs(os.path.dirname(staging), exist_ok=True)
            prof.export_chrome_trace(staging)
            self._staged(rel)
        else:
            self.exporter.submit(result, staging, rel)
        return rel

    def add_window_collectives(self, index: int, data: bytes) -> str:
        """Spool the recorder's entries of window ``index`` beside its trace (``window-NNNN.collectives.json.gz``)."""
        name = L.window_name(index) + L.COLLECTIVES_SUFFIX
        rel = f"{L.RANKS_DIR}/{self.ident.rank}/{name}"
        self.spool.add_bytes(rel, data, kind="comms")
        for w in self.windows:
            if w.get("index") == index:
                w["collectives_file"] = name
        self.write_meta()
        return rel

    def add_comms(self, path: str, reason: str) -> str:
        """Spool a collective recorder dump (``comms.Recorder``) as ``ranks/<r>/comms.<n>-<reason>.rank<r>.json.gz``
        (gzipped JSON: readable without unpickling) for upload with the run."""
        from rankscope.collect.comms import as_json_gz

        n = len([e for e in self.spool.entries if "/comms." in e]) + 1
        tag = re.sub(r"[^A-Za-z0-9]+", "-", reason)[:24] or "dump"
        rel = f"{L.RANKS_DIR}/{self.ident.rank}/comms.{n:04d}-{tag}.rank{self.ident.rank}.json.gz"
        self.spool.add_bytes(rel, as_json_gz(path), kind="comms")
        self.extra.setdefault("comms_dumps", []).append({"file": rel.rsplit("/", 1)[-1], "reason": reason,
                                                         "wall_ns": time.time_ns()})
        self.write_meta()
        return rel

    def add_rpc(self, doc: dict[str, Any]) -> str:
        """Spool the RPC calls of a profile (``rankscope.collect.rpc.runfiles``) as ``ranks/<r>/rpc.<n>.json.gz``."""
        import gzip

        n = len([e for e in self.spool.entries if "/rpc." in e])
        rel = L.rpc_rel(self.ident.rank, n)
        self.spool.add_bytes(rel, gzip.compress(json.dumps(doc).encode(), 3), kind="rpc")
        self.extra.setdefault("rpc_files", []).append({"file": rel.rsplit("/", 1)[-1], "calls": len(doc["calls"]),
                                                       "gaps": len(doc["gaps"])})
        self.write_meta()
        return rel

    def _staged(self, rel: str) -> None:
        self.spool.add_staged(rel)
        self._exported.add(rel.rsplit("/", 1)[-1])
        self.write_meta()

    def _export_failed(self, rel: str, exc: BaseException) -> None:
        name = rel.rsplit("/", 1)[-1]
        for w in self.windows:
            if w.get("file") == name:
                w["error"] = f"export failed: {type(exc).__name__}: {exc}"[:300]
        warn_failed(rel, exc)
        self.write_meta()

    def window_json(self, index: int = -1) -> bytes:
        """Raw Kineto JSON of window ``index`` (after its export), from the spool or the run directory."""
        import gzip

        self.exporter.wait(self.cfg.exit_timeout_s)
        rel = L.trace_rel(self.ident.rank, L.window_name(self.windows[index]["index"]))
        # staging -> data (gz) -> run: the order files move in, so a file moving meanwhile is still found
        for path, gz in ((self.spool.staging_path(rel), False), (self.spool.data_path(rel), True)):
            try:
                with open(path, "rb") as f:
                    data = f.read()
                return gzip.decompress(data) if gz else data
            except FileNotFoundError:
                continue
        return gzip.decompress(self.target.fs.cat_file(self.target.path(rel)))

    def close(self, timeout_s: float | None = None) -> int:
        """End anchor, final meta.json, bounded wait for uploads; files left in the spool."""
        t = self.cfg.exit_timeout_s if timeout_s is None else timeout_s
        t0 = time.monotonic()
        if not self.exporter.close(t):  # a window still exporting at exit is lost: meta.json says so
            for w in self.windows:
                if w["file"] not in self._exported and "error" not in w:
                    w["error"] = f"export not finished within {t:g} s at close"
        self.anchors.append(M.anchor("end"))
        self.write_meta()
        return self.uploader.close(max(0.0, t - (time.monotonic() - t0)))


def steps_of_window(prof: Any, first_seen: int) -> list[int]:
    """Steps a plain torch.profiler window covered, from its schedule (best effort).

    In ``step()`` torch calls ``on_trace_ready`` after incrementing ``step_num``, so the last
    recorded step is ``step_num - 1`` when the schedule said RECORD_AND_SAVE there; in
    ``stop()`` it is ``step_num`` itself.
    """
    from torch.profiler import ProfilerAction as A

    sched, n = prof.schedule, int(prof.step_num)
    last = n - 1 if n > 0 and sched(n - 1) == A.RECORD_AND_SAVE else n
    first = last
    while first - 1 >= first_seen and sched(first - 1) == A.RECORD:
        first -= 1
    return list(range(first, last + 1))


class TraceHandler:
    """Callable ``on_trace_ready`` handler; see :func:`trace_handler`.

    Storage is opened and probed at construction (a bad URL or missing credentials raise
    before training starts, and the probe's I/O stays off the first flush); the rank
    handshake and run.json/meta.json wait for the first window, when every rank is there.
    """

    def __init__(self, run: str, **options: Any) -> None:
        self.run, self.options = run, options
        self._next_first = 0
        self._opened = False
        self.collector: Collector | None = Collector(run, M.identify(), **options)
        atexit.register(self.close)

    def _open(self) -> Collector:
        # All ranks reach their first window at the same step, so the alias/clock handshake
        # (a few store round trips) can happen here. torch.distributed may have been
        # initialized since construction: identify again.
        ident = M.identify()
        run_id = self.options.get("run_id") or default_run_id(self.run)
        M.handshake(ident, f"{run_id}/handler", list(range(ident.world_size)))
        col = self.collector
        if col is None or col.ident.rank != ident.rank:  # rank unknown at construction: reopen for the real one
            col = self.collector = Collector(self.run, ident, **self.options)
        col.ident = ident
        if "ranks_expected" not in self.options:
            col.ranks_expected = list(range(ident.world_size))
        self._opened = True
        col.exporter.call(col.open)  # run.json, meta.json, uploader start: off the training thread too
        return col

    def __call__(self, prof: Any) -> None:
        col = self.collector if self._opened and self.collector is not None else self._open()
        steps = steps_of_window(prof, self._next_first)
        self._next_first = (steps[-1] + 1) if steps else self._next_first
        col.add_window(prof, steps, None)

    def close(self, timeout_s: float | None = None) -> int:
        """Wait (bounded) for exports and uploads (also run at exit); return files left in the spool."""
        atexit.unregister(self.close)
        col, self.collector = self.collector, None
        if col is None or not self._opened:
            return 0
        return col.close(timeout_s)


def trace_handler(run: str, *, run_id: str | None = None, spool_dir: str | None = None,
                  storage_options: dict[str, Any] | None = None, upload: UploadConfig | None = None,
                  metadata: dict[str, Any] | None = None) -> TraceHandler:
    """``on_trace_ready`` handler that spools each window locally and uploads it to ``run``.

    Drop-in for ``tensorboard_trace_handler(dir)``: files land at
    ``run/ranks/<rank>/window-NNNN.pt.trace.json.gz`` with meta.json and MANIFEST.json.
    At the first window, ranks exchange host aliases and clock probes over the c10d store.
    Call ``.close()`` to wait for uploads early; otherwise it happens at exit (bounded).
    """
    return TraceHandler(run, run_id=run_id, spool_dir=spool_dir, storage_options=storage_options,
                        upload=upload, metadata=metadata)
