"""Straggler verdict: which rank the others wait for, and the component that makes it slow.

Pattern: in synchronous data-parallel training every rank's step takes the same wall time,
because the collectives make early ranks wait. A straggler is therefore the rank whose *own*
time per step (wall minus exposed communication wait) is longest. Algorithm:
1. per rank, the median over complete steps of own time = wall − exposed communication;
2. a robust outlier rule against the other ranks: own time > median(others) by more than
   max(3.5 × 1.4826 × MAD(others), 15 % of the median), and the rank is above the others'
   median in at least 60 % of the steps (a single noisy step does not make a straggler);
3. cause = the component (compute, data wait, host idle) with the largest excess over the
   other ranks' median, reported with its numbers. "No straggler" is a normal answer.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from rankscope.analysis.base import Finding, Result, Severity
from rankscope.model.run import Run

REL_THRESHOLD = 0.15
CONSISTENCY = 0.6
COMPONENTS = {"computing": "compute", "data_wait": "data", "free": "host"}


def per_rank(bd: pl.DataFrame) -> pl.DataFrame:
    """Median per-rank step components over complete steps."""
    done = bd.filter(pl.col("complete"))
    if done.height == 0:
        done = bd
    return (done.with_columns(own=pl.col("wall") - pl.col("comm_exposed"))
            .group_by("rank").agg(pl.col(c).median() for c in
                                  ["wall", "own", "computing", "comm_exposed", "data_wait", "free"])
            .sort("rank"))


def outliers(values: np.ndarray) -> list[tuple[int, float]]:
    """Indices whose value exceeds the median of the others robustly, with their relative excess."""
    out = []
    for i, v in enumerate(values):
        others = np.delete(values, i)
        if len(others) == 0:
            continue
        med = float(np.median(others))
        mad = float(np.median(np.abs(others - med))) * 1.4826
        limit = max(3.5 * mad, REL_THRESHOLD * med)
        if med > 0 and v - med > limit:
            out.append((i, (v - med) / med))
    return out


def consistency(bd: pl.DataFrame, rank: int) -> float:
    """Fraction of steps in which ``rank``'s own time exceeds the other ranks' median."""
    own = bd.with_columns(own=pl.col("wall") - pl.col("comm_exposed"))
    ref = own.filter(pl.col("rank") != rank).group_by("step").agg(pl.col("own").median().alias("ref"))
    mine = own.filter(pl.col("rank") == rank).join(ref, on="step")
    return float((mine["own"] > mine["ref"]).mean() or 0.0) if mine.height else 0.0


def cause(row: dict[str, float], others: pl.DataFrame) -> tuple[str, dict[str, float]]:
    """The component with the largest excess over the other ranks' median."""
    excess = {name: float(row[col] - others[col].median()) for col, name in COMPONENTS.items()}
    return max(excess, key=lambda k: excess[k]), excess


# DDP launches gradient communication from AccumulateGrad post-hooks (reducer -> comm hook);
# host time that grows there is time spent getting the rank's gradients onto the wire.
_COMM_HOOK_MARKERS = ("AccumulateGrad", "reducer", "comm_hook", "allreduce_hook")


def top_level_excess(run: Run, rank: int, others: list[int]) -> tuple[str, float]:
    """The step-level operator whose time per step grew most on ``rank`` against ``others``."""
    def per_op(r: int) -> pl.DataFrame:
        ev = pl.from_arrow(run.table(r, "events", columns=["name", "dur", "depth", "kind"]))
        n_steps = max(run.table(r, "steps", columns=["step"]).num_rows, 1)
        return (ev.filter((pl.col("depth") == 1) & pl.col("kind").cast(pl.Utf8).is_in(["cpu_op", "user_annotation"]))
                .group_by(pl.col("name").cast(pl.Utf8)).agg((pl.col("dur").sum() / n_steps).alias(str(r))))
    mine = per_op(rank)
    ref = pl.concat([per_op(o).rename({str(o): "v"}) for o in others]).group_by("name").agg(pl.col("v").median())
    joined = mine.join(ref, on="name", how="left").fill_null(0).with_columns(
        excess=pl.col(str(rank)) - pl.col("v")).sort("excess", descending=True)
    if joined.height == 0:
        return "", 0.0
    top = joined.row(0, named=True)
    return str(top["name"]), float(top["excess"])


def refine(run: Run, kind: str, rank: int, others: list[int], evidence: dict) -> str:
    """Split host 'compute' into real compute and gradient-communication hooks."""
    if kind != "compute":
        return kind
    op, excess = top_level_excess(run, rank, others)
    evidence["top_operator_excess"] = {"name": op, "excess_ns": round(excess)}
    if any(m in op for m in _COMM_HOOK_MARKERS):
        return "comm"
    return kind


def run_straggler(run: Run, results: dict) -> Result:
    bd = pl.from_arrow(results["breakdown"].tables["breakdown"])
    pr = per_rank(bd)
    if pr.height < 2:
        return Result("straggler", skipped="needs at least 2 ranks with steps")
    own = pr["own"].to_numpy().astype(float)
    findings = []
    for i, rel in outliers(own):
        if consistency(bd, int(pr["rank"][i])) < CONSISTENCY:
            continue
        row = pr.row(i, named=True)
        others = pr.filter(pl.col("rank") != row["rank"])
        kind, excess = cause(row, others)
        evidence = {"own_time_ns": row["own"], "others_median_ns": float(others["own"].median()),
                    "excess_ns": {k: round(v) for k, v in excess.items()}, "relative_excess": float(rel)}
        if bd.filter(pl.col("rank") == row["rank"])["source"][0] == "host":
            kind = refine(run, kind, int(row["rank"]), others["rank"].to_list(), evidence)
        evidence["cause"] = kind
        findings.append(Finding(
            kind="straggler", title=f"rank {row['rank']} is slow: {kind}, +{rel:.0%} step time",
            severity=Severity.WARNING, ranks=(int(row["rank"]),), evidence=evidence))
    verdict = "; ".join(f.title for f in findings) if findings else "no straggler"
    return Result("straggler", tables={"per_rank": pr.to_arrow()}, findings=findings,
                  summary={"verdict": verdict})
