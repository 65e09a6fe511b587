"""Slow links and groups: transfer-time outliers among peer groups doing the same collective.

Pattern: for every matched collective instance (clocks aligned), *arrival* on a rank is the start
of its device kernel (host span when there is none), and the instance's *transfer* time is the
median end minus the last arrival: the time the group needed once everyone was there. Arrival
skew (last minus first arrival) is waiting for a slow rank, not a slow link. For each class of
peers (op, message size, group size) the median transfer per group is tested with
``stats.high_outliers``; an outlier group is a slow link / group. No ratio is taken over peers whose
median transfer is below ``MIN_BASELINE_NS`` (nothing measurable to compare with). With a single peer (a
2 x 2 mesh's two dp groups) a group is slow only when every one of its instances is: on a busy host the
medians of two groups differ 3-8x either way from run to run (tests/e2e/test_edges_jobs.py). A rank that sits in every slow
group, and in at least two of them, is a communication straggler (its NIC or link is slow).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Finding, Result, Severity
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.analysis.clock.alignment import ClockAlignment, correction_expr
from rankscope.analysis.stats import high_outliers
from rankscope.model.run import Run

MIN_REL = 0.2  # a group must move the same bytes at least 20 % slower than its peers
# Peers' median transfer below this is no baseline: Kineto's host timestamps are µs, and a transfer
# clipped at 0 (gloo spans that end before the last arrival) is not a duration to divide by.
MIN_BASELINE_NS = 1_000


def instances(matched: pl.DataFrame, offsets: ClockAlignment | dict[int, int] | None) -> pl.DataFrame:
    """One row per matched instance: arrivals, skew, transfer time, last rank (aligned clocks:
    ``offsets`` is the clock analysis' alignment, plain per-rank offsets, or None)."""
    if matched.height == 0:
        return pl.DataFrame()
    arr = pl.when(pl.col("dev_ts") >= 0).then(pl.col("dev_ts")).otherwise(pl.col("ts"))
    fin = pl.when(pl.col("dev_end") >= 0).then(pl.col("dev_end")).otherwise(pl.col("end"))
    df = matched.with_columns(arr=arr - correction_expr(offsets, arr), fin=fin - correction_expr(offsets, fin))
    return (df.sort("arr").group_by("pg_name", "instance").agg(
        op=pl.col("op").first(), bytes=pl.col("bytes").max(), pg_ranks=pl.col("pg_ranks").first().cast(pl.Utf8),
        n=pl.len(), members=pl.col("rank").sort(), first=pl.col("arr").min(), last=pl.col("arr").max(),
        second=pl.col("arr").sort().reverse().get(1, null_on_oob=True), last_rank=pl.col("rank").last(),
        end=pl.col("fin").median())
        .with_columns(skew=pl.col("last") - pl.col("first"),
                      transfer=(pl.col("end") - pl.col("last")).clip(lower_bound=0))
        .filter(pl.col("n") > 1))


def slow_groups(inst: pl.DataFrame, min_rel: float = MIN_REL) -> list[dict]:
    """Groups whose median transfer time is an outlier among peers of the same (op, bytes, size)."""
    if inst.height == 0:
        return []
    per = (inst.group_by("op", "bytes", "n", "pg_name").agg(
        transfer=pl.col("transfer").median(), fastest=pl.col("transfer").min(), skew=pl.col("skew").median(),
        count=pl.len(),
        members=pl.col("members").first()).sort("op", "bytes", "n", "pg_name"))
    out = []
    for (op, nbytes, n), peers in per.group_by(["op", "bytes", "n"], maintain_order=True):
        if peers.height < 2:
            continue
        vals = peers["transfer"].to_numpy().astype(float)
        for o in high_outliers(vals, min_rel):
            row = peers.row(o.index, named=True)
            others = np.delete(vals, o.index)
            if float(np.median(others)) < MIN_BASELINE_NS:
                continue  # peers that took no measurable time: no ratio to take (gloo's clipped transfers)
            if peers.height == 2 and row["fastest"] <= float(np.median(others)) * (1 + min_rel):
                continue  # one peer: slow in every instance, or it cannot be told from the other being fast
            # Members as observed (pg_ranks strings are truncated after 30 ranks by the profiler).
            out.append({"pg_name": row["pg_name"], "ranks": [int(x) for x in row["members"]],
                        "op": op, "bytes": int(nbytes), "group_size": int(n),
                        "transfer_ns": float(row["transfer"]), "peers_median_ns": float(np.median(others)),
                        "ratio": float(row["transfer"] / np.median(others)), "peers": int(peers.height),
                        "arrival_skew_ns": float(row["skew"]), "instances": int(row["count"]),
                        "test": o.test, "statistic": round(o.statistic, 3)})
    return out


def comm_stragglers(slow: list[dict]) -> list[int]:
    """Ranks common to every slow group, when there are at least two distinct slow groups."""
    groups = {g["pg_name"]: set(g["ranks"]) for g in slow if g["ranks"]}
    if len(groups) < 2:
        return []
    common = set.intersection(*groups.values())
    return sorted(common) if len(common) == 1 else []


def run_links(run: Run, results: dict[str, Result]) -> Result:
    """Registered analysis "links": slow links / groups with their numbers."""
    from rankscope.analysis.clock.alignment import alignment_from, matched_collectives

    matched = matched_collectives(run)
    if matched.height == 0:
        return Result("links", skipped="no collectives matched across ranks")
    inst = instances(matched, alignment_from(results))
    slow = slow_groups(inst)
    findings = [Finding(
        kind="slow_link", severity=Severity.WARNING, ranks=tuple(g["ranks"]),
        title=f"group {g['pg_name']} (ranks {_short(g['ranks'])}) is slow: {g['op']} of "
              f"{g['bytes'] / 2**20:.1f} MiB takes {g['ratio']:.1f}x its {g['peers'] - 1} peer(s)",
        evidence=g, confidence=min(1.0, g["instances"] / 5)) for g in slow]
    table = (inst.group_by("pg_name", "op", "bytes", "n").agg(
        pl.col("pg_ranks").first(), count=pl.len(), transfer_ns=pl.col("transfer").median(),
        skew_ns=pl.col("skew").median()).sort("pg_name", "op", "bytes"))
    return Result("links", tables={"groups": table.to_arrow()}, findings=findings,
                  summary={"slow_groups": len(slow), "comm_stragglers": comm_stragglers(slow)})


def _short(ranks: list[int]) -> str:
    return ",".join(map(str, ranks)) if len(ranks) <= 6 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"


ANALYSIS = Analysis(
    name="links",
    description="slow links / groups: transfer-time outliers among peer groups",
    run=run_links,
    after=("clock",),
    view=View("Slow links and groups", (Col("slow_groups", "slow groups", "count"),
                                  Col("comm_stragglers", "ranks in every slow group", "ranks")),
        (TableView("groups", "per process group and operation", (
            Col("pg_ranks", "group (ranks)", "group"), Col("op", "operation"), Col("bytes", "size", "bytes"),
            Col("count", "calls", "count"), Col("transfer_ns", "transfer (median)", NS),
            Col("skew_ns", "arrival skew (median)", NS))),), place="communication"),
)
