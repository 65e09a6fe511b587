"""What the hang analysis concludes, as plain data: the verdict with its problems, groups and ranks."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Verdict:
    headline: str
    problems: list[dict[str, Any]] = field(default_factory=list)  # first of each kind per group
    groups: list[dict[str, Any]] = field(default_factory=list)  # per group: members, last seq per rank
    ranks: list[int] = field(default_factory=list)
    no_dump: list[int] = field(default_factory=list)
