"""The workloads' injected work (rankscope.demo.workloads.common.size_extra) is sized by the extra part's CPU time,
not its wall time. Measured (bench/workloads.py seed 2702, tp_fsdp at 4 ranks on 2 cores, sized by wall time):
loops meant as 20.1 and 22.8 ms ran 12.4 and 9.2 ms of CPU in the recorded steps, because a tuning step that
preempted the loop doubled its wall time. The steps here are fakes that report what a preempted loop reports
(wall time twice its CPU time): the arithmetic of the sizing is what is tested, not this machine's speed."""
from __future__ import annotations

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
