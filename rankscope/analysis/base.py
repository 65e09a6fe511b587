"""What every analysis returns, and how it describes itself."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import polars as pl

    from rankscope.analysis.view import View


class Severity(str, enum.Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True)
class Finding:
    """A structured conclusion with the numbers that support it (never prose alone)."""

    kind: str
    title: str
    severity: Severity = Severity.INFO
    ranks: tuple[int, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)
    confidence: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "severity": self.severity.value,
                "ranks": list(self.ranks), "evidence": self.evidence, "confidence": self.confidence}


@dataclass
class Result:
    """Tables (pyarrow or polars) and findings of one analysis, or why it was skipped."""

    name: str
    tables: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    skipped: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Analysis:
    """An analysis, declared by the module that holds it (``ANALYSIS = Analysis(...)``; the registry finds it).

    ``run(run, results)`` receives the Run and the results of the analyses run before it.
    ``needs`` names data the run must have (e.g. "steps", "collectives", "kernels", "memory");
    when it lacks them the analysis is skipped with a stated reason. ``after`` names analyses whose
    results it needs (skipped when one of them was); ``uses`` those it reads when they ran (it runs after
    them). An analysis with ``rank_part`` and ``combine`` joins the shared pass over the ranks: each
    rank's events are read once (``RankData``) for all of them, ``rank_part(data)`` keeps a small
    per-rank part and ``combine(run, [(rank, part)], results)`` makes the Result. ``rank_reads`` names what
    ``rank_part`` reads of the ``RankData``: "events" (the event table, or anything computed from it), and/or
    memoized tables such as "htaview" (``analysis/gpu/htaview.py``); the pass runs the readers of only
    "events" first, then makes the memoized tables, runs the readers of both, frees the events and runs the
    others. A part that reads the events may return a ``rankdata.Later`` for its work on the memoized tables
    (run after the events are freed). ``view`` says how the report and the web UI show it.

    Example::

        ANALYSIS = Analysis(name="trajectory", description="iteration gap, forward+backward, tail per step",
                            run=run_trajectory, after=("breakdown",),
                            view=View("Iteration trajectory", place="trajectory"))
    """

    name: str
    description: str
    run: Callable[..., Result]
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    rank_part: Callable[[Any], Any] | None = None
    combine: Callable[..., Result] | None = None
    uses: tuple[str, ...] = ()
    view: "View | None" = None
    rank_reads: tuple[str, ...] = ("events",)


def frame(table: Any) -> "pl.DataFrame":
    """A pyarrow Table (a Run's or a Result's table) or a polars DataFrame, as a polars DataFrame.

    ``pl.from_arrow`` is typed ``DataFrame | Series`` (a bare Array gives a Series); tables always
    give a DataFrame, and this says so once for every caller.
    """
    import polars as pl

    df = table if isinstance(table, pl.DataFrame) else pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df
