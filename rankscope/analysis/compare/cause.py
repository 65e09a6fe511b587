"""What explains a run's step-time change against its baseline: the rank, the component, the operator and
input shape, after the hosts' speed difference is taken out.

Pattern: in synchronous training every rank's step takes the same wall time, so the ranks that *wait*
longer (exposed communication) are not the cause; the rank whose *own* time (wall minus exposed
communication) grew is. Measured (issue 12): a run whose rank 2 got 1.5x the tokens, against a baseline
on a 7 % slower host, headlined "comm_exposed on rank 0 (+62.59 ms per step)" (a waiting rank) and
showed rank 2's compute change as -6.5 ms (host speed not normalized).

1. speed factor: per (operator, input shapes) called in both runs, the time per call in this run over
   the baseline's; the median weighted by the baseline's time. The same work on the same shapes then
   compares hosts, not workloads (keys whose shapes changed drop out by themselves);
2. per rank: own time and its components, this run minus factor x baseline ("normalized" deltas);
3. per (rank, operator, input shapes): time per step, this run minus factor x baseline;
4. headline: the rank with the largest normalized own-time delta, its component that grew most, and
   that rank's operator (and shape) that grew most; with the share of the step-time change it explains.
   Where both runs have a critical path (``pathcause``), the rank whose part of the path changed most is
   named instead (a rank that only waits grows its own time, not its what-if saving).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Finding, Severity, frame
from rankscope.model.run import Run

if TYPE_CHECKING:
    from rankscope.analysis.compare.pathcause import PathCause

PARTS = {"computing": "compute", "data_wait": "data wait", "free": "idle"}
FROM_PATH = {"data": "data_wait", "compute": "computing", "host": "free"}  # path segment class -> component
TOP = 50


def op_shapes(run: Run) -> pl.DataFrame:
    """Per (rank, operator, input shapes): µs per step and calls per step (host operators)."""
    parts = []
    for r in run.rank_ids:
        ev = frame(run.table(r, "events", columns=["name", "kind", "dur", "input_dims"]))
        n = max(1, run.ranks[r].counts.get("steps", 0) or 1)
        ev = ev.filter(pl.col("kind").cast(pl.Utf8) == "cpu_op")
        parts.append(ev.group_by(pl.col("name").cast(pl.Utf8), pl.col("input_dims").cast(pl.Utf8).fill_null(""))
                     .agg(us=pl.col("dur").sum() / 1e3 / n, calls=pl.len() / n).with_columns(rank=pl.lit(r)))
    return pl.concat(parts) if parts else pl.DataFrame(
        schema={"name": pl.Utf8, "input_dims": pl.Utf8, "us": pl.Float64, "calls": pl.Float64, "rank": pl.Int32})


def speed_factor(a: pl.DataFrame, b: pl.DataFrame) -> tuple[float, int]:
    """(this run's time per call over the baseline's on the same operator and shapes, keys used)."""
    def per_call(df: pl.DataFrame) -> pl.DataFrame:
        return df.group_by("name", "input_dims").agg(us=pl.col("us").sum(), calls=pl.col("calls").sum())

    j = per_call(a).join(per_call(b), on=["name", "input_dims"], suffix="B").filter(
        (pl.col("calls") > 0) & (pl.col("callsB") > 0) & (pl.col("usB") > 0))
    if j.height == 0:
        return 1.0, 0
    ratio = ((j["us"] / j["calls"]) / (j["usB"] / j["callsB"])).to_numpy()
    w = j["usB"].to_numpy()
    order = np.argsort(ratio)
    cum = np.cumsum(w[order])
    return float(ratio[order][np.searchsorted(cum, cum[-1] / 2)]), j.height


def rank_operator_deltas(a: pl.DataFrame, b: pl.DataFrame, factor: float) -> pl.DataFrame:
    """Per (rank, operator, input shapes): us, usBase, usDiff and usDiffNorm (us - factor x usBase)."""
    j = a.join(b, on=["rank", "name", "input_dims"], how="full", coalesce=True, suffix="Base").fill_null(0.0)
    j = j.with_columns(pl.col("rank").cast(pl.Int64)).with_columns(usDiff=pl.col("us") - pl.col("usBase"), usDiffNorm=pl.col("us") - factor * pl.col("usBase"),
                       callsDiff=pl.col("calls") - pl.col("callsBase"))
    return j.select("rank", "name", "input_dims", "us", "usBase", "usDiff", "usDiffNorm", "calls", "callsBase",
                    "callsDiff").sort(pl.col("usDiffNorm").abs(), descending=True).head(TOP)


def rank_operator_totals(a: pl.DataFrame, b: pl.DataFrame, factor: float) -> pl.DataFrame:
    """Per (rank, operator), all input shapes together: us, usBase, usDiffNorm, and the input shape that
    holds most of the time in each run (``inputs``, ``inputsBase``); largest |usDiffNorm| first."""
    from rankscope.analysis.diagnosis.work import first_dims

    def tot(df: pl.DataFrame) -> pl.DataFrame:
        return df.sort("us", descending=True).group_by("rank", "name").agg(
            pl.col("us").sum(), pl.col("calls").sum(), inputs=pl.col("input_dims").first())

    j = tot(a).join(tot(b), on=["rank", "name"], how="full", coalesce=True, suffix="Base")
    j = j.with_columns(pl.col("us", "usBase", "calls", "callsBase").fill_null(0.0),
                       pl.col("inputs", "inputsBase").fill_null("").map_elements(first_dims, return_dtype=pl.Utf8))
    j = j.with_columns(usDiffNorm=pl.col("us") - factor * pl.col("usBase"), rank=pl.col("rank").cast(pl.Int64))
    j = j.filter(~pl.col("name").str.starts_with("autograd::engine::evaluate_function"))  # = the node inside it
    return j.select("rank", "name", "inputs", "inputsBase", "us", "usBase", "usDiffNorm", "calls", "callsBase").sort(
        pl.col("usDiffNorm").abs(), descending=True).head(TOP)


def own_deltas(ranks: pl.DataFrame, factor: float) -> pl.DataFrame:
    """Per rank (``diff.rank_deltas`` rows): own time and components, normalized deltas (ns)."""
    own = pl.col("wall") - pl.col("comm_exposed")
    own_b = pl.col("wallBase") - pl.col("comm_exposedBase")
    cols = [(own - factor * own_b).alias("ownDiffNorm"), own.alias("own"), own_b.alias("ownBase")]
    cols += [(pl.col(c) - factor * pl.col(f"{c}Base")).alias(f"{c}DiffNorm") for c in PARTS]
    return ranks.with_columns(cols).select("rank", "own", "ownBase", "ownDiffNorm", *[f"{c}DiffNorm" for c in PARTS])


def _operator(mine: pl.DataFrame) -> tuple[str, dict[str, Any]]:
    """The operator (all shapes together) that grew most on one rank, with its usual input shape here and
    in the baseline: "; aten::bmm +20.1 ms (inputs [8, 4, 130, 32] vs [8, 4, 84, 32])"."""
    from rankscope.analysis.diagnosis.work import first_dims

    mine = mine.filter(pl.col("name").str.starts_with("aten::"))
    per = mine.group_by("name").agg(d=pl.col("usDiffNorm").sum()).sort("d", descending=True)
    if per.height == 0 or float(per["d"][0]) <= 0:
        return "", {}
    name, d = str(per["name"][0]), float(per["d"][0])
    rows = mine.filter(pl.col("name") == name)
    here = first_dims(str(rows.sort("us", descending=True)["input_dims"][0]))
    there = first_dims(str(rows.sort("usBase", descending=True)["input_dims"][0]))
    shape = f" (inputs {here} vs {there})" if here and there and here != there else (
        f" (inputs {here}, as in the baseline)" if here else "")
    return f"; {name} {d / 1e3:+.1f} ms{shape}", {"operator": name, "us_diff_norm": round(d, 1),
                                                  "input_dims": here, "input_dims_base": there}


def headline(own: pl.DataFrame, ops: pl.DataFrame, wall_diff_ns: float, factor: float, keys: int,
             path: PathCause | None = None, no_path: str = "") -> Finding | None:
    """The change that explains most of the step-time change (see the module's rules). With ``path`` (the
    rank whose part of the critical path changed most) that rank is named, its component is the class of its
    path segments that grew, and the share explained is its what-if saving's change; without, rule 4 and
    ``no_path`` (why the path did not decide) is said."""
    if own.height == 0:
        return None
    mine = own.filter(pl.col("rank") == path.rank) if path is not None else own.head(0)
    if mine.height == 0:
        path = None
    row = mine.row(0, named=True) if path is not None else own.sort("ownDiffNorm", descending=True).row(0, named=True)
    rank, d_own = int(row["rank"]), float(row["ownDiffNorm"])
    part = max(PARTS, key=lambda c: float(row[f"{c}DiffNorm"]))
    if path is not None and path.part:
        part = FROM_PATH[path.part]
    op_txt, ev_op = "", {}  # type: tuple[str, dict[str, Any]]
    if part == "computing":
        op_txt, ev_op = _operator(ops.filter(pl.col("rank") == rank))
    d_explains = path.diff_ns if path is not None else d_own
    share = d_explains / wall_diff_ns if wall_diff_ns > 0 else None
    if share is not None and share > 1.05:  # the other ranks' own time fell meanwhile
        expl = f", more than the step-time change ({wall_diff_ns / 1e6:+.1f} ms)"
    elif share is not None and share > 0:
        expl = f", explains {share:.0%} of the step-time change ({wall_diff_ns / 1e6:+.1f} ms)"
    else:
        expl = f"; step time {wall_diff_ns / 1e6:+.1f} ms"
    speed = f"; host speed normalized: the same operators on the same shapes took {factor:.2f}x the baseline's time" \
        if keys and abs(factor - 1) >= 0.02 else ""
    ev: dict[str, Any] = {"rank": rank, "own_diff_norm_ns": round(d_own), "component": PARTS[part],
                          "component_diff_norm_ns": round(float(row[f"{part}DiffNorm"])), "speed_factor": factor,
                          "speed_keys": keys, "wall_diff_ns": round(wall_diff_ns), "explained_share": share, **ev_op,
                          "method": "critical_path" if path is not None else "own_time"}
    if path is not None:
        ev["critical_path"] = path.evidence()
    why = f"; {path.clause()}" if path is not None else (f"; not from the critical path: {no_path}" if no_path else "")
    sev = Severity.WARNING if share is not None and share >= 0.5 else Severity.INFO
    return Finding("cause_of_change", f"rank {rank}'s own time {d_own / 1e6:+.1f} ms per step ({PARTS[part]} "
                   f"{float(row[f'{part}DiffNorm']) / 1e6:+.1f} ms{op_txt}){expl}{speed}{why}", sev, (rank,), ev)
