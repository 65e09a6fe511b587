"""User-facing errors: one clear line saying what, where and what to do."""
from __future__ import annotations


class RankscopeError(Exception):
    """A user-facing error: one clear line."""


class TraceError(RankscopeError):
    """A trace file that cannot be read (fully or partly)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
