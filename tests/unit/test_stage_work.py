"""A pipeline stage named with "contention" on a loaded host although the stage model found it heavy in thread CPU
time (bench/workloads.py seed 3601, bench/RESULTS.md): ``stage_verdict.stage_work_done`` keeps its cause its work."""
from __future__ import annotations

import pytest

from rankscope.analysis.base import Result
from rankscope.analysis.diagnosis.stage_verdict import stage_work_done


def _results(cost_ms: float, measure: str = "thread CPU time") -> dict[str, Result]:
    return {"pipeline": Result("pipeline", summary={"cost_ns": cost_ms * 1e6, "cost_share": 0.1, "of_steps": 6,
                                                     "work_measure": measure, "bottleneck_stage": 0,
                                                     "stage_ranks": [[0, 1], [2, 3]], "balanced": False})}


@pytest.mark.parametrize("cpu_ms, cost_ms, measure, done", [
    (46.2, 41.7, "thread CPU time", True),  # pp-gpipe at 2 ranks: its CPU time covers the cost
    (59.7, 68.7, "thread CPU time", True),  # ppdp-1f1b at 4 ranks: covers more than half of it
    (30.0, 68.7, "thread CPU time", False),  # under half: the host's share may be the larger
    (59.7, 68.7, "own wall time", False),  # a wall-time model holds the waits for a CPU: no reading from it
    (59.7, 0.0, "thread CPU time", False),  # the stage model said no cost (the host's CPU floor)
    (None, 41.7, "thread CPU time", False),  # no scheduler samples: nothing to read
])
def test_a_stage_whose_extra_cpu_time_holds_its_cost_is_slow_by_its_work(cpu_ms, cost_ms, measure, done):
    cpu = None if cpu_ms is None else cpu_ms * 1e6
    assert stage_work_done(_results(cost_ms, measure), cpu) is done
