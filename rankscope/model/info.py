"""What rankscope knows about one rank, independent of its event tables."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rankscope.intlist import format_int_list


def compact_groups(groups: Any) -> list[dict[str, Any]]:
    """Process groups with their member ranks as a range string (``"0-4095"``), not a list.

    Every rank's trace lists every group it is in with all members: as Python lists that is
    world² integers over a run (1.5 GB of a 4,096-rank run's summaries); as ranges, a few bytes
    per group. ``intlist.parse_int_list`` gives the list back.
    """
    if not isinstance(groups, list):
        return []
    out = []
    for g in groups:
        if not isinstance(g, dict):
            continue
        ranks = g.get("ranks")
        if isinstance(ranks, list) and all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            g = {**g, "ranks": format_int_list(ranks)}
        out.append(g)
    return out


def compact_meta(meta: Any) -> Any:
    """meta.json with its process groups compacted (see :func:`compact_groups`)."""
    if isinstance(meta, dict) and isinstance(meta.get("process_groups"), list):
        return {**meta, "process_groups": compact_groups(meta["process_groups"])}
    return meta


@dataclass
class RankInfo:
    """One rank of a run: identity from content, sources, clock and problems. JSON-able."""

    rank: int
    world_size: int | None = None
    backend: str | None = None
    process_groups: list[dict[str, Any]] = field(default_factory=list)
    host: str | None = None
    run_id: str | None = None
    files: list[str] = field(default_factory=list)
    base_time_ns: int = 0
    clock_offset_ns: int | None = None
    clock_error_ns: int | None = None
    problems: list[str] = field(default_factory=list)
    partial: bool = False
    # Why the rank's data is not whole (truncated, CRC, MANIFEST mismatch, unreadable file): a damaged
    # rank is analyzed but never gives or takes part in a verdict.
    damage: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    time_range: tuple[int, int] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    rank_source: str = "content"
    cache: str | None = None

    def __post_init__(self) -> None:
        self.process_groups = compact_groups(self.process_groups)
        self.meta = compact_meta(self.meta)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RankInfo":
        d = dict(d)
        if d.get("time_range") is not None:
            d["time_range"] = tuple(d["time_range"])
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
