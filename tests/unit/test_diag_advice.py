"""Advice rules on hand-made breakdown numbers: each fires above its threshold, none on a healthy run."""
from __future__ import annotations

import polars as pl

from rankscope.analysis.diagnosis.advice import breakdown_rules, memory_rule, small_messages


def _bd(**per_rank: dict[str, float]) -> pl.DataFrame:
    rows = []
    for rank, parts in per_rank.items():
        for step in range(4):
            wall = 100.0
            comp = parts.get("computing", 90.0)
            row = {"rank": int(rank[1:]), "step": step, "wall": wall, "computing": comp,
                   "communication": parts.get("communication", 8.0), "overlapped": parts.get("overlapped", 7.0),
                   "comm_exposed": parts.get("comm_exposed", 1.0), "data_wait": parts.get("data_wait", 2.0),
                   "complete": True}
            row["free"] = wall - comp - row["comm_exposed"] - row["data_wait"]
            rows.append(row)
    return pl.DataFrame(rows)


def test_healthy_run_gets_no_advice():
    assert breakdown_rules(_bd(r0={}, r1={}, r2={})) == []


def test_each_rule_fires_with_evidence():
    bd = _bd(r0={"computing": 60.0, "data_wait": 12.0, "comm_exposed": 20.0, "communication": 22.0,
                 "overlapped": 2.0}, r1={"computing": 80.0}, r2={})
    kinds = {f.kind: f for f in breakdown_rules(bd)}
    assert set(kinds) == {"advice.data_loading", "advice.exposed_comm", "advice.dp_imbalance",
                          "advice.missing_overlap", "advice.host_bound"}
    assert kinds["advice.host_bound"].ranks == (1,)  # 17 % of its step outside compute, comm and data
    assert kinds["advice.data_loading"].ranks == (0,) and kinds["advice.data_loading"].evidence["share"]["0"] == 0.12
    assert kinds["advice.dp_imbalance"].ranks == (2,)


def test_host_bound_gaps():
    kinds = [f.kind for f in breakdown_rules(_bd(r0={"computing": 70.0}, r1={"computing": 70.0}))]
    assert kinds == ["advice.host_bound"]


def test_small_messages_and_memory():
    inst = pl.DataFrame({"bytes": [4096] * 90 + [1 << 24] * 10})
    f = small_messages(inst, n_steps=3)
    assert f is not None and f.evidence["share"] == 0.9 and f.evidence["per_step"] == 30.0
    assert small_messages(inst, n_steps=10) is None  # 9 per step: not enough to matter
    peaks = [{"rank": 0, "peak_allocated": 95}, {"rank": 1, "peak_allocated": 50}]
    m = memory_rule(peaks, {0: 100, 1: 100})
    assert m is not None and m.ranks == (0,)
    assert memory_rule(peaks, {}) is None


def _steps(per_rank: dict[int, list[float]], wall: float = 45.0) -> pl.DataFrame:
    rows = [{"rank": r, "step": i, "wall": wall, "computing": c, "communication": 8.0, "overlapped": 7.0,
             "comm_exposed": 1.0, "data_wait": 0.0, "free": wall - c - 1.0, "complete": True}
            for r, comps in per_rank.items() for i, c in enumerate(comps)]
    return pl.DataFrame(rows)


def test_a_compute_imbalance_must_hold_by_the_mean_too():
    """bench/workloads.py seed 2791 run 63 (a healthy 4-rank LM on 2 CPUs), shaped: rank 1's median step computes
    1.2x the others' while its mean is the others'. A run-queue burst in a few steps of the others swings their
    medians; the rule said "Balance the work"."""
    swing = _steps({0: [22.0] * 5 + [32.0] * 3, 1: [27.0] * 8, 2: [22.0] * 5 + [32.0] * 3, 3: [22.0] * 5 + [32.0] * 3})
    assert "advice.dp_imbalance" not in {f.kind for f in breakdown_rules(swing)}
    steady = _steps({0: [22.0] * 8, 1: [27.0] * 8, 2: [22.0] * 8, 3: [22.0] * 8})
    f = {f.kind: f for f in breakdown_rules(steady)}["advice.dp_imbalance"]
    assert f.ranks == (1,) and f.evidence["ratio"] == f.evidence["mean_ratio"] == round(27 / 22, 3)


def test_a_compute_imbalance_below_two_percent_of_the_step_is_not_advice():
    """Seed 2791 run 38 (a healthy decode job): 2.2 ms of compute in a 203 ms step, one rank 1.17x: 0.3 ms."""
    tiny = _steps({0: [2.5] * 8, 1: [2.15] * 8, 2: [2.2] * 8, 3: [2.1] * 8}, wall=203.0)
    assert "advice.dp_imbalance" not in {f.kind for f in breakdown_rules(tiny)}
    assert "advice.dp_imbalance" in {f.kind for f in breakdown_rules(_steps({0: [25.0] * 8, 1: [21.5] * 8,
                                                                            2: [22.0] * 8, 3: [21.0] * 8}))}


MS = 1e6
Table = dict[int, tuple[float, ...]]


def _measured(comp: Table, cpu: Table, runq: Table, cpu1: float = 0.0, runq1: float | None = None
              ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A run's breakdown (compute read on the host thread) and scheduler samples from its per-step numbers (ms,
    ranks 0-3 per step); ``cpu1`` added to rank 1's CPU time, ``runq1`` its run-queue wait in every step."""
    bd = pl.DataFrame([{"rank": r, "step": s, "wall": 50 * MS, "computing": comp[s][r] * MS, "communication": 0.0,
                        "overlapped": 0.0, "comm_exposed": 0.0, "data_wait": 0.0, "free": 0.0, "complete": True,
                        "source": "host"} for s in comp for r in range(4)])
    sched = pl.DataFrame([{"rank": r, "step": s, "cpu_ns": int((cpu[s][r] + (cpu1 if r == 1 else 0)) * MS),
                           "runq_wait_ns": int((runq[s][r] if r != 1 or runq1 is None else runq1) * MS)}
                          for s in comp for r in range(4)])
    return bd, sched


def test_a_compute_imbalance_that_was_waiting_for_a_cpu_is_information():
    """bench/workloads.py seed 2791 run 15: a healthy 4-rank LM on 2 CPUs, no straggler, and "rank 1 computes 1.30x
    the other ranks' median per step. Balance the work". Its training thread's CPU time per step was the others'
    (+0.04 ms by the mean); its extra compute time (+4.8 ms) was run-queue wait (+4.4 ms). Per step and rank 0-3,
    ms, from its trace and rankscope.profile's /proc/thread-self/schedstat samples. The same compute with the CPU
    time rank 1 would need for it (its wait at the others') stays a warning."""
    from rankscope.analysis.base import Severity
    from rankscope.analysis.diagnosis.advice import host_waited

    comp = {2: (33.2, 32.6, 23.3, 21.0), 3: (19.1, 16.9, 15.8, 18.3), 4: (45.8, 35.3, 36.6, 25.1),
            5: (22.5, 36.0, 34.1, 26.3), 6: (23.4, 35.5, 34.5, 25.4), 7: (16.0, 37.5, 16.1, 18.8),
            8: (36.5, 23.2, 30.3, 25.4), 9: (31.3, 34.6, 22.8, 24.7)}
    cpu = {2: (18.9, 17.5, 15.7, 16.7), 3: (18.1, 18.4, 16.9, 18.0), 4: (22.3, 17.5, 23.1, 18.6),
           5: (15.8, 19.2, 17.0, 20.1), 6: (14.5, 17.5, 19.6, 18.9), 7: (16.5, 16.3, 15.0, 18.7),
           8: (19.1, 18.7, 15.0, 16.4), 9: (17.0, 17.4, 16.9, 16.7)}
    runq = {2: (18.5, 17.3, 10.2, 6.5), 3: (2.8, 19.1, 0.7, 2.2), 4: (30.0, 23.8, 17.8, 8.3),
            5: (8.5, 18.7, 19.0, 8.4), 6: (20.1, 22.7, 26.7, 10.2), 7: (1.1, 23.1, 18.5, 6.6),
            8: (19.1, 7.7, 18.2, 10.7), 9: (16.1, 19.0, 15.5, 21.7)}
    bd, sched = _measured(comp, cpu, runq)
    f = {f.kind: f for f in breakdown_rules(bd)}["advice.dp_imbalance"]
    assert f.ranks == (1,) and f.severity == Severity.WARNING
    got = host_waited(sched, bd, f)
    assert got.severity == Severity.INFO and got.evidence["host_contended"] is True
    assert got.evidence["compute_wait"]["share_of_excess"] > 0.5
    # the extra compute on its own CPU time: 4.8 ms more CPU per step, its wait the others' median
    bd, sched = _measured(comp, cpu, runq, 4.8, 17.8)
    assert host_waited(sched, bd, f) == f
    # compute read from a device's kernels: the host thread's run queue says nothing of it
    bd, sched = _measured(comp, cpu, runq)
    assert host_waited(sched, bd.with_columns(source=pl.lit("device")), f) == f


def test_with_one_intra_op_thread_extra_compute_without_cpu_time_is_not_work():
    """bench/workloads.py seed 2791 run 69 (a healthy 4-rank LM on 2 CPUs): "rank 1 computes 1.14x the other ranks'
    median per step. Balance the work". Its extra compute (+5.6 ms per step by the mean) was +0.7 ms of CPU time,
    +0.8 ms of run-queue wait and +4.1 ms blocked: not contention (the run-queue share is small), and not work when
    torch runs one intra-op thread (an operator's work is then its calling thread's CPU time). With more threads,
    or where the count is unknown (traces from before the field), the warning stays."""
    from rankscope.analysis.base import Severity
    from rankscope.analysis.diagnosis.advice import host_waited

    comp = {2: (31.6, 27.9, 28.9, 27.7), 3: (18.0, 32.5, 24.5, 18.7), 4: (23.4, 41.2, 35.7, 33.7),
            5: (29.0, 31.5, 29.1, 14.6), 6: (22.2, 32.1, 22.2, 17.8), 7: (22.0, 30.8, 25.4, 34.2),
            8: (18.4, 20.1, 33.8, 29.8), 9: (25.5, 33.0, 31.3, 28.1)}
    cpu = {2: (17.2, 19.7, 18.9, 14.8), 3: (16.3, 18.0, 16.1, 17.8), 4: (17.4, 17.6, 19.0, 17.4),
           5: (17.0, 16.9, 15.0, 16.1), 6: (17.2, 15.5, 19.1, 19.5), 7: (17.6, 19.7, 16.9, 19.7),
           8: (16.0, 15.9, 18.5, 15.1), 9: (18.8, 19.7, 15.8, 16.8)}
    runq = {2: (27.4, 15.7, 11.9, 32.6), 3: (19.4, 17.7, 10.4, 5.8), 4: (10.7, 25.2, 20.9, 47.1),
            5: (17.9, 18.1, 25.0, 14.9), 6: (11.7, 18.3, 9.7, 0.2), 7: (8.3, 12.8, 10.4, 16.4),
            8: (4.1, 8.4, 17.1, 24.7), 9: (18.5, 14.9, 19.5, 13.2)}
    bd, sched = _measured(comp, cpu, runq)
    f = {f.kind: f for f in breakdown_rules(bd)}["advice.dp_imbalance"]
    assert f.ranks == (1,) and f.severity == Severity.WARNING
    assert host_waited(sched, bd, f) == f  # the thread count unknown
    got = host_waited(sched, bd, f, one_thread=True)
    assert got.severity == Severity.INFO and got.evidence["not_work"] is True
    w = got.evidence["compute_wait"]
    assert w["share_of_excess"] < 0.5  # not contention
    assert w["cpu_excess_ns"] < got.evidence["cpu_bar_ns"] < w["own_excess_ns"]  # a tenth of the others' compute
    # the same compute with its CPU time: 4.8 ms more per step is work, one thread or not
    bd, more = _measured(comp, cpu, runq, 4.8)
    assert host_waited(more, bd, f, one_thread=True) == f


def test_one_intra_op_thread_only_where_every_window_says_so():
    from types import SimpleNamespace

    from rankscope.analysis.diagnosis.cpu import one_intra_op_thread

    def run(*threads):
        return SimpleNamespace(ranks={r: SimpleNamespace(meta={"windows": [{"sched": {"intra_op_threads": t}}]})
                                      for r, t in enumerate(threads)})
    assert one_intra_op_thread(run(1, 1))
    assert not one_intra_op_thread(run(1, 4)) and not one_intra_op_thread(run(1, None))
    assert not one_intra_op_thread(SimpleNamespace(ranks={0: SimpleNamespace(meta={})}))
