"""One rank's odd data must not stop the whole analysis: a per-rank step that raises becomes a
``Failed`` part naming the rank and the error; ``split`` keeps the other ranks and the reasons, which
the analysis reports in its summary (``problems``) instead of dropping the rank silently."""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Failed:
    reason: str


def guarded(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``fn(data)``, or ``Failed`` with one line saying which rank and what went wrong."""

    @functools.wraps(fn)
    def part(d: Any) -> Any:
        try:
            return owned(fn(d))
        except Exception as exc:  # any error of one rank is reported, the other ranks go on
            log.debug("%s failed on rank %s", fn.__module__, d.rank, exc_info=True)
            return Failed(f"rank {d.rank}: {type(exc).__name__}: {exc}"[:300])

    return part


def owned(part: Any) -> Any:
    """``part`` with each polars frame in it (in dicts, lists, tuples) copied into buffers of its own.

    Why: a small polars result (strings joined per group, a join's names) can point into the large buffers
    of the frames it came from and keep them alive while it waits for ``combine``; aten_kernels' 30 KB of
    tables held 7 MB through the rest of the per-rank pass (issue 26, bench/RESULTS.md)."""
    if isinstance(part, dict):
        return {k: owned(v) for k, v in part.items()}
    if isinstance(part, (list, tuple)) and not hasattr(part, "_fields"):
        return type(part)(owned(v) for v in part)
    if type(part).__name__ == "DataFrame" and type(part).__module__.startswith("polars"):
        import polars as pl

        try:  # Arrow's (oldest) layout copies strings into one buffer; back in polars the frame owns them
            copy = pl.from_arrow(part.to_arrow())
        except Exception:  # noqa: BLE001 - a type Arrow cannot carry (Object): keep the frame as it is
            return part
        return copy if isinstance(copy, pl.DataFrame) and copy.schema == part.schema else part
    return part


def split(parts: list[tuple[int, Any]]) -> tuple[list[tuple[int, Any]], list[str]]:
    """(the ranks' parts that are there, the reasons of those that failed)."""
    return ([(r, p) for r, p in parts if p is not None and not isinstance(p, Failed)],
            [p.reason for _, p in parts if isinstance(p, Failed)])


def with_problems(problems: list[str], res: Any) -> Any:
    """``res`` with the failed ranks' reasons in its summary (and in its skip reason when skipped)."""
    if problems:
        res.summary = {**res.summary, "problems": problems}
        if res.skipped:
            res.skipped = f"{res.skipped}; failed: {'; '.join(problems)}"
    return res
