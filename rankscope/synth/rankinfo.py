"""Who a synthetic rank is: process ids, device, streams, and its trace's header fields."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rankscope.synth.config import SynthConfig

DEVICE = {"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85097971712, "computeMajor": 8, "computeMinor": 0,
          "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
          "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 108, "regsPerMultiprocessor": 65536,
          "sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936}
NCCL_VERSION = "2.21.5"


@dataclass(frozen=True)
class RankIdentity:
    """Stable per-rank identifiers (derived from the seed)."""

    rank: int
    local_rank: int
    host: str
    pid: int
    autograd_tid: int
    device: int
    compute_stream: int
    nccl_streams: dict[str, int]  # process group name -> stream id
    ext_base: int
    corr_base: int
    mem_base: int

    @classmethod
    def make(cls, cfg: SynthConfig, rank: int) -> RankIdentity:
        """Identity of ``rank``: pids are random but reproducible, streams follow NCCL's habits."""
        rng = np.random.default_rng([cfg.seed, rank, 3])
        pid = int(rng.integers(1_000, 4_000_000))
        local = rank % cfg.gpus_per_host
        groups = cfg.groups_of(rank)
        names = sorted({g.name for g in groups.values() if g.name}, key=int)
        streams = {name: 40 + 4 * i for i, name in enumerate(names)}
        return cls(rank, local, f"node-{rank // cfg.gpus_per_host}", pid, pid + int(rng.integers(50, 9_000)),
                   local, 7, streams, int(rng.integers(1, 5_000)), int(rng.integers(10_000, 90_000)),
                   int(rng.integers(2, 8)) << 30)


def distributed_info(cfg: SynthConfig, rank: int) -> dict[str, Any]:
    """``distributedInfo`` as torch writes it: the groups this rank belongs to."""
    pgs = [g for g in cfg.process_groups() if rank in g.ranks]
    return {"backend": "nccl", "rank": rank, "world_size": cfg.ranks, "pg_count": len(pgs),
            "pg_config": [{"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl",
                           "pg_size": len(g.ranks), "ranks": list(g.ranks)} for g in pgs],
            "nccl_version": NCCL_VERSION}


def header(cfg: SynthConfig, ident: RankIdentity, base_ns: int, trace_id: str, path: str) -> dict[str, Any]:
    """Top-level keys of the trace file, in torch's order (``traceEvents`` is added later)."""
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": i, **DEVICE} for i in range(cfg.gpus_per_host)],
            "distributedInfo": distributed_info(cfg, ident.rank), "record_shapes": 1, "profile_memory": 1,
            "trace_id": trace_id, "displayTimeUnit": "ms", "baseTimeNanoseconds": base_ns,
            "traceName": path}


def metadata_events(ident: RankIdentity, ts: float, span_end: float) -> list[dict[str, Any]]:
    """Process / thread name events, the profiler span and the window instants."""
    def m(name: str, pid: int | str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
        return {"ph": "M", "name": name, "ts": ts, "pid": pid, "tid": tid, "args": args}

    p, d = ident.pid, ident.device
    ev = [m("process_name", p, 0, {"name": "python3.11"}), m("process_labels", p, 0, {"labels": "CPU"}),
          m("process_sort_index", p, 0, {"sort_index": p}),
          m("process_name", d, 0, {"name": "python3.11"}), m("process_labels", d, 0, {"labels": f"GPU {d}"}),
          m("process_sort_index", d, 0, {"sort_index": 16777216 + d})]
    for tid, label in ((p, "python"), (ident.autograd_tid, "pt_autograd_0")):
        ev += [m("thread_name", p, tid, {"name": f"thread {tid} ({label})"}),
               m("thread_sort_index", p, tid, {"sort_index": tid})]
    for stream in [ident.compute_stream, *ident.nccl_streams.values()]:
        ev += [m("thread_name", d, stream, {"name": f"stream {stream} "}),
               m("thread_sort_index", d, stream, {"sort_index": stream})]
    ev.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
               "ts": ts, "dur": round(span_end - ts, 3), "args": {"Op count": 0}})
    ev.append({"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces",
               "tid": "Trace PyTorch Profiler", "ts": ts})
    ev.append({"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": span_end})
    return ev
