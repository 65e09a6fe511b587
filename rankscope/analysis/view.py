"""How an analysis is shown, declared beside its code (``Analysis.view``): its title, the summary facts and
table columns a person reads (with units), what to say when it has no data and how to get it, and the
report view it belongs in. The report and the web UI draw these declarations (``rankscope.render``);
nothing renders an analysis's raw summary dict or a table's internal column names.

One vocabulary everywhere: compute, exposed communication, data wait, idle.
"""
from __future__ import annotations

from dataclasses import dataclass

NS = "ns"


@dataclass(frozen=True)
class Col:
    """A column or a summary fact: ``key`` in the data, ``label`` shown, ``unit`` of the stored value
    ("ns", "us", "bytes", "gbps", "share", "count", "float", "text", "ranks", "group": a process group's
    ranks, short; "device": -1 is the CPU; "words": an identifier-like category said in words; a unit
    ending in "+" is a change, printed with its sign)."""

    key: str
    label: str
    unit: str = "text"


@dataclass(frozen=True)
class TableView:
    table: str
    title: str
    cols: tuple[Col, ...]
    empty: str = "no rows"


@dataclass(frozen=True)
class View:
    """``place``: the report view (tab) the analysis is shown in; "more" when it names none."""

    title: str
    facts: tuple[Col, ...] = ()
    tables: tuple[TableView, ...] = ()
    empty: str = ""
    optional: bool = False  # not listed among the skipped when it does not apply to the run
    place: str = "more"
