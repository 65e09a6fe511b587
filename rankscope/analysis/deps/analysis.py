"""Registered analysis ``critical_path``: per step, the chain that bounds it across ranks, and what-ifs.

Pattern: per rank (the shared per-rank pass), each step's dependency graph (``timed``) is reduced
to its anchor matrix (``local``): a few kB per rank and step. Per step, the ranks are joined at
their matched calls (``join``), the longest path is the step's critical path, the rank whose
own segments at the other ranks' median would shorten it most bounds the step (``whatif``), and
the path is expanded back into segments on the ranks it crosses (``chain``), for which those
ranks' graphs are rebuilt.

Output: tables ``steps`` (per step: measured step time, path, bounding rank and its cost),
``what_if`` (per rank and step), ``segments`` (the path of every step), ``waits`` (per call and
member: the time from its arrival to the last arrival); summary ``what_if`` ([{rank, step_ms,
step_ms_if_median}], medians over steps), ``bounding`` and ``per_step`` (the chains).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np


from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.deps import adapter, chain, events, join as J, local, timed, whatif
from rankscope.analysis.deps.floor import Floor, bound
from rankscope.analysis.deps.cpu import fix_nesting
from rankscope.analysis.deps.graph import RankGraph, window
from rankscope.analysis.deps.timed import ROUND_NS

if TYPE_CHECKING:
    from rankscope.analysis.rankdata import RankData
    from rankscope.model.run import Run


@dataclass
class StepBuild:
    """One rank's step, built in full (for the path's expansion) or reduced to its anchors."""

    step: int
    wall: int  # measured step time on this rank, ns
    g: RankGraph
    anchors: timed.Anchors
    loc: local.Local


@dataclass
class StepPart:
    step: int
    wall: int
    rs: J.RankStep
    sink: np.ndarray  # per source row: the node its longest local path ends at
    calls: list[dict[str, Any]]  # per call: op, kind, pg, seq
    call_end: np.ndarray  # per call: its end on this rank's clock, ns


@dataclass
class RankPart:
    rank: int
    steps: list[StepPart] = field(default_factory=list)
    unmatched_p2p: int = 0
    problem: str | None = None


def _windows(data: "RankData", ev: events.RankEvents) -> list[tuple[int, int, int, int]]:
    """(step, window start, window end, measured step time) per step: the window is the host span
    of ``ProfilerStep#N`` (an event starting in its last µs belongs to the next step: the writer
    rounds); the whole capture as step -1 when there are no steps."""
    st = data.table("steps")
    if not st.num_rows:
        return [(-1, int(ev.ts.min()), int(ev.end.max()) + 1, int(ev.end.max() - ev.ts.min()))] if ev.n else []
    num = np.asarray(st.column("step").to_numpy(zero_copy_only=False), np.int64)
    wall = np.asarray(st.column("end").to_numpy(zero_copy_only=False), np.int64) - \
        np.asarray(st.column("ts").to_numpy(zero_copy_only=False), np.int64)
    host_end = np.asarray(st.column("host_end").to_numpy(zero_copy_only=False), np.int64)
    ps = {int(n[len("ProfilerStep#"):]): i for i, n in enumerate(ev.names)
          if str(n).startswith("ProfilerStep#") and str(n)[len("ProfilerStep#"):].isdigit()}
    rows = np.flatnonzero(np.isin(ev.name_idx, list(ps.values())) & (ev.stream == -1)
                          & (ev.kind != int(events.K.GPU_ANNOTATION)))  # the GPU's copy of the step is not its start
    start = {int(str(ev.names[ev.name_idx[r]])[len("ProfilerStep#"):]): int(ev.ts[r]) for r in rows.tolist()}
    out = []
    for n, e, w in zip(num.tolist(), host_end.tolist(), wall.tolist()):
        t0 = start.get(n, e - w)
        out.append((n, t0, max(t0 + 1, e - ROUND_NS), w))
    return out


def build_steps(data: "RankData", only: set[int] | None = None) -> tuple[list[StepBuild], int, events.RankEvents]:
    """Every step of one rank (or those in ``only``), its point-to-point calls without a peer, and
    its events."""
    ev = fix_nesting(events.from_table(data.events))
    frame = adapter.calls(data.table("collectives"), data.rank)
    calls = adapter.Calls.of(frame)
    out = []
    for step, t0, t1, wall in _windows(data, ev):
        if only is not None and step not in only:
            continue
        sel = window(ev, t0, t1 - 1)
        c = calls.take((calls.ts >= t0) & (calls.ts < t1))
        g, anc = timed.rank_graph(ev, sel, c, adapter.joinable(c.key, data.rank, _present(data.run)))
        ok = anc.arrival >= 0
        sp = anc.arrival if anc.span_start is None else anc.span_start
        anc = timed.Anchors(anc.arrival[ok], anc.end[ok], [k for k, o in zip(anc.key, ok) if o], anc.info.take(ok),
                            sp[ok])
        out.append(StepBuild(step, wall, g, anc, local.Local(g, anc.arrival, anc.end)))
    return out, adapter.unmatched_p2p(frame), ev


def _present(run: "Run") -> set[int]:
    """The ranks of the run; a per-rank task on Dask sees its own rank only (``Run.only``): then the
    world, whose members may be in the run."""
    ids = set(run.rank_ids)
    return ids if len(ids) > 1 else set(range(run.world_size or 1)) | ids


def _single(run: "Run") -> bool:
    """A run of one rank, not a per-rank task of a larger run on a Dask worker (``Run.only``: the
    registry sends those only for runs of several ranks; a worker's environment has no client
    setting such as RANKSCOPE_DASK to tell, so the worker itself is asked)."""
    return len(run.rank_ids) < 2 and not _on_dask_worker()


def _on_dask_worker() -> bool:
    """Whether this code runs inside a task on a Dask worker (never imports Dask itself)."""
    dist = sys.modules.get("distributed")
    if dist is None:
        return False
    try:
        dist.get_worker()
    except ValueError:  # "No worker found": the client or a plain process
        return False
    return True


def rank_part(data: "RankData") -> RankPart:
    """The anchor matrices of one rank's steps (the per-rank pass)."""
    part = RankPart(data.rank)
    if _single(data.run):  # nothing to join: combine says so, and no graph is built for nothing
        return part
    try:
        builds, part.unmatched_p2p, ev = build_steps(data)
    except Exception as exc:  # noqa: BLE001 - one rank's odd data must not stop the others
        part.problem = f"rank {data.rank}: critical path not built ({type(exc).__name__}: {exc})"
        return part
    for b in builds:
        m = b.loc.matrix()
        a = b.anchors
        span = b.g.node_ts[a.end] - b.g.node_ts[a.arrival if a.span_start is None else a.span_start]
        info = a.info.rows()
        sig = tuple((c["op"], c["kind"]) for c in info)
        host_send = (a.info.kind == "p2p") & (a.info.op == "send") & (a.info.dev_ts < 0)  # as ``timed.rank_graph``
        rs = J.RankStep(data.rank, m.d, a.key, span, sig, host_send)
        part.steps.append(StepPart(b.step, b.wall, rs, m.sink_node, info,
                                   b.g.node_ts[a.end]))
    _BUILT[(data.run.path, data.rank)] = (builds, ev)
    return part


def run_critical_path(run: "Run", results: dict[str, Any]) -> Result:
    """Registered analysis ``critical_path`` (standalone: its own pass over the ranks)."""
    from rankscope.analysis.rankdata import RankData

    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def combine(run: "Run", parts: list[tuple[int, RankPart]], results: dict[str, Any]) -> Result:
    from rankscope.analysis.deps.report import assemble

    by_step: dict[int, list[StepPart]] = {}
    for _, p in parts:
        for sp in p.steps:
            by_step.setdefault(sp.step, []).append(sp)
    if _single(run):
        return Result("critical_path", skipped="one rank in the run: the critical path across ranks needs two "
                                                "(one rank's path, HTA 0.5.0's rules: rankscope.analysis.deps.graph / path)")
    if not by_step:
        return Result("critical_path", skipped="no steps with events in any rank")
    rebuild, floor = _Rebuilder(run), Floor.of(run)
    per_step, problems = [], [p.problem for _, p in parts if p.problem]
    try:
        for step, sps in sorted(by_step.items()):
            try:
                per_step.append(_one_step(step, sps, rebuild, floor))
            except J.CycleError as exc:  # one step's odd pairing must not cost the others
                problems.append(f"step {step}: critical path not built ({exc})")
    finally:
        for r in run.rank_ids:
            _BUILT.pop((run.path, r), None)
    unmatched = sum(p.unmatched_p2p for _, p in parts)
    return assemble(per_step, problems, unmatched, floor.note() if floor is not None else None)


# Step graphs built by rank_part in this process, for the path's expansion in combine (a rank_part run
# elsewhere, on a pool or Dask, leaves nothing here: combine then rebuilds the ranks the paths cross).
_BUILT: dict[tuple[str, int], tuple[list[StepBuild], events.RankEvents]] = {}


class _Rebuilder:
    """Full step graphs of the ranks the paths cross (kept from rank_part, else built once per rank)."""

    def __init__(self, run: "Run") -> None:
        self.run = run
        self.cache: dict[int, tuple[dict[int, StepBuild], events.RankEvents, np.ndarray]] = {}

    def get(self, rank: int, step: int) -> tuple[StepBuild | None, events.RankEvents, np.ndarray]:
        if rank not in self.cache:
            from rankscope.analysis.deps.cpu import parents_and_walk
            from rankscope.analysis.rankdata import RankData

            got = _BUILT.pop((self.run.path, rank), None)
            builds, ev = got if got is not None else build_steps(RankData(self.run, rank))[::2]  # type: ignore[misc]
            members = np.flatnonzero((ev.stream == -1) & (ev.dur > 0))
            ctx = chain.contexts(ev, parents_and_walk(ev, members)[3])
            dev = (ev.stream >= 0) & (ev.partner >= 0)
            ctx[dev] = ctx[ev.partner[dev]]  # device work under the annotation of its launch
            self.cache[rank] = ({b.step: b for b in builds}, ev, ctx)
        steps, ev, ctx = self.cache[rank]
        return steps.get(step), ev, ctx


@dataclass
class StepResult:
    step: int
    wall_ms: float  # median over ranks of the measured step time
    path_ns: int
    whatifs: list[whatif.WhatIf]
    segments: list[dict[str, Any]]
    waits: list[dict[str, Any]]
    walls: dict[int, int]


def _one_step(step: int, sps: list[StepPart], rebuild: _Rebuilder, floor: Floor | None = None) -> StepResult:
    j = J.join_step([sp.rs for sp in sps])
    dist, end = J.longest(j)
    length = int(dist[end]) if end >= 0 else 0
    wall = float(np.median([sp.wall for sp in sps]))
    wis = bound(whatif.what_if(j, length), j, floor, step, wall)
    edges = J.path_edges(j, dist, end) if end >= 0 else []
    segs = _expand(j, sps, edges, step, rebuild)
    return StepResult(step, wall / 1e6, length, wis, segs, _waits(sps), {sp.rs.rank: sp.wall for sp in sps})


def _expand(j: J.Joined, sps: list[StepPart], edges: list[int], step: int, rebuild: _Rebuilder) -> list[dict[str, Any]]:
    """The anchor path as segments on the ranks it crosses."""
    out: list[dict[str, Any]] = []
    for e in edges:
        ri, s, t = (int(x) for x in j.ref[e])
        sp, kind = sps[ri], int(j.kind[e])
        if kind == J.WAIT:
            continue
        if kind in (J.XFER, J.OWN):
            out.append(_call_segment(sp, s, int(j.w[e]), unmatched=kind == J.OWN))
            continue
        b, ev, ctx = rebuild.get(sp.rs.rank, step)
        if b is None:
            continue
        k = len(sp.rs.keys)
        target = int(b.anchors.arrival[t]) if t < k else int(sp.sink[s]) if sp.sink[s] >= 0 else b.loc.farthest(s)
        le = b.loc.local_path(s, target)
        out.extend(chain.edge_segments(sp.rs.rank, b.g, ev, ctx, le))
    return out


def _call_segment(sp: StepPart, i: int, w: int, unmatched: bool) -> dict[str, Any]:
    c = sp.calls[i]
    end = int(sp.call_end[i])
    return {"rank": sp.rs.rank, "kind": c["kind"], "name": c["op"] + (" (unmatched)" if unmatched else ""),
            "start": end - w, "end": end, "group": c["pg"], "seq": int(c["seq"]), "dur": w, "context": ""}


def _waits(sps: list[StepPart]) -> list[dict[str, Any]]:
    """Per matched call and member: its wait for the last arrival (its span minus the transfer)."""
    spans: dict[Any, list[tuple[int, int, dict[str, Any]]]] = {}
    for sp in sps:
        for i, key in enumerate(sp.rs.keys):
            if key is not None:
                spans.setdefault(key, []).append((sp.rs.rank, int(sp.rs.span[i]), sp.calls[i]))
    out = []
    for key, mem in spans.items():
        if len(mem) < 2:
            continue
        t = min(s for _, s, _ in mem)
        last = min(mem, key=lambda m: m[1])[0]
        for rank, s, c in mem:
            out.append({"op": c["op"], "group": c["pg"], "seq": int(c["seq"]), "rank": rank, "wait_ns": s - t,
                        "last_rank": last})
    return out


ANALYSIS = Analysis(
    name="critical_path",
    description="per step, the chain of dependencies across ranks that bounds it; what each rank costs (what-if)",
    run=run_critical_path,
    rank_part=rank_part, combine=combine,
    view=View("Critical path across ranks (who waits for whom)", (
        Col("description", "the chain that bounds the step"), Col("bounding_rank", "bounding rank", "count"),
        Col("cost_per_step_ns", "its cost per step", NS), Col("bounding_steps", "steps it bounds"),
        Col("step_time_ns", "step time", NS), Col("step_time_if_median_ns", "step time if it ran at the others' median", NS)), (
        TableView("steps", "per step: the rank whose what-if shortens the path most", (
            Col("step", "step", "count"), Col("step_ns", "step time", NS), Col("path_ns", "critical path", NS),
            Col("bounding_rank", "bounding rank", "count"), Col("cost_ns", "its cost", NS),
            Col("step_if_median_ns", "step at the others' median", NS), Col("description", "chain"))),
        TableView("what_if", "per rank and step: the step if the rank ran at the other ranks' median", (
            Col("step", "step", "count"), Col("rank", "rank", "count"), Col("step_ns", "step time", NS),
            Col("step_if_median_ns", "at the others' median", NS), Col("saving_ns", "saving", NS))),
        TableView("segments", "the path of each step", (
            Col("step", "step", "count"), Col("rank", "rank", "count"), Col("kind", "kind"), Col("name", "what"),
            Col("context", "inside"), Col("dur", "time", NS), Col("group", "group"), Col("seq", "call", "count")))),
        "needs steps with events on at least one rank", optional=True),
)
