"""HTA's overlaid trace: the input trace with the critical path marked, as HTA 0.5.0 writes it.

Pattern (``CriticalPathAnalysis.overlay_critical_path_analysis``, defaults
``only_show_critical_events=False``, ``show_all_edges=False``): every event with a node on the path
gets ``args.critical = 1``; every path edge of type dependency, launch delay or sync becomes a
Chrome flow (an "s" event at its source, an "f" event at its destination, ``cat`` = the edge type,
``args`` = {weight, critical}), placed at the event's start or end (a device op's end 1 µs early so
the arrow lands inside it).

Input: the raw ``traceEvents`` list, and for each row of the rankscope events table the index of
its raw event (``x_index``: rows are the file's complete events in order).
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np

from rankscope.analysis.deps.gpu import E
from rankscope.analysis.deps.graph import RankGraph
from rankscope.analysis.deps.path import Path

SHOWN = (E.DEPENDENCY, E.LAUNCH, E.SYNC)  # HTA's DEFAULT_EDGE_TYPES_IN_VIZ


def x_index(raw_events: list[dict[str, Any]]) -> np.ndarray:
    """Raw index of every complete ("X") event, in order: rankscope's event rows."""
    return np.array([i for i, e in enumerate(raw_events) if isinstance(e, dict) and e.get("ph") == "X"], np.int64)


def critical_events(g: RankGraph, p: Path) -> np.ndarray:
    """Event rows with a node on the path."""
    return np.unique(g.node_ev[p.nodes])


def flows(raw_events: list[dict[str, Any]], rows: np.ndarray, g: RankGraph, p: Path) -> list[dict[str, Any]]:
    """The flow events HTA adds for the shown edge types of the path (ids in path order)."""
    out: list[dict[str, Any]] = []
    for fid, e in enumerate(int(x) for x in p.edges if g.typ[x] in SHOWN):
        for node, ph in ((int(g.src[e]), "s"), (int(g.dst[e]), "f")):
            ev = raw_events[int(rows[g.node_ev[node]])]
            end = ev["ts"] + ev["dur"]
            if ev.get("args", {}).get("device", -1) >= 0:
                end -= min(1, ev["dur"])
            flow: dict[str, Any] = {"ph": ph, "id": fid, "pid": ev["pid"], "tid": ev["tid"],
                                    "ts": int(ev["ts"] if g.node_start[node] else end), "cat": E.HTA_NAMES[g.typ[e]],
                                    "name": "critical_path", "args": {"weight": int(g.w_raw[e]) // 1000,
                                                                      "critical": True}}
            if ph == "f":
                flow["bp"] = "e"
            out.append(flow)
    return out


def overlaid(doc: dict[str, Any], g: RankGraph, p: Path) -> dict[str, Any]:
    """A copy of the trace document with the path overlaid (HTA's output file content)."""
    doc = copy.deepcopy(doc)
    raw = doc["traceEvents"]
    rows = x_index(raw)
    for r in critical_events(g, p).tolist():
        raw[int(rows[r])].setdefault("args", {})["critical"] = 1
    raw.extend(flows(raw, rows, g, p))
    return doc
