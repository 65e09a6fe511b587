"""Hangs and desyncs from per-rank collective records (Flight Recorder dumps, rankscope's recorder).

Modules, by idea: ``diagnose`` matches every rank's entries by (process group, sequence number);
``checks`` says what must agree at one sequence number; ``p2p`` pairs sends with receives;
``findings`` holds the verdict as plain data; ``words`` says it; ``run`` is the registered analysis.
"""
from __future__ import annotations

from rankscope.analysis.hang.diagnose import diagnose
from rankscope.analysis.hang.findings import Verdict
from rankscope.analysis.hang.run import run_hang
from rankscope.analysis.hang.words import describe

__all__ = ["Verdict", "describe", "diagnose", "run_hang"]
