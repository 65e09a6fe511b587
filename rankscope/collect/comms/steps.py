"""The training step in progress, for the collective recorder: which step each collective belongs to.

``rankscope.profile`` marks every ``step()`` here (or a job calls :func:`mark` itself). The timed engine
writes the step into each entry (``step``); a dump from either engine carries the marks
(``rankscope_steps``: ``[[step, wall_ns it began], ...]``) and the step in progress (``rankscope.step``), so
``rankscope hang`` can say which step a Flight Recorder entry was issued in (by its creation time).
On the training thread: one clock read and one deque append per step.
"""
from __future__ import annotations

import collections
import time

MAX_MARKS = 4096  # a dump keeps the last 4096 steps' marks (a ring of 2000 entries covers fewer)


class Steps:
    """The step in progress and when each recent step began (wall clock)."""

    def __init__(self) -> None:
        self.current: int | None = None
        self.marks: collections.deque[tuple[int, int]] = collections.deque(maxlen=MAX_MARKS)

    def mark(self, step: int) -> None:
        """Step ``step`` begins now."""
        self.current = int(step)
        self.marks.append((self.current, time.time_ns()))

    def as_list(self) -> list[list[int]]:
        """The marks, oldest first, as a dump writes them (safe while the training thread marks)."""
        return [list(m) for m in list(self.marks)]


STEPS = Steps()


def mark(step: int) -> None:
    """Tell the collective recorder that training step ``step`` begins now (``rankscope.profile`` does this)."""
    STEPS.mark(step)
