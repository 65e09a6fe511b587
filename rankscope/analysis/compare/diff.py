"""Run-vs-run comparison: what changed between a run and its baseline.

Pattern (the deleted TensorBoard plugin's Diff view, HTA's trace diff): the same job run twice;
the question is which component of the step time moved, on which rank, and which operators,
kernels and collectives explain it. Columns follow the X / XBase / XDiff convention
(``XDiff = X - XBase``). Algorithm, all on columns (polars):

1. steps: each rank's steps are paired by position (the i-th profiled step of the run with the
   i-th of the baseline, since step numbers may differ), breakdown components joined on
   (rank, position);
2. ranks: medians over complete steps of each component, per rank;
3. operators / kernels: total time per name and rank, divided by the number of steps, then mean,
   min and max over ranks per run; joined on name, sorted by |meanDiff|;
4. collectives: count, bytes and total host time per (op, group), mean over ranks;
5. the cause of the change (``rankscope.analysis.compare.cause``): per rank own-time and per (rank, operator,
   input shapes) deltas normalized by a run-wide host speed factor; the headline finding;
6. where both runs have a critical path (``pathcause``): per rank the what-if saving and the steps it bounds in
   each run (``path``), its own segments on the path per class (``path_segments``); the headline then names
   the rank whose part of the path changed most, never one that only waits; else ``path_why`` says why not.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rankscope.analysis.base import Finding, Result, Severity, frame
from rankscope.analysis.view import NS, Col, TableView

if TYPE_CHECKING:  # polars is imported inside the functions, so that importing this module stays light
    import polars as pl

    from rankscope.model.run import Run

COMPONENTS = ["wall", "computing", "comm_exposed", "data_wait", "free"]
TOP = 50




def _bd(results: dict[str, Result]) -> pl.DataFrame | None:
    import polars as pl

    r = results.get("breakdown")
    if r is None or r.skipped:
        return None
    df = frame(r.tables["breakdown"])
    return df.sort("rank", "step").with_columns(pos=pl.int_range(pl.len()).over("rank"))


def _xdiff(a: pl.DataFrame, b: pl.DataFrame, keys: list[str], cols: list[str]) -> pl.DataFrame:
    import polars as pl

    j = a.select(keys + cols).join(b.select(keys + cols), on=keys, how="inner", suffix="Base")
    return j.with_columns([(pl.col(c) - pl.col(f"{c}Base")).alias(f"{c}Diff") for c in cols]).select(
        keys + [x for c in cols for x in (c, f"{c}Base", f"{c}Diff")])


def step_deltas(bd_a: pl.DataFrame, bd_b: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, position) breakdown deltas; ``step`` and ``stepBase`` name the paired steps."""
    d = _xdiff(bd_a, bd_b, ["rank", "pos"], ["step"] + COMPONENTS)
    return d.drop("stepDiff").sort("rank", "pos")


def rank_deltas(bd_a: pl.DataFrame, bd_b: pl.DataFrame) -> pl.DataFrame:
    """Per rank median of each component over complete steps, X / XBase / XDiff."""
    import polars as pl

    def med(bd: pl.DataFrame) -> pl.DataFrame:
        done = bd.filter(pl.col("complete")) if bd.filter(pl.col("complete")).height else bd
        return done.group_by("rank").agg(pl.col(c).median().cast(pl.Float64) for c in COMPONENTS)

    return _xdiff(med(bd_a), med(bd_b), ["rank"], COMPONENTS).sort("rank")


def name_stats(run: Run, kinds: tuple[str, ...]) -> pl.DataFrame:
    """Per name: mean / min / max over ranks of total µs per step, and calls per step."""
    import polars as pl

    parts = []
    for r in run.rank_ids:
        ev = frame(run.table(r, "events", columns=["name", "kind", "dur", "depth"]))
        n_steps = max(1, run.ranks[r].counts.get("steps", 0) or 1)
        ev = ev.with_columns(pl.col("name").cast(pl.Utf8), pl.col("kind").cast(pl.Utf8))
        ev = ev.filter(pl.col("kind").is_in(list(kinds)) & ~pl.col("name").str.starts_with("ProfilerStep#"))
        parts.append(ev.group_by("name").agg((pl.col("dur").sum() / 1e3 / n_steps).alias("us"),
                                              (pl.len() / n_steps).alias("calls")).with_columns(rank=pl.lit(r)))
    if not parts:
        return pl.DataFrame(schema={"name": pl.Utf8, "mean": pl.Float64, "min": pl.Float64, "max": pl.Float64,
                                    "calls": pl.Float64})
    allr = pl.concat(parts)
    n = len(run.rank_ids)
    # A name absent on some ranks counts 0 there: mean over all ranks, min 0 when missing.
    return allr.group_by("name").agg((pl.col("us").sum() / n).alias("mean"),
                                     pl.when(pl.len() < n).then(0.0).otherwise(pl.col("us").min()).alias("min"),
                                     pl.col("us").max().alias("max"), (pl.col("calls").sum() / n).alias("calls"))


def name_deltas(run: Run, base: Run, kinds: tuple[str, ...]) -> pl.DataFrame:
    """Operator or kernel deltas (µs per step, mean over ranks), largest |meanDiff| first."""
    import polars as pl

    a, b = name_stats(run, kinds), name_stats(base, kinds)
    j = a.join(b, on="name", how="full", coalesce=True, suffix="Base").fill_null(0.0)
    j = j.with_columns(meanDiff=pl.col("mean") - pl.col("meanBase"), callsDiff=pl.col("calls") - pl.col("callsBase"),
                       spread=pl.col("max") - pl.col("min"), spreadBase=pl.col("maxBase") - pl.col("minBase"))
    cols = ["name", "mean", "meanBase", "meanDiff", "min", "max", "spread", "minBase", "maxBase", "spreadBase",
            "calls", "callsBase", "callsDiff"]
    return j.select(cols).sort(pl.col("meanDiff").abs(), pl.col("name"), descending=[True, False]).head(TOP)


def comm_stats(run: Run) -> pl.DataFrame:
    """Per (op, group): calls, bytes and host time per rank (means over ranks)."""
    import polars as pl

    parts = [frame(run.table(r, "collectives", columns=["op", "pg_ranks", "dur", "bytes_in"]))
             .with_columns(pl.col("op").cast(pl.Utf8), pl.col("pg_ranks").cast(pl.Utf8)) for r in run.rank_ids]
    n = len(run.rank_ids)
    return pl.concat(parts).group_by("op", "pg_ranks").agg(
        (pl.len() / n).alias("calls"), (pl.col("bytes_in").sum() / n).alias("bytes"),
        (pl.col("dur").sum() / 1e3 / n).alias("time_us"))


def comm_deltas(run: Run, base: Run) -> pl.DataFrame:
    """Collective deltas per (op, group) with X / XBase / XDiff columns."""
    import polars as pl

    a, b = comm_stats(run), comm_stats(base)
    j = a.join(b, on=["op", "pg_ranks"], how="full", coalesce=True, suffix="Base").fill_null(0.0)
    cols = ["calls", "bytes", "time_us"]
    return j.with_columns([(pl.col(c) - pl.col(f"{c}Base")).alias(f"{c}Diff") for c in cols]).select(
        ["op", "pg_ranks"] + [x for c in cols for x in (c, f"{c}Base", f"{c}Diff")]).sort("op", "pg_ranks")


def run_diff(run: Run, results: dict[str, Result], base: Run, base_results: dict[str, Result]) -> Result:
    """Compare ``run`` with ``base``; both with their analysis results."""
    tables: dict[str, Any] = {}
    summary: dict[str, Any] = {"run": run.run_id, "baseline": base.run_id}
    bd_a, bd_b = _bd(results), _bd(base_results)
    if bd_a is not None and bd_b is not None:
        tables["steps"] = step_deltas(bd_a, bd_b)
        tables["ranks"] = rank_deltas(bd_a, bd_b)
        r = tables["ranks"]
        summary["wall_ms"] = float(r["wall"].median()) / 1e6 if r.height else None
        summary["wall_base_ms"] = float(r["wallBase"].median()) / 1e6 if r.height else None
    else:
        summary["steps"] = "no step breakdown in one of the runs"
    from rankscope.analysis.compare import cause as dc

    sa, sb = dc.op_shapes(run), dc.op_shapes(base)
    factor, keys = dc.speed_factor(sa, sb)
    summary["speed_factor"], summary["speed_keys"] = round(factor, 4), keys
    tables["rank_operators"] = dc.rank_operator_deltas(sa, sb, factor)
    tables["rank_operator_totals"] = dc.rank_operator_totals(sa, sb, factor)
    if "ranks" in tables:
        tables["own"] = dc.own_deltas(tables["ranks"], factor)
    _path_tables(tables, summary, results, base_results, factor)
    tables["operators"] = name_deltas(run, base, ("cpu_op", "user_annotation"))
    tables["kernels"] = name_deltas(run, base, ("kernel", "memcpy", "memset"))
    tables["collectives"] = comm_deltas(run, base)
    return Result("diff", tables=tables, summary=summary, findings=_findings(tables, summary))


def _path_tables(tables: dict[str, Any], summary: dict[str, Any], results: dict[str, Result],
                 base_results: dict[str, Result], factor: float) -> None:
    """The critical path's per-rank what-if savings and own path segments, both runs (``pathcause``), or why not."""
    from rankscope.analysis.compare import pathcause as pc

    wa, wb = pc.why_no_path(results), pc.why_no_path(base_results)
    if wa or wb:
        summary["path_why"] = f"{wa} in both runs" if wa == wb else "; ".join(
            f"{w} in the {which}" for w, which in ((wa, "run"), (wb, "baseline")) if w)
        return
    tables["path"] = pc.path_deltas(results, base_results, factor)
    tables["path_segments"] = pc.path_segment_deltas(results, base_results, factor, tables["path"]["rank"].to_list())


def _path_cause(tables: dict[str, Any], summary: dict[str, Any], wall_diff_ns: float, step_ns: float) -> Any:
    """The rank named from the critical path (``pathcause.cause``), kept in the summary; None with the reason."""
    from rankscope.analysis.compare import pathcause as pc

    if "path" not in tables:
        return None
    pcause, why = pc.cause(tables["path"], tables["path_segments"], wall_diff_ns, step_ns)
    summary["path_cause"] = pcause.evidence() if pcause is not None else None
    if why:
        summary["path_why"] = why
    return pcause


def _findings(tables: dict[str, Any], summary: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    a, b = summary.get("wall_ms"), summary.get("wall_base_ms")
    if a and b:
        rel = (a - b) / b
        sev = Severity.WARNING if rel > 0.1 else Severity.INFO
        out.append(Finding("step_time_change", f"median step time {a:.2f} ms vs {b:.2f} ms ({rel:+.1%})", sev,
                           evidence={"wall_ms": a, "wall_base_ms": b, "relative": rel}))
    own = tables.get("own")
    if own is not None and own.height and a is not None and b is not None:
        from rankscope.analysis.compare.cause import headline

        # the rank whose part of the critical path grew, else whose own time grew (not a rank that waited
        # longer), host speed taken out: first
        pcause = _path_cause(tables, summary, (a - b) * 1e6, b * 1e6)
        cause = headline(own, tables["rank_operators"], (a - b) * 1e6, summary.get("speed_factor", 1.0),
                         summary.get("speed_keys", 0), pcause, summary.get("path_why", ""))
        if cause is not None:
            out.insert(0, cause)
    ops = tables.get("operators")
    if ops is not None and ops.height:
        row = ops.row(0, named=True)
        d = row["meanDiff"]  # µs; said in ms from 1 ms on, as every other time a person reads
        amount = f"{d / 1e3:+,.1f} ms" if abs(d) >= 1e3 else f"{d:+,.0f} µs"
        out.append(Finding("largest_operator_change", f"operator {row['name']}: {amount} per step",
                           Severity.INFO, evidence={k: row[k] for k in ("name", "mean", "meanBase", "spread")}))
    return out


D = "Δ "  # a change against the baseline; signed units ("ns+", ...) print their sign
_STEP_DIFF = (Col("wall", "step time", NS), Col("wallBase", "baseline", NS), Col("wallDiff", D + "step time", "ns+"),
              Col("computingDiff", D + "compute", "ns+"), Col("comm_exposedDiff", D + "exposed communication", "ns+"),
              Col("data_waitDiff", D + "data wait", "ns+"), Col("freeDiff", D + "idle", "ns+"))
_NAME_DIFF = (Col("mean", "time per step", "us"), Col("meanBase", "baseline", "us"), Col("meanDiff", D + "time", "us+"),
              Col("min", "least rank", "us"), Col("max", "most rank", "us"), Col("calls", "calls per step", "count"),
              Col("callsDiff", D + "calls", "count+"))
# The diff's view (drawn by ``render.diff``): its tables in the order shown, a readable subset of each one's columns
# (the rest stays in ``rankscope diff --json``).
VIEW_TABLES: tuple[TableView, ...] = (
    TableView("ranks", "per rank (medians over steps)", (Col("rank", "rank", "count"),) + _STEP_DIFF),
    TableView("own", "per rank, host speed taken out (this run − speed factor × baseline)", (
        Col("rank", "rank", "count"), Col("own", "own time", NS), Col("ownBase", "baseline", NS),
        Col("ownDiffNorm", D + "own time", "ns+"), Col("computingDiffNorm", D + "compute", "ns+"),
        Col("data_waitDiffNorm", D + "data wait", "ns+"), Col("freeDiffNorm", D + "idle", "ns+"))),
    TableView("path", "per rank on the critical path (what-if: the step if the rank ran at the others' median)", (
        Col("rank", "rank", "count"), Col("saving", "what-if saving", NS), Col("savingBase", "baseline", NS),
        Col("savingDiff", D + "saving", "ns+"), Col("bounds", "steps it bounds", "count"),
        Col("boundsBase", "baseline", "count"), Col("of_steps", "steps", "count")),
        "no critical path in one of the runs (see the summary's path_why)"),
    TableView("path_segments", "per rank, its own time on the critical path per step (median over steps)", (
        Col("rank", "rank", "count"), Col("part", "part"), Col("on_path", "on the path", NS),
        Col("on_pathBase", "baseline", NS), Col("on_pathDiff", D + "on the path", "ns+")),
        "no critical path in one of the runs"),
    TableView("steps", "per rank and step (steps paired in order)", (
        Col("rank", "rank", "count"), Col("step", "step", "count"), Col("stepBase", "baseline step", "count"))
        + _STEP_DIFF),
    TableView("rank_operator_totals", "per rank and operator (per step; Δ with host speed taken out)", (
        Col("rank", "rank", "count"), Col("name", "operator"), Col("inputs", "usual inputs"),
        Col("inputsBase", "baseline inputs"), Col("us", "time per step", "us"), Col("usBase", "baseline", "us"),
        Col("usDiffNorm", D + "time", "us+"), Col("calls", "calls per step", "count"),
        Col("callsBase", "baseline calls", "count"))),
    TableView("rank_operators", "per rank, operator and input shapes (per step)", (
        Col("rank", "rank", "count"), Col("name", "operator"), Col("input_dims", "input shapes"),
        Col("us", "time per step", "us"), Col("usBase", "baseline", "us"), Col("usDiff", D + "time", "us+"),
        Col("usDiffNorm", D + "time, host speed taken out", "us+"), Col("calls", "calls per step", "count"),
        Col("callsDiff", D + "calls", "count+"))),
    TableView("operators", "operators (per step, mean over ranks)", (Col("name", "operator"),) + _NAME_DIFF),
    TableView("kernels", "kernels (per step, mean over ranks)", (Col("name", "kernel"),) + _NAME_DIFF,
              "no device kernels in either run (CPU-only traces)"),
    TableView("collectives", "collectives (per rank over the capture)", (
        Col("op", "operation"), Col("pg_ranks", "group (ranks)", "group"), Col("calls", "calls", "count"),
        Col("callsDiff", D + "calls", "count+"), Col("bytes", "size", "bytes"), Col("bytesDiff", D + "size", "bytes+"),
        Col("time_us", "time", "us"), Col("time_usBase", "baseline", "us"), Col("time_usDiff", D + "time", "us+"))),
)
