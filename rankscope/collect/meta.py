"""Rank metadata written with each window: who the rank is, where, and how its clock relates.

Clock offset to rank 0 is estimated NTP-style over the c10d store at profile start: rank r
writes its send time t0, rank 0 answers with its own wall time t1, rank r reads the answer at
t3; offset = t1 - (t0 + t3) / 2 with error bound (t3 - t0) / 2, best (smallest round trip) of
``rounds`` exchanges. Rank 0 serves the ranks one after another, so the start-up cost grows
with the number of ranks (about rounds x 3 store round trips per rank).

Host names never enter the run directory: ranks get aliases ``node-0, node-1, ...`` in the
order rank 0 first sees each host; the alias -> host map is written only where asked, with
owner-only permissions.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from rankscope.store import layout as L


@dataclass
class RankIdentity:
    """Who this rank is (plain data, JSON-able)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    backend: str | None = None
    process_groups: list[dict[str, Any]] = field(default_factory=list)
    device: str = "cpu"
    host: str = "node-0"
    pid: int = field(default_factory=os.getpid)
    offset_to_rank0_ns: int | None = None
    offset_error_ns: int | None = None
    hosts: list[str] = field(default_factory=lambda: ["node-0"])
    host_map: dict[str, str] = field(default_factory=dict)  # rank 0 only; never written to the run
    # rank 0 only: the groups of every rank (a rank knows only the groups it is in), for run.json
    all_groups: list[dict[str, Any]] = field(default_factory=list)


def anchor(when: str) -> dict[str, Any]:
    """A wall/monotonic clock pair."""
    return {"when": when, "wall_ns": time.time_ns(), "mono_ns": time.monotonic_ns()}


def versions() -> dict[str, str]:
    """torch and rankscope versions."""
    import torch

    from rankscope.version import __version__

    return {"rankscope": __version__, "torch": str(torch.__version__)}


def _device() -> str:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return f"cuda:{torch.cuda.current_device()}"
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():  # Ascend (torch_npu); not testable here
        return f"npu:{npu.current_device()}"
    return "cpu"


def _dist() -> Any | None:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def identify() -> RankIdentity:
    """Rank, world, backend, process groups and device of this process (no communication)."""
    dist = _dist()
    ident = RankIdentity(local_rank=int(os.environ.get("LOCAL_RANK", 0)), device=_device())
    if dist is None:
        ident.rank = int(os.environ.get("RANK", 0))
        ident.world_size = int(os.environ.get("WORLD_SIZE", 1))
        return ident
    ident.rank, ident.world_size = dist.get_rank(), dist.get_world_size()
    ident.backend = str(dist.get_backend())
    try:
        cfgs = dist.distributed_c10d._get_all_pg_configs()
        ident.process_groups = [{"name": str(c["pg_name"]), "desc": str(c.get("pg_desc", "")),
                                 "ranks": [int(r) for r in c["ranks"]]} for c in cfgs]
    except Exception:  # noqa: BLE001 - private torch API; metadata is best effort
        ident.process_groups = [{"name": "0", "desc": "default_pg", "ranks": list(range(ident.world_size))}]
    return ident


def _wait_get(store: Any, key: str, timeout_s: float) -> bytes:
    store.wait([key], timedelta(seconds=timeout_s))
    return bytes(store.get(key))


def _serve(store: Any, p: str, ranks: list[int], rounds: int, timeout_s: float, ident: RankIdentity) -> None:
    """Rank 0: give every other rank a host alias and answer its clock probes."""
    aliases: dict[str, str] = {socket.gethostname(): "node-0"}
    groups = {(g["name"], str(g["ranks"])): g for g in ident.process_groups}
    for r in ranks:
        try:
            host = _wait_get(store, f"{p}/host/{r}", timeout_s).decode()
            with contextlib.suppress(ValueError, KeyError, TypeError):  # groups are metadata: best effort
                for g in json.loads(store.get(f"{p}/groups/{r}")):
                    groups.setdefault((str(g["name"]), str(g["ranks"])), g)
            alias = aliases.setdefault(host, f"node-{len(aliases)}")
            store.set(f"{p}/alias/{r}", alias)
            for k in range(rounds):
                _wait_get(store, f"{p}/q/{r}/{k}", timeout_s)
                store.set(f"{p}/a/{r}/{k}", str(time.time_ns()))
        except Exception:  # noqa: BLE001 - a rank that never comes is reported as missing later
            timeout_s = min(timeout_s, 1.0)
    ident.hosts = list(aliases.values())
    ident.host_map = {a: h for h, a in aliases.items()}
    ident.all_groups = list(groups.values())


def _probe(store: Any, p: str, rank: int, rounds: int, timeout_s: float) -> tuple[int, int]:
    best: tuple[int, int] | None = None
    for k in range(rounds):
        t0 = time.time_ns()
        store.set(f"{p}/q/{rank}/{k}", str(t0))
        t1 = int(_wait_get(store, f"{p}/a/{rank}/{k}", timeout_s))
        t3 = time.time_ns()
        cand = (t1 - (t0 + t3) // 2, (t3 - t0) // 2)
        if best is None or cand[1] < best[1]:
            best = cand
    assert best is not None
    return best


def handshake(ident: RankIdentity, session: str, ranks: list[int], rounds: int = 5,
              timeout_s: float = 30.0) -> RankIdentity:
    """Fill host alias and clock offset through the default c10d store (all ranks in ``ranks`` call it)."""
    ident.offset_to_rank0_ns, ident.offset_error_ns = (0, 0) if ident.rank == 0 else (None, None)
    dist = _dist()
    if dist is None:
        return ident
    store = dist.distributed_c10d._get_default_store()
    p = f"rankscope/{session}"
    if ident.rank == 0:
        _serve(store, p, [r for r in ranks if r != 0], rounds, timeout_s, ident)
        return ident
    if ident.rank not in ranks:
        return ident
    try:
        store.set(f"{p}/groups/{ident.rank}", json.dumps(ident.process_groups))  # before the host: rank 0 reads it then
        store.set(f"{p}/host/{ident.rank}", socket.gethostname())
        ident.host = _wait_get(store, f"{p}/alias/{ident.rank}", timeout_s).decode()
        ident.offset_to_rank0_ns, ident.offset_error_ns = _probe(store, p, ident.rank, rounds, timeout_s)
    except Exception:  # noqa: BLE001 - rank 0 absent or slow: metadata says "unknown"
        ident.host = f"node-?r{ident.rank}"
    return ident


def write_host_map(path: str, host_map: dict[str, str]) -> None:
    """Write alias -> host name to ``path`` with owner-only permissions (0600)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps({"format": "rankscope.hostmap/1", "hosts": host_map}, indent=1).encode())
    finally:
        os.close(fd)


def meta_doc(ident: RankIdentity, run_id: str, anchors: list[dict[str, Any]], windows: list[dict[str, Any]],
             metadata: dict[str, Any], layout: dict[str, int] | None, vers: dict[str, str],
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """ranks/<rank>/meta.json per docs/contract.md."""
    doc = {"format": L.META_FORMAT, "run_id": run_id, "rank": ident.rank, "local_rank": ident.local_rank,
           "world_size": ident.world_size, "host": ident.host, "pid": ident.pid, "device": ident.device,
           "backend": ident.backend, "process_groups": ident.process_groups, "layout": layout,
           "versions": vers,
           "clock": {"anchors": anchors, "offset_to_rank0_ns": ident.offset_to_rank0_ns,
                     "offset_error_ns": ident.offset_error_ns},
           "windows": windows, "metadata": metadata, "host_cpus": os.cpu_count()}
    doc.update(extra or {})
    return doc


def run_doc(ident: RankIdentity, run_id: str, ranks_expected: list[int], layout: dict[str, int] | None,
            vers: dict[str, str]) -> dict[str, Any]:
    """run.json per docs/contract.md (written by rank 0)."""
    return {"format": L.RUN_FORMAT, "run_id": run_id, "world_size": ident.world_size,
            "ranks_expected": ranks_expected, "created_ns": time.time_ns(), "hosts": ident.hosts,
            "process_groups": ident.all_groups or ident.process_groups, "layout": layout, "versions": vers}


def as_dict(ident: RankIdentity) -> dict[str, Any]:
    """JSON-able view without the private host map."""
    d = asdict(ident)
    d.pop("host_map", None)
    return d
