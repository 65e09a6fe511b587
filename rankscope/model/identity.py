"""Who a rank is, from its trace's content and its meta.json: rank, world size, backend and process groups from
``distributedInfo`` (content wins over meta.json and file names, a disagreement is said), then host, run id,
clock offsets and device memory, each value bounded (model/sanity.py): a bad value drops that field with one
line, never the rank.
"""
from __future__ import annotations

from typing import Any

from rankscope.model.info import Kind, Problem, RankInfo, compact_groups


def identity(info: RankInfo, raw: Any, rank_hint: int | None, hint_source: str) -> None:
    """Fill ``info``'s identity from one decoded trace ``raw`` (and the rank's meta.json, ``info.meta``)."""
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
        info.process_groups = compact_groups(groups(d.pg_config, raw.path, info.problems))
    elif info.rank < 0 and rank_hint is not None:
        info.rank, info.rank_source = rank_hint, hint_source
    if rank_hint is not None and content_rank is not None and rank_hint != content_rank:
        info.problems.append(Problem(f"{raw.path}: {hint_source} says rank {rank_hint} "
                                     f"but the trace content says rank {content_rank} (content wins)",
                                     Kind.IDENTITY, raw.path))
    from_meta(info, raw, info.meta)


def from_meta(info: RankInfo, raw: Any, meta: dict[str, Any]) -> None:
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


def groups(cfg: Any, path: str, problems: list[str]) -> list[dict[str, Any]]:
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
