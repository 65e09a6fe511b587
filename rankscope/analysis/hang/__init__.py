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

__all__ = ["Problem", "Verdict", "Where", "describe", "diagnose", "run_hang"]
