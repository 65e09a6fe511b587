"""Tiny hand-made Kineto traces for unit tests."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write_trace(path: Path, events: list[dict[str, Any]], rank: int | None = 0, world: int = 2,
                gz: bool = False, backend: str = "gloo") -> Path:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"backend": backend, "rank": rank, "world_size": world,
                                  "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                                 "ranks": list(range(world))}]}
    data = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path
