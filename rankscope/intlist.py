"""Integer lists as people write them: ``"0-3,7"`` <-> ``[0, 1, 2, 3, 7]`` (ranks, steps)."""
from __future__ import annotations

from typing import Iterable

MAX_SPAN = 1_000_000


def parse_int_list(spec: str) -> list[int]:
    """``"0-3,7"`` -> ``[0, 1, 2, 3, 7]``; raises ValueError with a readable message."""
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.strip().partition("-")
        try:
            lo, hi = int(a), int(b) if b else int(a)
        except ValueError:
            raise ValueError(f"{spec!r}: expected numbers and ranges like 0-3,7") from None
        if hi < lo or hi - lo >= MAX_SPAN:
            raise ValueError(f"{spec!r}: the range {part.strip()} is empty or too long (at most {MAX_SPAN:,})")
        out += range(lo, hi + 1)
    return out


def format_int_list(xs: Iterable[int]) -> str:
    """``[2, 3, 4, 9]`` -> ``"2-4,9"``."""
    out: list[str] = []
    run: list[int] = []
    for x in sorted(set(xs)):
        if run and x == run[-1] + 1:
            run.append(x)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [x]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)
