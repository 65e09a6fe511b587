"""The workloads' injected work (rankscope.demo.workloads.common.size_extra) is sized by the extra part's CPU time,
not its wall time. Measured (bench/workloads.py seed 2702, tp_fsdp at 4 ranks on 2 cores, sized by wall time):
loops meant as 20.1 and 22.8 ms ran 12.4 and 9.2 ms of CPU in the recorded steps, because a tuning step that
preempted the loop doubled its wall time. The steps here are fakes that report what a preempted loop reports
(wall time twice its CPU time): the arithmetic of the sizing is what is tested, not this machine's speed."""
from __future__ import annotations

import pytest

from rankscope.demo.workloads.common import Timers, size_extra


def _job(cpu_per_unit_ms: float, wall_per_cpu: float) -> tuple[dict[str, int], object]:
    state = {"units": 0}

    def step(i: int, t: Timers) -> None:
        cpu = state["units"] * cpu_per_unit_ms
        t.add("extra", cpu * wall_per_cpu)  # what a loop preempted half the time shows as wall time
        t.add("extra_cpu", cpu)

    return state, step


def test_the_injected_work_is_sized_by_its_cpu_time_when_preemption_doubles_its_wall_time():
    state, step = _job(cpu_per_unit_ms=0.05, wall_per_cpu=2.0)
    units = size_extra(step, 3, True, lambda: None, lambda n: state.update(units=n), target_ms=25.0)
    assert state["units"] == units == 500  # 25 ms of CPU at 0.05 ms per unit (by wall time: 250, 12.5 ms of CPU)


def test_a_job_that_times_no_cpu_is_sized_by_wall_time_and_the_other_ranks_get_none():
    state = {"units": 0}

    def step(i: int, t: Timers) -> None:
        t.add("extra", state["units"] * 0.1)

    assert size_extra(step, 2, True, lambda: None, lambda n: state.update(units=n), target_ms=20.0) == 200
    other = {"units": 7}
    assert size_extra(step, 2, False, lambda: None, lambda n: other.update(units=n), target_ms=20.0) == 0
    assert other["units"] == 0


def _rows(**per_rank: dict[str, float]) -> dict[int, list[dict[str, float | int | bool]]]:
    return {int(r.removeprefix("r")): [{"step": 1, "captured": True, **parts}] for r, parts in per_rank.items()}


def test_a_compute_stragglers_extra_time_is_its_forward_and_backward_cpu_over_the_others_not_its_forward_timer():
    """FSDP2's compute straggler times its extra matmuls in the forward ("extra"); their backward runs inside
    ``loss.backward()``. Measured (bench/workloads.py seed 2751, 2 ranks): "extra" 9.3 ms against 15.1 ms of
    forward + backward CPU time over the other rank's; the truth is the latter."""
    from rankscope.demo.workloads.common import summarize

    timers = _rows(r0={"work_cpu": 31.7, "extra": 0.0, "step_ms": 68.4},
                   r1={"work_cpu": 47.9, "extra": 9.3, "extra_cpu": 8.6, "step_ms": 68.4},
                   r2={"work_cpu": 33.1, "extra": 0.0, "step_ms": 68.4})
    out = summarize(timers, "compute", 1)
    assert out["extra_from"] == "work_cpu" and out["extra_ms_per_step"] == pytest.approx(47.9 - (31.7 + 33.1) / 2)
    # a data straggler's extra time is its own injected work, as timed (the others' data loading is not its)
    data = summarize(timers, "data", 1)
    assert data["extra_from"] == "extra" and data["extra_ms_per_step"] == 9.3
