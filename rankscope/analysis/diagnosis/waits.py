"""Who waits for whom: a cluster timeline of a few steps, one lane per rank (or per chosen rank).

For the report's and the UI's cluster timeline: per lane, blocks of compute / exposed communication /
data wait / idle from the same interval sets as the breakdown (``breakdown.interval_sets``: compute >
communication > data > idle, so the blocks add up to the step), on clocks aligned by the "clock"
analysis; and per matched collective, each rank's arrival, so the late rank is visible at once.

Steps: the worst step (the longest step time on any rank) and one on each side, unless given.
Lanes: every rank up to ``MAX_LANES``; beyond, the slowest, the median and the fastest rank by own time
(plus the straggler verdict's ranks), each labelled with why it was chosen.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Result, frame
from rankscope.model.run import Run

MAX_LANES = 32
CLASSES = ("compute", "exposed communication", "data wait", "idle")


def choose_steps(bd: pl.DataFrame, steps: list[int] | None) -> list[int]:
    """The given steps, or the worst step and its neighbours (complete steps only)."""
    done = bd.filter(pl.col("complete")) if bd.filter(pl.col("complete")).height else bd
    have = sorted(set(done["step"].to_list()))
    if steps:
        return [s for s in steps if s in have]
    if not have:
        return []
    worst = int(done.group_by("step").agg(pl.col("wall").max()).sort("wall", descending=True)["step"][0])
    i = have.index(worst)
    return have[max(0, i - 1): i + 2]


def choose_lanes(run: Run, results: dict[str, Result], pr: pl.DataFrame) -> list[tuple[int, str]]:
    """(rank, label) per lane: every rank, or the slowest / median / fastest by own time and the verdict's."""
    if len(run.rank_ids) <= MAX_LANES or pr.height == 0:
        return [(r, f"rank {r}") for r in run.rank_ids]
    st = results.get("straggler")
    flagged = [r for f in (st.findings if st else []) for r in f.ranks]
    by = pr.sort("own")["rank"].to_list()
    picks = [(by[-1], "slowest own time"), (by[len(by) // 2], "median own time"), (by[0], "fastest own time")]
    picks = [(r, "straggler verdict") for r in flagged[:4]] + picks
    seen: set[int] = set()
    return [(int(r), f"rank {r} ({why})") for r, why in picks if not (r in seen or seen.add(r))]  # type: ignore[func-returns-value]


def blocks(run: Run, rank: int, t0: int, t1: int) -> list[tuple[int, int, int]]:
    """(start, end, class index) of one rank within [t0, t1) on its own clock, adjacent equal classes merged."""
    from rankscope.analysis.steps.breakdown import _is_step, interval_sets
    from rankscope.analysis.classify import dict_test
    from rankscope.analysis.intervals import covered, merge
    from rankscope.analysis.rankdata import data_of

    rd = data_of(run, rank, None)
    ev = rd.events
    is_step = rd.memo("is_step", lambda: dict_test(ev, "name", _is_step))
    sets, _ = interval_sets(ev, np.unique(rd.col("tid")[is_step]), rd)
    merged = {k: merge(*sets[k]) for k in ("compute", "comm", "data")}
    pts = [np.array([t0, t1])] + [np.clip(a, t0, t1) for iv in merged.values() for a in iv]
    b = np.unique(np.concatenate(pts))
    if len(b) < 2:
        return []
    s, e = b[:-1], b[1:]
    c, m, d = (covered(merged[k], s) for k in ("compute", "comm", "data"))
    cls = np.where(c, 0, np.where(m, 1, np.where(d, 2, 3)))
    keep = np.ones(len(s), bool)
    keep[1:] = cls[1:] != cls[:-1]
    starts, kinds = s[keep], cls[keep]
    ends = np.append(starts[1:], e[-1])
    return simplify(list(zip(starts.tolist(), ends.tolist(), kinds.tolist())), (t1 - t0) / MAX_BLOCKS)


# Blocks per lane at most (about): shorter ones are folded into the block before them, so that a lane
# of thousands of operator gaps stays a readable picture (the exact events are in the merged trace).
MAX_BLOCKS = 600


def simplify(bl: list[tuple[int, int, int]], min_len: float) -> list[tuple[int, int, int]]:
    """Blocks shorter than ``min_len`` folded into the previous block; equal neighbours merged."""
    out: list[list[int]] = []
    for s, e, k in bl:
        if out and (e - s < min_len or out[-1][2] == k):
            out[-1][1] = e
        else:
            out.append([s, e, k])
    return [(s, e, k) for s, e, k in out]


def cluster_timeline(run: Run, results: dict[str, Result], steps: list[int] | None = None) -> dict[str, Any]:
    """Lanes, blocks (ms from the first step's start on the reference clock) and collective arrivals."""
    from rankscope.analysis.clock.alignment import alignment_from, matched_collectives
    from rankscope.analysis.diagnosis.rules import per_rank

    bd_res = results.get("breakdown")
    if bd_res is None or bd_res.skipped:
        return {"why": "no step breakdown: profile with prof.step() once per training step"}
    bd = frame(bd_res.tables["breakdown"])
    chosen = choose_steps(bd, steps)
    if not chosen:
        return {"why": f"steps {steps} are not in this run" if steps else "no complete steps"}
    al = alignment_from(results)
    off = {r: int(al.offset_ns.get(r, 0)) if al else 0 for r in run.rank_ids}
    lanes = choose_lanes(run, results, per_rank(bd))
    sel = bd.filter(pl.col("step").is_in(chosen))
    spans = sel.group_by("rank").agg(t0=pl.col("ts").min(), t1=pl.col("end").max())
    win = {int(r): (int(a), int(b)) for r, a, b in spans.iter_rows()}
    lanes = [(r, lab) for r, lab in lanes if r in win]
    base = min(win[r][0] - off[r] for r, _ in lanes)
    out_blocks = []
    for i, (r, _) in enumerate(lanes):
        t0, t1 = win[r]
        for s, e, k in blocks(run, r, t0, t1):
            out_blocks.append((i, (s - off[r] - base) / 1e6, (e - off[r] - base) / 1e6, k))
    lane_of = {r: i for i, (r, _) in enumerate(lanes)}
    arrivals: list[list[tuple[int, float]]] = []
    mc = matched_collectives(run)
    if mc.height:
        arr = pl.when(pl.col("dev_ts") >= 0).then(pl.col("dev_ts")).otherwise(pl.col("ts"))
        mc = mc.with_columns(a=arr).filter(pl.col("rank").is_in(list(lane_of)))
        for (_, _), g in mc.group_by("pg_name", "instance"):
            pts = [(lane_of[int(r)], (int(a) - off[int(r)] - base) / 1e6) for r, a in zip(g["rank"], g["a"])
                   if win[int(r)][0] <= int(a) < win[int(r)][1]]
            if len(pts) >= 2:
                arrivals.append(sorted(pts))
    ref = lanes[0][0] if lanes else 0
    firsts = sel.filter(pl.col("rank") == ref).group_by("step").agg(t=pl.col("ts").min())
    step_starts = {int(s): (int(t) - off.get(ref, 0) - base) / 1e6 for s, t in firsts.iter_rows()} if lanes else {}
    return {"lanes": [lab for _, lab in lanes], "ranks": [r for r, _ in lanes], "steps": chosen,
            "blocks": out_blocks, "arrivals": arrivals, "step_starts": step_starts, "classes": list(CLASSES),
            "aligned": al is not None}
