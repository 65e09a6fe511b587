"""GPU idle gaps explained one by one: for each gap on a device stream inside the steps, why the device waited
(the host to launch, a sync, a collective's peers, data loading, other) and the event that says so.

Pattern: ``gapcause.rank_gaps`` finds and explains every gap of one rank (rules in its docstring). A gap belongs
to the step whose window (the ``steps`` table) holds its end; gaps ending outside every step, or starting before
the first, are left out. ``rank_part`` keeps the per-(step, cause) totals of every gap and only the
``MAX_GAPS`` longest gaps with their names (bounded memory per rank); ``combine`` joins the collective gaps to
the matched collectives (``comm.collectives.match_collectives`` for the instance, ``comm.edges.run_edges`` for
the arrivals on one clock): which instance, which peer arrived last and how long after this rank.

Tables: ``gaps`` (one row per kept gap), ``totals`` (rank, step, cause: gaps, idle, device idle),
``per_step`` (rank, step: the device's idle time per cause). ``idle`` is the stream's gap, ``device_idle``
the part of it when no stream of the device ran (sums to the device's idle time).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Finding, Result, Severity, frame
from rankscope.analysis.gpu.gapcause import CAUSES, launch_rows, names, rank_gaps
from rankscope.analysis.gpu.guard import guarded, split, with_problems
from rankscope.analysis.rankdata import RankData
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.model.run import Run

MAX_GAPS = 2000  # kept per rank with their names (the longest); totals count every gap
FINDING_SHARE = 0.10  # a rank whose device idles this share of its steps gets a finding
SAYS = {"host": "the host to launch", "sync": "a host sync", "collective": "a collective's peers",
        "data": "data loading", "other": "other work or dependencies"}
_CAUSE = pl.Enum(list(CAUSES))


def _windows(d: RankData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, start, end) of the rank's steps in start order; one window -1 over all events when it has none."""
    st = d.table("steps")
    if st.num_rows:
        s = frame(st).sort("ts")
        return s["step"].to_numpy(), s["ts"].to_numpy(), s["end"].to_numpy()
    ts = d.col("ts")
    return np.array([-1]), np.array([ts.min()]), np.array([(ts + d.col("dur")).max() + 1])


@guarded
def rank_part(d: RankData) -> dict[str, Any] | None:
    g = rank_gaps(d)
    if g is None:
        return None
    step, s_ts, s_end = _windows(d)
    g1 = g["end"].to_numpy()
    w = np.searchsorted(s_ts, g1, side="right") - 1
    ww = np.clip(w, 0, None)
    keep = (w >= 0) & (g1 < s_end[ww]) & (g["start"].to_numpy() >= s_ts[0])
    g = g.with_columns(step=step[ww], at=g["start"] - s_ts[ww]).filter(keep).with_columns(
        pl.col("cause").replace_strict(dict(enumerate(CAUSES)), return_dtype=_CAUSE),
        dur=pl.col("end") - pl.col("start"), rank=pl.lit(d.rank, pl.Int64))
    totals = g.group_by("rank", "step", "cause").agg(gaps=pl.len().cast(pl.Int64), idle=pl.col("dur").sum(),
                                                     device_idle=pl.col("device_idle").sum())
    kept = g.sort(["device_idle", "dur"], descending=True).head(MAX_GAPS).sort("start", "stream")
    ts, dur = d.col("ts"), d.col("dur")
    ev = kept["event_row"].to_numpy()
    lr = launch_rows(d, ev)
    kept = kept.with_columns(kernel=pl.Series(names(d, kept["kernel_row"].to_numpy()), dtype=pl.Utf8),
                             event=pl.Series(names(d, ev), dtype=pl.Utf8),
                             context=pl.Series(names(d, kept["context_row"].to_numpy()), dtype=pl.Utf8),
                             event_ts=pl.Series(np.where(ev >= 0, ts[ev], -1)),
                             event_end=pl.Series(np.where(ev >= 0, ts[ev] + dur[ev], -1)),
                             event_launch=pl.Series(np.where(lr >= 0, ts[lr], -1)))
    kept = kept.drop("kernel_row", "event_row", "context_row")
    steps = pl.DataFrame({"rank": np.full(len(step), d.rank), "step": step, "step_ns": s_end - s_ts})
    return {"gaps": kept, "totals": totals, "steps": steps, "n": g.height}


def run_gpu_gaps(run: Run, results: dict[str, Any]) -> Result:
    return combine(run, [(r, rank_part(RankData(run, r))) for r in run.rank_ids], results)


def combine(run: Run, parts: list[tuple[int, Any]], results: dict[str, Any]) -> Result:
    parts, problems = split(parts)
    got = [p for _, p in parts if p is not None]
    if not got:
        return with_problems(problems, Result("gpu_gaps", skipped="no GPU kernels in any rank (CPU-only trace)"))
    gaps = _peers(run, results, pl.concat([p["gaps"] for p in got], how="diagonal_relaxed"))
    totals = pl.concat([p["totals"] for p in got]).sort("rank", "step", "cause")
    steps = pl.concat([p["steps"] for p in got])
    per_step = steps.join(totals.group_by("rank", "step").agg(
        idle=pl.col("idle").sum(), device_idle=pl.col("device_idle").sum(),
        **{c: pl.col("device_idle").filter(pl.col("cause") == c).sum() for c in CAUSES}),
        on=["rank", "step"], how="left").fill_null(0).sort("rank", "step")
    by = {c: int(per_step[c].sum()) for c in CAUSES}
    summary = {"device_idle_ns": int(per_step["device_idle"].sum()), **{f"{c}_ns": v for c, v in by.items()},
               "gaps": sum(p["n"] for p in got), "gaps_shown": gaps.height,
               "main_cause": max(by, key=lambda c: by[c]) if any(by.values()) else None}
    tables = {"gaps": gaps.select(GAP_COLUMNS), "totals": totals, "per_step": per_step}
    return with_problems(problems, Result("gpu_gaps", tables=tables, findings=_findings(per_step), summary=summary))


GAP_COLUMNS = ["rank", "device", "stream", "step", "start", "at", "dur", "device_idle", "cause", "late", "event",
               "context", "kernel", "event_ts", "event_end", "event_launch", "collective", "peer", "peer_wait"]


def _peers(run: Run, results: dict[str, Any], gaps: pl.DataFrame) -> pl.DataFrame:
    """Collective gaps with their instance ("all_reduce #12 of group 0"), the peer that arrived last and how
    long after this rank (ns, on the clock analysis' common clock)."""
    empty = gaps.with_columns(collective=pl.lit(None, pl.Utf8), peer=pl.lit(None, pl.Int64),
                              peer_wait=pl.lit(None, pl.Int64))
    coll = gaps.filter(pl.col("cause") == "collective").with_row_index("_i")
    if not coll.height:
        return empty
    from rankscope.analysis.comm.collectives import match_collectives

    m = frame(match_collectives(run)).select("rank", "pg_name", "pg_ranks", "op", pl.col("instance").alias("seq"),
                                             "ts", "end", "dev_ts", "dev_end")
    if not m.height:
        return empty
    hit = _instances(coll.select("_i", "rank", "event_ts", "event_end", "event_launch"), m)
    if not hit.height:
        return empty
    from rankscope.analysis.comm.edges import run_edges

    e = run_edges(run, results).collectives.select("pg_name", "pg_ranks", "seq", "rank", "start", "complete")
    # the last to arrive is known only when every member of the group is in the trace
    last = e.filter("complete").sort("start").group_by("pg_name", "pg_ranks", "seq").agg(
        last_start=pl.col("start").last(), peer=pl.col("rank").last())
    hit = hit.join(e.drop("complete").rename({"start": "own_start"}), on=["pg_name", "pg_ranks", "seq", "rank"], how="left").join(
        last, on=["pg_name", "pg_ranks", "seq"], how="left").select(
        "_i", collective=pl.format("{} #{} of group {}", "op", "seq", "pg_name"), peer="peer",
        peer_wait=(pl.col("last_start") - pl.col("own_start")).clip(0))
    coll = coll.join(hit, on="_i", how="left").drop("_i")
    return pl.concat([empty.filter(pl.col("cause") != "collective"), coll], how="diagonal_relaxed").sort(
        "rank", "start", "stream")


def _instances(coll: pl.DataFrame, m: pl.DataFrame) -> pl.DataFrame:
    """The matched instance of each collective gap's communication kernel: the call whose device span holds the
    kernel, else (no device span in the collectives table) the call whose host span holds the kernel's launch."""
    key = ["rank", "pg_name", "pg_ranks", "op", "seq"]
    dev = m.filter(pl.col("dev_ts") >= 0).sort("dev_ts")
    by_dev = coll.sort("event_ts").join_asof(dev.select(*key, "dev_ts", "dev_end"), left_on="event_ts",
                                             right_on="dev_ts", by="rank", strategy="backward", check_sortedness=False).filter(
        pl.col("event_end") <= pl.col("dev_end")).select("_i", *key)
    host = m.filter((pl.col("op") != "other") & (pl.col("dev_ts") < 0)).sort("ts")
    by_host = coll.filter(pl.col("event_launch") >= 0).sort("event_launch").join_asof(
        host.select(*key, "ts", "end"), left_on="event_launch", right_on="ts", by="rank", strategy="backward", check_sortedness=False).filter(
        pl.col("event_launch") <= pl.col("end")).select("_i", *key)
    # a gap that waited for a collective run by the host (gloo's threads): the call whose host span is that span
    by_span = coll.filter(pl.col("event_launch") < 0).sort("event_ts").join_asof(
        host.select(*key, "ts", "end"), left_on="event_ts", right_on="ts", by="rank", strategy="backward",
        check_sortedness=False).filter(pl.col("event_end") <= pl.col("end")).select("_i", *key)
    found = pl.concat([by_dev, by_host.join(by_dev, on="_i", how="anti")])
    return pl.concat([found, by_span.join(found, on="_i", how="anti")])


def _findings(per_step: pl.DataFrame) -> list[Finding]:
    """A rank whose device idles ``FINDING_SHARE`` or more of its steps: how much, and mostly waiting for what."""
    out = []
    for r in per_step.group_by("rank").agg(pl.col("step_ns", "device_idle", *CAUSES).sum()).sort("rank").to_dicts():
        if r["step_ns"] <= 0 or r["device_idle"] < FINDING_SHARE * r["step_ns"]:
            continue
        main = max(CAUSES, key=lambda c: r[c])
        steps = max(1, per_step.filter(pl.col("rank") == r["rank"]).height)
        share = r["device_idle"] / r["step_ns"]
        out.append(Finding(
            "gpu_idle_gaps", f"rank {r['rank']}: the GPU idles {share:.0%} of the steps, mostly waiting for "
            f"{SAYS[main]} ({r[main] / r['step_ns']:.0%} of the step)",
            Severity.WARNING if share >= 0.25 else Severity.INFO, (int(r["rank"]),),
            {"share": share, "cause": main, "lost_per_step_ns": r[main] / steps,
             **{f"{c}_ns": int(r[c]) for c in CAUSES}}))
    return out


_BY_CAUSE = tuple(Col(c, f"waiting for {SAYS[c]}" if c != "other" else "other", NS) for c in CAUSES)
ANALYSIS = Analysis(
    name="gpu_gaps",
    description="GPU idle gaps one by one: waiting for the host, a sync, a collective's peers, data, other",
    run=run_gpu_gaps,
    needs=("kernels",),
    uses=("clock",),
    rank_part=rank_part, combine=combine,
    view=View("GPU idle gaps, explained", (
        Col("device_idle_ns", "GPU idle in the steps", NS),
        *(Col(f"{c0}_ns", c.label, NS) for c, c0 in zip(_BY_CAUSE, CAUSES)), Col("gaps", "gaps", "count")), (
        TableView("per_step", "per rank and step: the GPU's idle time by cause", (
            Col("rank", "rank", "count"), Col("step", "step", "count"), Col("step_ns", "step", NS),
            Col("device_idle", "GPU idle", NS), *_BY_CAUSE, Col("idle", "idle summed over streams", NS))),
        TableView("gaps", "the longest gaps, each with what explains it", (
            Col("rank", "rank", "count"), Col("stream", "stream", "count"), Col("step", "step", "count"),
            Col("at", "starts into the step", NS), Col("dur", "stream idle", NS), Col("device_idle", "GPU idle", NS),
            Col("cause", "waiting for", "words"), Col("event", "explained by"), Col("context", "inside"),
            Col("kernel", "next on the stream"), Col("collective", "collective"), Col("peer", "last peer", "count"),
            Col("peer_wait", "peer arrived later by", NS)))),
        "needs GPU kernels in the traces (profile a CUDA or ROCm job with device activities)", optional=True,
        place="operators"),
)
