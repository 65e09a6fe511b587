"""A thin capture used by the demo until the full collection API lands.

Wraps ``torch.profiler.profile`` with a schedule and writes each rank's window into the run
directory in the layout of docs/contract.md (trace, meta.json, MANIFEST.json; run.json by rank 0).
"""
from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import torch
import torch.distributed as dist


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _process_groups() -> list[dict[str, Any]]:
    world = dist.get_world_size()
    return [{"name": "0", "desc": "default_pg", "ranks": list(range(world))}]


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


@contextlib.contextmanager
def capture(run: str, *, warmup: int, active: int, metadata: dict[str, Any]) -> Iterator[Any]:
    rank, world = dist.get_rank(), dist.get_world_size()
    rdir = Path(run) / "ranks" / str(rank)
    rdir.mkdir(parents=True, exist_ok=True)
    anchors = [{"when": "start", "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()}]
    first_step = warmup
    files: list[str] = []

    def on_ready(prof: torch.profiler.profile) -> None:
        name = f"rank{rank}.w{len(files)}.pt.trace.json"
        tmp = rdir / (name + ".tmp")
        prof.export_chrome_trace(str(tmp))
        with open(tmp, "rb") as src, gzip.open(rdir / (name + ".gz"), "wb", compresslevel=3) as dst:
            dst.write(src.read())
        tmp.unlink()
        files.append(name + ".gz")

    acts = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    sched = torch.profiler.schedule(wait=0, warmup=warmup, active=active, repeat=1)
    with torch.profiler.profile(activities=acts, schedule=sched, on_trace_ready=on_ready,
                                record_shapes=True, profile_memory=True) as prof:
        yield prof
    anchors.append({"when": "end", "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()})
    meta = {
        "format": "rankscope.meta/1", "run_id": Path(run).name, "rank": rank,
        "local_rank": int(os.environ.get("LOCAL_RANK", rank)), "world_size": world,
        "host": "node-0", "pid": os.getpid(),
        "device": "cuda:%d" % torch.cuda.current_device() if torch.cuda.is_available() else "cpu",
        "backend": dist.get_backend(), "process_groups": _process_groups(), "layout": {"dp": world},
        "versions": {"torch": torch.__version__, "rankscope": _version()},
        "clock": {"anchors": anchors, "offset_to_rank0_ns": None, "offset_error_ns": None},
        "windows": [{"index": i, "steps": list(range(first_step, first_step + active)), "file": f}
                    for i, f in enumerate(files)],
        "metadata": metadata,
    }
    _write_json_atomic(rdir / "meta.json", meta)
    manifest = {"format": "rankscope.manifest/1", "rank": rank,
                "files": [{"path": p.name, "size": p.stat().st_size, "sha256": _sha256(p)}
                          for p in sorted(rdir.iterdir()) if p.name != "MANIFEST.json"]}
    _write_json_atomic(rdir / "MANIFEST.json", manifest)
    if rank == 0:
        _write_json_atomic(Path(run) / "run.json", {
            "format": "rankscope.run/1", "run_id": Path(run).name, "world_size": world,
            "ranks_expected": list(range(world)), "created_ns": anchors[0]["wall_ns"],
            "hosts": ["node-0"], "process_groups": _process_groups(), "layout": {"dp": world},
            "versions": meta["versions"], "demo": metadata,
        })


def _version() -> str:
    from rankscope import __version__

    return __version__
