"""User-facing errors: one clear line saying what, where and what to do."""
from __future__ import annotations

import re


class RankscopeError(Exception):
    """A user-facing error: one clear line."""


class TraceError(RankscopeError):
    """A trace file that cannot be read (fully or partly).

    Plain data: it travels back from ingest worker processes, so it must pickle. Exception's default
    pickling calls ``cls(*self.args)`` with the one formatted message, which does not fit this
    two-argument constructor and used to break the whole process pool (``BrokenProcessPool``).
    """

    def __init__(self, path: str, problem: str, kind: str = "other", rank: int | None = None) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem
        self.kind = str(getattr(kind, "value", kind))  # a rankscope.model.info.Kind value: what went wrong
        self.rank = rank  # the rank the file belongs to, when its reader learned it before failing

    def __reduce__(self) -> tuple[type, tuple[str, str, str, int | None]]:
        return (self.__class__, (self.path, self.problem, self.kind, self.rank))


# C0/C1 control characters (ESC, CR, LF, BEL, ...), DEL and lone surrogates: never sent raw to a terminal.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def safe(text: object) -> str:
    """``text`` with control characters (terminal escape sequences, newlines) and lone surrogates
    escaped, so a file name cannot move the cursor, recolor the terminal or forge extra lines.

    >>> safe("a\\x1b[31mb\\nc")
    'a\\\\x1b[31mb\\\\nc'
    """
    s = str(text)
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), s)
