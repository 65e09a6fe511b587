"""Which rank's part of the critical path explains a run's step-time change against its baseline.

Pattern (issue 25): who waits for whom comes from dependencies across ranks. A rank that only waits
(FSDP2's waits inside its own spans, gloo's collectives on their own threads: booked as compute) grows its
own time without causing anything; the rank the others wait for grows its part of the critical path.
The ``critical_path`` analysis gives, per rank and step, the what-if saving: how much shorter the step
would be if that rank's own segments ran at the other ranks' median. Algorithm, on columns (polars):

1. per rank: median what-if saving over steps in each run (the baseline's times the host speed factor),
   the steps the rank bounds in each, and the difference: ``path`` table;
2. per (rank, class) of the rank's own segments on the path (data, compute, host: ``bound.path_classes``)
   over every step, per step, in each run: ``path_segments``;
3. the rank named: the one whose saving changed most (either way: a straggler that appeared while the host
   got faster still shows as its saving grown, the step shorter), when that change is at least a quarter of
   the step-time change and 0.5 % of the step; the class named is its path class that changed most the
   same way. Otherwise no rank is named from the path (the change is shared, or a run has no path) and the
   reason is kept (``why``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from rankscope.analysis.base import Result, frame

SHARE_OF_CHANGE = 0.25  # a rank's saving change must hold this share of the step-time change to be named
SHARE_OF_STEP = 0.005  # ... and this share of the step (the rounding of a step: critical_path's STEADY_SHARE)
CLASSES = ("data", "compute", "host")


@dataclass
class PathCause:
    """The rank whose part of the critical path changed most, with the facts a headline states (ns)."""

    rank: int
    saving_ns: float
    saving_base_ns: float  # the baseline's, times the speed factor
    steps: int
    of_steps: int
    steps_base: int
    of_steps_base: int
    part: str = ""  # the class of its own path segments that grew most ("" when none grew)
    part_diff_ns: float = 0.0
    classes: dict[str, float] = field(default_factory=dict)

    @property
    def diff_ns(self) -> float:
        return self.saving_ns - self.saving_base_ns

    def clause(self) -> str:
        """"critical path: rank 1 bounds 4 of 5 steps (baseline 2 of 5); at the other ranks' median the step
        would be 108.2 ms shorter, vs 14.0 ms in the baseline". (Its own time on the path per class is in
        ``path_segments``: not said, because it counts the whole segment where the path crosses the rank, not
        only the part longer than the others'.)"""
        return (f"critical path: rank {self.rank} bounds {self.steps} of {self.of_steps} steps (baseline "
                f"{self.steps_base} of {self.of_steps_base}); at the other ranks' median the step would be "
                f"{self.saving_ns / 1e6:.1f} ms shorter, vs {self.saving_base_ns / 1e6:.1f} ms in the baseline")

    def evidence(self) -> dict[str, Any]:
        return {"rank": self.rank, "saving_ns": round(self.saving_ns), "saving_base_ns": round(self.saving_base_ns),
                "saving_diff_ns": round(self.diff_ns), "steps": self.steps, "of_steps": self.of_steps,
                "steps_base": self.steps_base, "of_steps_base": self.of_steps_base, "part": self.part,
                "part_diff_ns": round(self.part_diff_ns), "path_classes_diff_ns": {k: round(v) for k, v in self.classes.items()}}


def why_no_path(results: dict[str, Result]) -> str:
    """"" when the run has a critical path with what-ifs, else why not (in the straggler verdict's words)."""
    from rankscope.analysis.diagnosis.bound import savings

    cp = results.get("critical_path")
    if cp is None:
        return "the critical path did not run"
    if cp.skipped:
        return f"no critical path ({cp.skipped})"
    if savings(results) is None:
        return "no critical path what-if: no two ranks run the same calls to compare"
    return ""


def _per_rank(results: dict[str, Result]) -> pl.DataFrame:
    """Per rank: median saving (ns), steps it bounds, steps."""
    cp = results["critical_path"]
    wi = frame(cp.tables["what_if"]).filter(pl.col("step_if_median_ns").is_not_null())
    st = frame(cp.tables["steps"])
    won = st.filter(pl.col("bounding_rank").is_not_null()).group_by("bounding_rank").agg(bounds=pl.len()) \
        .rename({"bounding_rank": "rank"}).with_columns(pl.col("rank").cast(pl.Int64))
    per = wi.group_by("rank").agg(saving=pl.col("saving_ns").median().cast(pl.Float64)).with_columns(
        pl.col("rank").cast(pl.Int64), of_steps=pl.lit(st.height, dtype=pl.Int64))
    return per.join(won, on="rank", how="left").with_columns(pl.col("bounds").fill_null(0).cast(pl.Int64))


def path_deltas(results: dict[str, Result], base_results: dict[str, Result], factor: float) -> pl.DataFrame:
    """Per rank: saving / savingBase (x factor) / savingDiff (ns), bounds / boundsBase (steps), of_steps."""
    a, b = _per_rank(results), _per_rank(base_results)
    j = a.join(b, on="rank", how="full", coalesce=True, suffix="Base").with_columns(
        pl.col("saving", "savingBase").fill_null(0.0), pl.col("bounds", "boundsBase").fill_null(0))
    j = j.with_columns(savingBase=pl.col("savingBase") * factor).with_columns(
        savingDiff=pl.col("saving") - pl.col("savingBase"))
    return j.select("rank", "saving", "savingBase", "savingDiff", "bounds", "of_steps", "boundsBase",
                    "of_stepsBase").sort("rank")


def _classes(results: dict[str, Result], rank: int) -> dict[str, float]:
    from rankscope.analysis.diagnosis.bound import path_classes

    cp = results["critical_path"]
    steps = frame(cp.tables["steps"])["step"].to_list()
    return path_classes(frame(cp.tables["segments"]), rank, [int(s) for s in steps])


def path_segment_deltas(results: dict[str, Result], base_results: dict[str, Result], factor: float,
                        ranks: list[int]) -> pl.DataFrame:
    """Per (rank, class): the rank's own time on the path per step (median over every step), ns."""
    rows = []
    for r in ranks:
        a, b = _classes(results, r), _classes(base_results, r)
        for c in CLASSES:
            x, y = a.get(c, 0.0), factor * b.get(c, 0.0)
            rows.append({"rank": r, "part": c, "on_path": x, "on_pathBase": y, "on_pathDiff": x - y})
    return pl.DataFrame(rows, schema={"rank": pl.Int64, "part": pl.Utf8, "on_path": pl.Float64,
                                      "on_pathBase": pl.Float64, "on_pathDiff": pl.Float64})


def cause(path: pl.DataFrame, segs: pl.DataFrame, wall_diff_ns: float, step_ns: float) -> tuple[PathCause | None, str]:
    """The rank named from the path (module rule 3), or (None, why none)."""
    if path.height == 0:
        return None, "no rank on the critical path"
    row = path.sort(pl.col("savingDiff").abs(), descending=True).row(0, named=True)
    d = abs(float(row["savingDiff"]))
    sign = 1.0 if float(row["savingDiff"]) >= 0 else -1.0
    bar = max(SHARE_OF_CHANGE * abs(wall_diff_ns), SHARE_OF_STEP * step_ns)
    if d < bar:
        return None, (f"no rank's what-if saving on the critical path changed by {bar / 1e6:.1f} ms (a quarter of "
                      f"the step-time change): the change is shared by the ranks (largest: rank {row['rank']}, "
                      f"{float(row['savingDiff']) / 1e6:+.1f} ms)")
    rank = int(row["rank"])
    mine = segs.filter(pl.col("rank") == rank)
    classes = {str(p): float(v) for p, v in zip(mine["part"], mine["on_pathDiff"])}
    part = max(classes, key=lambda k: classes[k] * sign, default="")
    grew = part and classes[part] * sign > 0
    return PathCause(rank=rank, saving_ns=float(row["saving"]), saving_base_ns=float(row["savingBase"]),
                     steps=int(row["bounds"]), of_steps=int(row["of_steps"] or 0), steps_base=int(row["boundsBase"]),
                     of_steps_base=int(row["of_stepsBase"] or 0), part=part if grew else "",
                     part_diff_ns=classes[part] if grew else 0.0, classes=classes), ""
