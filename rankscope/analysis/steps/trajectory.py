"""MindInsight-style iteration trajectory: iteration gap, forward+backward, iteration tail.

Pattern: per rank and step, iteration gap = step start (the previous step's end) → first compute
work; forward+backward = first → last compute work; iteration tail = last compute work → step end
(where gradient communication and the optimizer's tail show). Computed inside ``breakdown`` from
the same interval sets (no second read of events); this analysis selects and summarises them.
"""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.base import Analysis, Result
from rankscope.analysis.view import NS, Col, TableView, View
from rankscope.model.run import Run

COLUMNS = ["rank", "step", "wall", "iteration_gap", "fwd_bwd", "iteration_tail", "complete"]


def run_trajectory(run: Run, results: dict[str, Any]) -> Result:
    """Registered analysis ``trajectory`` (after ``breakdown``)."""
    bd = pl.from_arrow(results["breakdown"].tables["breakdown"])
    assert isinstance(bd, pl.DataFrame)
    t = bd.select(COLUMNS)
    med = (t.filter(pl.col("complete")).group_by("rank")
           .agg(pl.col(c).median() for c in ("wall", "iteration_gap", "fwd_bwd", "iteration_tail")).sort("rank"))
    return Result("trajectory", tables={"trajectory": t.to_arrow(), "per_rank": med.to_arrow()})


ANALYSIS = Analysis(
    name="trajectory",
    description="iteration gap, forward+backward and iteration tail per step",
    run=run_trajectory,
    after=("breakdown",),
    view=View("Iteration trajectory", tables=(
        TableView("per_rank", "per rank, median over steps (ms)", (
            Col("rank", "rank", "count"), Col("wall", "step time", NS), Col("iteration_gap", "gap before compute", NS),
            Col("fwd_bwd", "forward + backward", NS), Col("iteration_tail", "tail after compute", NS))),), place="trajectory"),
)
