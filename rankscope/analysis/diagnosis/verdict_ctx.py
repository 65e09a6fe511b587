"""What the straggler verdict's rules and cause read, once per analysis (``Ctx``), and whether a candidate stands on
counts rather than timings (``counted``). Split out of ``straggler`` with ``path_choice`` and ``stage_verdict``."""
from __future__ import annotations

import functools
from typing import Callable

import polars as pl

from rankscope.analysis.base import Result
from rankscope.analysis.diagnosis.candidates import agreeing, last_share, more_input, more_work, steady_candidates
from rankscope.analysis.diagnosis.cpu import sched_frame
from rankscope.analysis.diagnosis.rules import complete_steps, cpu_available_outliers, outliers, paired, with_sched
from rankscope.analysis.diagnosis.work import Work, imbalance, work_peers
from rankscope.model.run import Run


class Ctx:
    """What the rules and the cause read, once per analysis."""

    def __init__(self, run: Run, results: dict[str, Result], bd: pl.DataFrame, pr: pl.DataFrame,
                 excluded: list[int] | tuple[int, ...] = ()) -> None:
        self.run, self.results, self.bd, self.pr, self.excluded = run, results, bd, pr, excluded
        self.sched = sched_frame(run)
        self.steps = with_sched(bd, self.sched)
        self.own_steps = complete_steps(self.steps).select("rank", "step", "own")
        ranks = pr["rank"].to_list()
        # the ranks a rank's work and waits are compared with (a pipeline stage's: its replicas)
        self.peers: Callable[[int], list[int]] = functools.cache(lambda rank: work_peers(results, ranks, rank))
        self.work_of: Callable[[int], Work | None] = functools.cache(lambda rank: imbalance(run, rank, self.peers(rank)))
        self.last_of: Callable[[int], float] = functools.cache(lambda rank: last_share(run, results, rank))
        self._rules: list[tuple[int, float, str, float]] | None = None
        self.host_contended: int | None = None  # the path's bounding rank, not named: it waited for a CPU

    def steady(self, cands: list[tuple[int, float, str]]) -> list[tuple[int, float, str, float]]:
        return steady_candidates(cands, self.steps, self.pr, self.last_of)

    def cpu(self) -> dict[int, float]:
        """Each rank's training-thread CPU time, median per complete step ({} without scheduler samples)."""
        from rankscope.analysis.diagnosis.cpu import cpu_run

        if "cpu" not in self.steps.columns or not cpu_run(self.run):  # the thread's CPU time is not the rank's work
            return {}
        med = complete_steps(self.steps).group_by("rank").agg(pl.col("cpu").median()).drop_nulls()
        return {int(r): float(v) for r, v in med.iter_rows()}

    def rule_candidates(self) -> list[tuple[int, float, str, float]]:
        """The statistical rules' candidates, first family that speaks (see ``rules`` and ``candidates``); computed
        once per analysis (``path_choice.choose`` and ``path_choice.rescued`` both read them)."""
        if self._rules is None:
            self._rules = self._first_rules()
        return list(self._rules)

    def _first_rules(self) -> list[tuple[int, float, str, float]]:
        pr = self.pr
        # each timing family must be steady on its own: a ratio on own time that one preempted step makes
        # unsteady no longer hides the CPU-available ratio (measured: the 2-rank demo's host straggler beside
        # two busy loops, rank 1 +46 % own time but slower in 4 of 6 steps, +68 % CPU-available in 6 of 6)
        return (self.steady(outliers(pr["own"].to_numpy().astype(float)))
                or self.steady(cpu_available_outliers(self.steps, pr)) or self.steady(paired(self.steps, pr, self.sched))
                or self.steady(more_work(pr, self.work_of)) or self.steady(more_input(pr, self.work_of, self.last_of, self.cpu()))
                or self.steady(agreeing(self.run, self.results, self.bd, pr)))


def counted(ctx: Ctx, rank: int, test: str) -> bool:
    """Whether a candidate stands on counts (more operator calls, more input elements: no timing noise)."""
    from rankscope.analysis.diagnosis.work import IMBALANCE_WORK

    work = ctx.work_of(rank)
    return test in ("more calls", "input work") or bool(
        work and work.get("shapes_recorded") and work.get("work_ratio", 1.0) - 1 >= IMBALANCE_WORK)
