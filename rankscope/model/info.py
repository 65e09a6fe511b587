"""What rankscope knows about one rank, independent of its event tables, and the problems said
about its files (``Problem``: one line plus kind, file, rank and count as fields)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
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


class Kind(str, Enum):
    """What a problem with the input is (closed set; ``Problem.kind`` holds the value)."""

    EMPTY = "empty_file"
    NOT_JSON = "not_json"
    NOT_A_TRACE = "not_a_trace"  # valid JSON, not a trace (a number, a string, traceEvents not a list)
    NOT_AN_OBJECT = "not_an_object"  # run.json / meta.json / MANIFEST.json that is not a JSON object
    TOO_DEEP = "nested_too_deeply"
    TOO_LARGE = "too_large"
    GZIP_BOMB = "gzip_bomb"
    GZIP_DAMAGED = "gzip_damaged"  # header or stream broken: the content is cut
    GZIP_CHECK = "gzip_check_failed"  # CRC / length trailer wrong or missing, content complete
    TRUNCATED = "truncated_json"
    NO_EVENTS = "no_events"
    NO_USABLE_EVENTS = "no_usable_events"
    FILE_UNREADABLE = "file_unreadable"
    DIR_UNREADABLE = "directory_unreadable"
    SYMLINK_LOOP = "symlink_loop"
    BROKEN_LINK = "broken_link"
    NOT_PUBLISHED = "not_published"
    NO_TRACE = "no_trace"
    READER_FAILED = "reader_failed"  # an unexpected error or a crashed reader process
    MANIFEST_MISMATCH = "manifest_mismatch"  # size or sha256 differs
    MANIFEST_ABSENT = "manifest_lists_absent_file"
    MANIFEST_ENTRIES = "manifest_bad_entries"
    BYTE_ORDER_MARK = "byte_order_mark"
    INVALID_TEXT = "invalid_text"  # invalid UTF-8, lone surrogates, names that are not strings
    NAN = "nan_values"
    MALFORMED_EVENTS = "malformed_events"
    UNSUPPORTED_EVENTS = "unsupported_events"
    BAD_TIMESTAMP = "bad_timestamp"
    BAD_DURATION = "bad_duration"
    BAD_PID_TID = "bad_pid_tid"
    UNNAMED_EVENTS = "unnamed_events"
    UNKNOWN_CATEGORY = "unknown_category"
    BAD_STEP = "bad_step_number"
    BAD_COLLECTIVE_ARGS = "bad_collective_args"
    BAD_FIELD = "bad_field"  # a value of the wrong type or out of bounds (trace header, side files)
    BAD_TABLE = "unreadable_table"  # a CSV / summary file that could not be read (Ascend's outputs)
    IDENTITY = "identity_conflict"  # rank / run id disagreements, duplicates, ranks of another run
    RANK_UNKNOWN = "rank_unknown"
    STRAY = "not_a_rank_directory"
    MISSING_FILE = "missing_file"  # a file the format holds is absent (Ascend's analysis.db, a rank table)
    NOT_A_DATABASE = "not_a_database"  # a SQLite file that cannot be opened or queried (Ascend's DB export)
    BAD_ROWS = "bad_rows"  # rows of a table file (CSV) that are not rows of that table: left out
    NOT_CAPTURED = "not_captured"  # what the collector itself wrote down as not captured (RPC gaps)
    GROUP_CUT = "group_members_cut"  # a process group listed only in part (Kineto stops at 30 members)
    OTHER = "other"


class Problem(str):
    """One line said about the input, carrying what it is about as fields.

    ``kind`` (a ``Kind`` value), ``file`` (the file or directory, "" for none), ``rank`` (None until
    known) and ``n`` (events, fields or entries repaired or dropped; 1 for a whole file). A ``str``
    (the line itself), so every reader of a ``problems`` list keeps working while tests and tools
    match the fields, never the wording. The fields survive pickling (pool workers, Dask) and
    ``record`` / ``from_record`` (the JSON cache, ``--json``).

    >>> p = Problem("x.json: empty file", Kind.EMPTY, "x.json")
    >>> p.at_rank(3), p.at_rank(3).rank
    ('rank 3: x.json: empty file', 3)
    """

    kind: str
    file: str
    rank: int | None
    n: int  # the count ("count" in ``record``; the name ``count`` is str.count)

    def __new__(cls, text: str, kind: Kind | str, file: str = "", rank: int | None = None,
                count: int = 1) -> "Problem":
        self = super().__new__(cls, text)
        self.kind, self.file, self.rank, self.n = Kind(kind).value, str(file), rank, int(count)
        return self

    def __reduce__(self) -> tuple[type, tuple[str, str, str, int | None, int]]:
        return (Problem, (str(self), self.kind, self.file, self.rank, self.n))

    def at_rank(self, rank: int) -> "Problem":
        """The line said of ``rank`` ("rank N: ..."), with ``rank`` set."""
        return Problem(f"rank {rank}: {self}", self.kind, self.file, rank, self.n)

    def with_rank(self, rank: int | None) -> "Problem":
        """The same line, known to be about ``rank``."""
        return Problem(str(self), self.kind, self.file, rank, self.n)

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "rank": self.rank, "file": self.file, "count": self.n, "line": str(self)}

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> "Problem":
        return cls(d["line"], d["kind"], d.get("file", ""), d.get("rank"), d.get("count", 1))


def os_problem(path: str, exc: OSError) -> tuple[Kind, str]:
    """What an OSError on ``path`` means for a person: a symbolic link loop and a dangling link are
    named as such, anything else is an unreadable file."""
    import errno
    import os

    if exc.errno == errno.ELOOP:
        return Kind.SYMLINK_LOOP, "symbolic link loop (the link leads back to itself)"
    if exc.errno == errno.ENOENT and os.path.islink(path):
        try:
            to = os.readlink(path)
        except OSError:
            to = "?"
        return Kind.BROKEN_LINK, f"broken symbolic link (to {to}, which does not exist)"
    return Kind.FILE_UNREADABLE, f"cannot read ({exc.strerror or exc})"


def prefixed(where: str, p: str) -> str:
    """``p`` said of ``where`` ("where: p"), keeping its fields; the file is ``where`` unless set."""
    if isinstance(p, Problem):
        return Problem(f"{where}: {p}", p.kind, p.file or where, p.rank, p.n)
    return f"{where}: {p}"


def at_rank(p: str, rank: int) -> str:
    """``p`` said of ``rank`` (a plain line gets the "rank N: " prefix only)."""
    return p.at_rank(rank) if isinstance(p, Problem) else f"rank {rank}: {p}"


def records(problems: list[str]) -> list[dict[str, Any]]:
    """The structured form of every ``Problem`` among ``problems`` (plain lines have none)."""
    return [p.record() for p in problems if isinstance(p, Problem)]


def restore(problems: list[str], recs: Any) -> list[str]:
    """``problems`` read back from JSON, with the fields of ``recs`` put back on their lines."""
    by_line = {r["line"]: r for r in recs or [] if isinstance(r, dict) and "line" in r and "kind" in r}
    return [Problem.from_record(by_line[p]) if p in by_line else p for p in problems]


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
        d = asdict(self)
        d["problems"] = [str(p) for p in self.problems]
        d["issues"] = records(self.problems)  # the fields of each line (Problem), for tools and the cache
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RankInfo":
        d = dict(d)
        if d.get("time_range") is not None:
            d["time_range"] = tuple(d["time_range"])
        got = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})
        got.problems = restore(got.problems, d.get("issues"))
        return got
