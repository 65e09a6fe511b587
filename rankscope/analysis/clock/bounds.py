"""What causality allows a clock offset to be, and which estimate of it to believe.

Pattern: NTP's argument, on the traces' own edges. A receive cannot end before its send started, and a
synchronising collective (all_reduce, all_gather, reduce_scatter, all_to_all, barrier) cannot end on
rank i before rank j started it. With ``o_r = clock_r − clock_ref``, each such pair gives
``o_i − o_j ≤ end_i − start_j`` (local times); the tightest over all pairs with the reference rank
bounds every offset to an interval ``[lo, hi]`` (``bounds``). Broadcast, reduce, gather and scatter are
left out: their root may finish before the others start.

Then per rank (``decide``):

1. a rank with clock anchors (collection-time NTP exchange, true offset within ± its error) gets the
   collectives' estimate held inside that error window and the causal bounds: the anchors are refined,
   never overruled by a bad edge. An estimate that lands far outside is rejected and said (``rejected``);
2. when the causal bounds exclude the whole anchor window, a rank on another host has a clock that moved
   after the anchors were taken: the estimate, held inside the bounds, is used and said (``contradicted``);
   a rank on the reference's host shares its clock, so its anchors stay and the edges are what is wrong;
3. a rank without anchors gets the estimate held inside the bounds; an offset over 1 ms that rests on
   fewer than ``MIN_SAMPLES`` matched collectives, or on bounds that contradict each other, is said
   (``weak``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

SYNC_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
TOLERANCE_NS = 20_000  # Kineto's µs timestamps and thread wake-ups: a bound is loosened by this much
MIN_SAMPLES = 8
LARGE_NS = 1_000_000
# A rejected estimate is said as a warning from this far off its anchors: gloo's span ends are milliseconds
# apart on a busy host (3 ms on a 4-rank job on 2 cores, tests/e2e/test_edges_jobs.py), which is noise, not
# wrong matches (the pipeline of issue 25: 1,174 ms). Nearer ones are kept in the clock summary.
WARN_REJECTED_NS = 10_000_000
MAX_DRIFT_PPM = 2_000.0  # quartz clocks drift by ~100 ppm; a "drift" beyond this says the matches are wrong


@dataclass
class Decision:
    offset_ns: dict[int, int]
    source: dict[int, str]
    rejected: dict[int, dict[str, int]] = field(default_factory=dict)  # same host: estimate vs anchors
    contradicted: dict[int, dict[str, int]] = field(default_factory=dict)  # anchors outside causal bounds
    weak: dict[int, dict[str, int]] = field(default_factory=dict)  # large offset on little evidence
    bounds: dict[int, tuple[int, int]] = field(default_factory=dict)


def _pair_bounds(i_end: np.ndarray, j_start: np.ndarray, i: np.ndarray, j: np.ndarray, ref: int
                 ) -> tuple[dict[int, int], dict[int, int]]:
    """From rows (rank i ended at i_end, rank j started at j_start, same event): o_i − o_j ≤ i_end − j_start.
    Returned relative to ``ref``: hi[r] bounds o_r from above (i = r, j = ref), lo[r] from below."""
    d = i_end - j_start
    hi: dict[int, int] = {}
    lo: dict[int, int] = {}
    up = j == ref
    for r, v in pl.DataFrame({"r": i[up], "d": d[up]}).group_by("r").agg(pl.col("d").min()).iter_rows():
        hi[int(r)] = int(v)
    down = i == ref
    for r, v in pl.DataFrame({"r": j[down], "d": d[down]}).group_by("r").agg(pl.col("d").min()).iter_rows():
        lo[int(r)] = -int(v)
    return lo, hi


def bounds(matched: pl.DataFrame, p2p: pl.DataFrame | None, ref: int) -> dict[int, tuple[int, int]]:
    """``[lo, hi]`` per rank for ``o_r − o_ref`` (ns; ±2**62 where nothing bounds it), from synchronising
    collectives (``matched``: one row per instance and rank, own clocks) and paired sends / receives."""
    los: list[dict[int, int]] = []
    his: list[dict[int, int]] = []
    m = matched.filter(pl.col("op").is_in(SYNC_OPS)) if matched.height else matched
    if m.height:
        dev = pl.col("dev_ts") >= 0
        m = m.select("pg_name", "instance", "rank", start=pl.when(dev).then("dev_ts").otherwise("ts"),
                     stop=pl.when(dev).then("dev_end").otherwise("end"))
        both = m.join(m, on=["pg_name", "instance"], suffix="_j").filter(
            (pl.col("rank") != pl.col("rank_j")) & ((pl.col("rank") == ref) | (pl.col("rank_j") == ref)))
        lo, hi = _pair_bounds(both["stop"].to_numpy(), both["start_j"].to_numpy(), both["rank"].to_numpy(),
                              both["rank_j"].to_numpy(), ref)
        los.append(lo)
        his.append(hi)
    if p2p is not None and p2p.height:
        p = p2p.filter(pl.col("paired"))
        lo, hi = _pair_bounds(p["recv_end"].to_numpy(), p["send_start"].to_numpy(), p["receiver"].to_numpy(),
                              p["sender"].to_numpy(), ref)
        los.append(lo)
        his.append(hi)
    out: dict[int, tuple[int, int]] = {}
    for r in {k for d in los + his for k in d}:
        lo_r = max((d[r] for d in los if r in d), default=-(1 << 62))
        hi_r = min((d[r] for d in his if r in d), default=1 << 62)
        out[r] = (lo_r - TOLERANCE_NS, hi_r + TOLERANCE_NS)
    return out


def _clamp(v: int, b: tuple[int, int] | None) -> int:
    if b is None or b[0] > b[1]:
        return v
    return int(min(max(v, b[0]), b[1]))


def _meet(a: tuple[int, int], b: tuple[int, int] | None) -> tuple[int, int] | None:
    """The intersection of two intervals (None when empty); ``b`` None or contradictory is no constraint."""
    if b is None or b[0] > b[1]:
        return a
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else None


def _anchored(out: Decision, r: int, a: int, err: int, e: int | None, b: tuple[int, int] | None, same_host: bool,
              noise: float, n: int) -> None:
    """An anchored rank: the estimate held inside the anchors' error window and the causal bounds; when the
    bounds exclude the whole window, another host's clock moved (the estimate is used), one host's cannot."""
    win = (a - err, a + err)
    feasible = _meet(win, b)
    if feasible is None and not same_host:
        assert b is not None
        v = e if e is not None else (b[0] + b[1]) // 2
        out.offset_ns[r], out.source[r] = _clamp(v, b), "collectives (anchors contradicted)"
        out.contradicted[r] = {"offset_ns": out.offset_ns[r], "anchor_ns": a, "lo_ns": b[0], "hi_ns": b[1], "samples": n}
        return
    keep = feasible or win
    out.offset_ns[r] = _clamp(a if e is None else e, keep)
    out.source[r] = ("anchors (same host)" if same_host else "anchors") + (
        " refined by collectives" if e is not None and keep[0] < keep[1] else "")
    far = max(noise, 100_000 if same_host else LARGE_NS)
    if e is not None and abs(e - out.offset_ns[r]) > far or feasible is None:
        out.rejected[r] = {"estimate_ns": int(e if e is not None else a), "anchor_ns": a, "error_ns": err,
                           "same_host": int(same_host)}


def decide(ranks: list[int], ref: int, est: dict[int, int], anchors: dict[int, int], errors: dict[int, int],
           hosts: dict[int, str | None], quality: dict[int, Any], bnd: dict[int, tuple[int, int]]) -> Decision:
    """Offsets relative to ``ref`` (see the module docstring). ``est``: the collectives' estimate (relative
    to ``ref``), ``anchors``: anchored offsets relative to ``ref`` with their ``errors``, ``quality[r]``:
    the estimate's residual and samples, ``bnd``: the causal bounds."""
    out = Decision({ref: 0}, {ref: "reference"}, bounds=bnd)
    ref_host = hosts.get(ref)
    for r in ranks:
        if r == ref:
            continue
        b, e, a = bnd.get(r), est.get(r), anchors.get(r)
        q = quality.get(r) or {}
        n = int(q.get("samples") or 0)
        noise = 3 * 1.4826 * float(q.get("residual") or 0) / max(n, 1) ** 0.5
        if a is not None:
            err = abs(errors.get(r, 0)) + abs(errors.get(ref, 0))
            _anchored(out, r, a, err, e, b, ref_host is not None and hosts.get(r) == ref_host, noise + err, n)
        elif e is not None:
            out.offset_ns[r], out.source[r] = _clamp(e, b), "collectives"
            if abs(out.offset_ns[r]) > LARGE_NS and (n < MIN_SAMPLES or (b is not None and b[0] > b[1])):
                out.weak[r] = {"offset_ns": out.offset_ns[r], "samples": n}
        elif b is not None and b[0] <= b[1] and abs(b[0]) < (1 << 61) and abs(b[1]) < (1 << 61):
            out.offset_ns[r], out.source[r] = (b[0] + b[1]) // 2, "point-to-point bounds"
        else:
            out.offset_ns[r], out.source[r] = 0, "none"
    return out


def plausible_drift(ppm: float) -> bool:
    """Whether a drift estimate can be a clock's (see MAX_DRIFT_PPM)."""
    return abs(ppm) <= MAX_DRIFT_PPM
