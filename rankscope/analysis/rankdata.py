"""One rank's tables, read once and shared by the per-rank parts of several analyses.

``registry.run_all`` walks the ranks once: for each rank it reads the events Parquet a single
time (only the columns the per-rank analyses need) into a ``RankData`` and hands it to every
per-rank step (breakdown, hta_temporal, kernels, opstats, memory), which keep only small
per-rank aggregates. The object is dropped before the next rank is read, so at most one rank's
event table is in memory. Derived arrays (numpy columns, kind masks, the communication mask)
are computed once per rank and shared too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rankscope.analysis.classify import comm_mask, kind_in

if TYPE_CHECKING:
    import pyarrow as pa

    from rankscope.model.run import Run

# Union of the event columns the per-rank analyses read (never device; cat, pid, bytes and bandwidth for
# the HTA-compatible GPU analyses, analysis/gpu/).
EVENT_COLUMNS = ["name", "kind", "ts", "dur", "tid", "stream", "is_comm", "external_id", "correlation",
                 "depth", "input_dims", "cat", "pid", "bytes", "bandwidth"]


@dataclass(frozen=True)
class Maker:
    """How a memoized table is made from the events (``make``), and the event columns it reads."""

    make: Callable[["RankData"], Any]
    columns: tuple[str, ...]


# Memoized tables the pass can make from the events before it frees them (``RankData.prepare``), by memo key;
# the module that defines one registers its maker (``analysis/gpu/htaview.py``: the HTA view).
MAKERS: dict[str, Maker] = {}


@dataclass(frozen=True)
class Later:
    """What a rank part that reads the events returns when the rest of its work reads only memoized tables
    (``reads``): the pass calls ``fn(data)`` once it has freed the rank's events, and that is the part
    (``resolved``). The events-side work runs before the view is built, the view-side after the events go."""

    fn: Callable[["RankData"], Any]
    reads: tuple[str, ...]


def resolved(part: Any, d: "RankData") -> Any:
    """``part``, or what its ``Later`` gives on ``d``."""
    return part.fn(d) if isinstance(part, Later) else part


def part_of(rank_part: Callable[["RankData"], Any], run: "Run", rank: int) -> Any:
    """A rank part computed on its own (outside the shared pass) on a private ``RankData``."""
    d = RankData(run, rank)
    return resolved(rank_part(d), d)


class RankData:
    """Lazily read, memoized tables and derived arrays of one rank."""

    def __init__(self, run: "Run", rank: int, columns: list[str] | None = None) -> None:
        self.run, self.rank = run, rank
        self._columns = columns or EVENT_COLUMNS
        self._tables: dict[str, Any] = {}
        self._memo: dict[Any, Any] = {}

    @property
    def events(self) -> "pa.Table":
        """The rank's events (the shared columns), one contiguous chunk per column."""
        if "events" not in self._tables:
            t = self.run.table(self.rank, "events", columns=self._columns)
            self._tables["events"] = t.combine_chunks() if t.num_rows and t.column(0).num_chunks > 1 else t
        return self._tables["events"]

    def table(self, name: str) -> "pa.Table":
        """Another table of the rank (steps, memory, collectives), read once."""
        if name == "events":
            return self.events
        if name not in self._tables:
            self._tables[name] = self.run.table(self.rank, name)
        return self._tables[name]

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """``make()`` computed once per rank under ``key``."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def prepare(self, keys: tuple[str, ...], narrow: bool = False) -> None:
        """Make the memoized tables ``keys`` that have a maker (``MAKERS``) and are not made yet. ``narrow``
        (nothing else reads the events any more): first free every other table, event column and memoized
        value, so that the makers run beside only what they read (issue 26)."""
        todo = [k for k in keys if k not in self._memo and k in MAKERS]
        if todo and narrow:
            cols = {c for k in todo for c in MAKERS[k].columns}
            self._columns = [c for c in self._columns if c in cols]
            ev = self._tables.get("events")
            self._tables = {} if ev is None else {"events": ev.select([c for c in ev.column_names if c in cols])}
            self._memo = {k: v for k, v in self._memo.items() if k in keys}
        for k in todo:
            self.memo(k, lambda: MAKERS[k].make(self))

    def release(self, keep: tuple[str, ...] = ()) -> bool:
        """Free the tables and every memoized value but those under ``keep``, if those are all computed
        already (else the parts that read them would read the events again: nothing is freed). The pass
        calls it once the parts that read the events are done (issue 26). True if it freed them."""
        if any(k not in self._memo for k in keep):
            return False
        self._tables.clear()
        self._memo = {k: v for k, v in self._memo.items() if k in keep}
        return True

    def col(self, name: str) -> np.ndarray:
        """A numeric event column as numpy (read once)."""
        return self.memo(("col", name), lambda: np.asarray(self.events.column(name).to_numpy()))

    def kind_in(self, kinds: tuple[str, ...]) -> np.ndarray:
        """Rows whose kind is one of ``kinds`` (tested over the kind dictionary)."""
        return self.memo(("kind", kinds), lambda: kind_in(self.events, kinds))

    def comm(self) -> np.ndarray:
        """Communication rows (``classify.comm_mask``)."""
        return self.memo("comm", lambda: comm_mask(self.events))


def data_of(run: "Run", rank: int, data: RankData | None) -> RankData:
    """``data`` when given (the shared pass), else a private one for a standalone call."""
    return data if data is not None and data.rank == rank else RankData(run, rank)
