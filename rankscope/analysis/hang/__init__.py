"""Hangs and desyncs from per-rank collective records (Flight Recorder dumps, rankscope's recorder).

Modules, by idea: ``matching`` arranges every rank's entries per process group (members from
``pg_config``, coalesced blocks as one call); ``checks`` holds torch's analyzer's rules for what must
agree at one call; ``p2p`` pairs sends with receives; ``consistency`` compares the groups' descriptions,
members and the dumps' versions; ``rootcause`` puts the problem that explains the others first (the
wavefront); ``diagnose`` runs them; ``findings`` is the verdict as plain data, ``words`` says it,
``shapes`` writes calls as people read them; ``run`` is the registered analysis. docs/hangs.md says what
each check means.
"""
from __future__ import annotations

from rankscope.analysis.hang.diagnose import diagnose
from rankscope.analysis.hang.findings import Problem, Verdict, Where
from rankscope.analysis.hang.run import run_hang
from rankscope.analysis.hang.words import describe
from rankscope.analysis.base import Analysis
from rankscope.analysis.view import Col, TableView, View

__all__ = ["Problem", "Verdict", "Where", "describe", "diagnose", "run_hang"]


ANALYSIS = Analysis(
    name="hang",
    description="collective recorder dumps matched across ranks: hangs and desyncs",
    run=run_hang,
    view=View("Collectives / hang (collective recorder dumps)", (
        Col("headline", "verdict"), Col("also", "other problems"), Col("dumps", "ranks with a dump", "count"), Col("no_dump", "ranks without a dump", "ranks"),
        Col("not_read", "dumps or entries not read")),
        (TableView("last_collective", "last collective recorded per rank and process group", (
            Col("group", "group"), Col("desc", "description"), Col("rank", "rank", "count"),
            Col("last_seq", "last sequence number", "count"),
            Col("last_completed", "last completed (timed recorder)", "count"))),),
        "profile with comms=True or RANKSCOPE_COMMS=1, then `rankscope trigger RUN --dump`", place="hang"),
)
