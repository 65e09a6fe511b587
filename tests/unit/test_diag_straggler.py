"""Straggler rule, cause and time lost on hand-made traces (real files through load_run)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from rankscope.analysis.registry import run_all
import numpy as np

from rankscope.analysis.diagnosis.rules import consistency, outliers
from rankscope.analysis.stats import signed_rank_p
from rankscope.model.run import load_run
from tests.helpers import write_trace, x

STEP_US = 20_000


def make(root: Path, slow: dict[int, float], dims: dict[int, int] | None = None, world: int = 3,
         steps: int = 6, data: dict[int, float] | None = None, calls: dict[int, int] | None = None) -> Path:
    """Gloo-like traces: per step a data load, 4 mm ops (``calls``: other counts per rank), one all-reduce
    that ends on every rank together."""
    dims, data, calls = dims or {}, data or {}, calls or {}
    worst = max(calls.get(r, 4) * 2000 * slow.get(r, 1.0) + 1000 * data.get(r, 1.0) for r in range(world))
    for r in range(world):
        ev = []
        for s in range(steps):
            t0 = 1000.0 + s * STEP_US
            load = 1000 * data.get(r, 1.0)
            ev.append(x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, load, cat="user_annotation"))
            t = t0 + load
            for _ in range(calls.get(r, 4)):
                d, dur = dims.get(r, 256), 2000 * slow.get(r, 1.0)
                ev.append(x("aten::mm", t, dur, **{"Input Dims": [[32, d], [d, 512]]}))
                t += dur
            end = t0 + worst + 500
            ev.append(x("gloo:all_reduce", t, end - t, cat="user_annotation", **{"Input Dims": [[1000]]}))
            ev.append(x(f"ProfilerStep#{s + 1}", t0, STEP_US - 1, cat="user_annotation"))
        write_trace(root / f"rank{r}.json", ev, rank=r, world=world)
    return root


def _diagnose(path: Path) -> dict:
    return run_all(load_run(path, jobs=1), names=["breakdown", "clock", "links", "critical_path", "straggler"])


def test_compute_straggler_named_with_cause_and_time_lost(tmp_path):
    """Rank 2's 4 mm take 3 ms each against 2 ms: it reaches the all-reduce 4 ms after the others in every
    step, so on the critical path across ranks its mm then the all-reduce bound 6 of 6 steps, and at the other
    ranks' speed the 20.0 ms step would take 16.0 ms (issue 25: the verdict says the chain and the what-if)."""
    res = _diagnose(make(tmp_path, {2: 1.5}))["straggler"]
    assert res.summary["verdict"] == ("rank 2 is slow: compute (same operators and input sizes, slower), own time "
                                      "+26% vs the other ranks' median, costs 4.0 ms per step (20%); critical path: "
                                      "rank 2's aten::mm [32, 256] then all_reduce #3 of group 0 bounds 6 of 6 steps; "
                                      "at the other ranks' median the step would take 16.0 ms instead of 20.0 ms")
    f = res.findings[0]
    assert f.evidence["cause"] == "compute" and f.evidence["test"] == "dixon" and f.confidence == 1.0
    assert f.evidence["excess_ns"]["compute"] == 4_000_000
    assert f.evidence["time_lost"]["lost_per_step_ns"] == 4_000_000  # 4 mm × 1 ms slower
    assert f.evidence["time_lost"]["last_arrival_share"] == 1.0
    assert set(pl.from_arrow(res.tables["per_rank"]).columns) >= {"rank", "wall", "own", "computing",
                                                                  "comm_exposed", "data_wait", "free"}


def test_extra_operator_calls_name_a_straggler_timings_alone_cannot(tmp_path):
    """Two ranks, 6 steps: rank 1 runs 5 mm per step where rank 0 runs 4 (+2 ms, own time +11 %): under
    the +25 % ratio rule, too few steps for the signed-rank test, but the count of calls is not noise.
    The same +2 ms from 4 slower mm ops is left to the timing rules: no straggler named, but (issue 25) the
    critical path shows rank 1 bounding 6 of 6 steps by 2.0 ms (4 mm x 0.5 ms, 10 % of the 20 ms step), a
    steady cost said beside "no straggler" (was a bare "no straggler")."""
    more = _diagnose(make(tmp_path / "more", {}, world=2, calls={1: 5}))["straggler"]
    assert more.summary["verdict"] == ("rank 1 is slow: compute (more calls: aten::mm 5 vs 4 per step), own time +11% "
                                       "vs the other ranks' median, costs 2.0 ms per step (10%); critical path: rank 1's "
                                       "aten::mm [32, 256] then all_reduce #3 of group 0 bounds 6 of 6 steps; at the "
                                       "other ranks' median the step would take 18.0 ms instead of 20.0 ms")
    assert more.findings[0].evidence["test"] == "more calls"
    slower = _diagnose(make(tmp_path / "slower", {1: 1.25}, world=2))["straggler"]
    assert slower.findings == []
    assert slower.summary["verdict"].startswith("no straggler (rank 1 bounds 6 of 6 steps on the critical path (")
    assert "by 2.0 ms per step (10.0%): below the bar for a verdict" in slower.summary["verdict"]


def test_healthy_run_has_no_straggler(tmp_path):
    res = _diagnose(make(tmp_path, {}))["straggler"]
    assert res.summary["verdict"] == "no straggler" and res.findings == []


def test_larger_shapes_are_imbalance(tmp_path):
    res = _diagnose(make(tmp_path, {2: 1.5}, dims={2: 384}))["straggler"]
    # 4 mm per step on [32, 384] x [384, 512] vs [32, 256] x [256, 512]: 208,896 vs 139,264 input elements
    assert res.summary["verdict"].startswith("rank 2 is slow: input imbalance, +50% input work per step "
                                             "(aten::mm inputs [32, 384] vs [32, 256]), own time +")
    work = res.findings[0].evidence["work"]
    assert work["unseen_shape_time_share"] == 1.0 and work["work_ratio"] == 1.5
    assert work["input_elements_per_step"] == 4 * (32 * 384 + 384 * 512)


def test_data_straggler(tmp_path):
    res = _diagnose(make(tmp_path, {}, data={1: 4.0}))["straggler"]
    assert res.summary["verdict"].startswith("rank 1 is slow: data")


def test_rule_needs_consistency_over_steps():
    bd = pl.DataFrame({"rank": [0, 1] * 5, "step": [s for s in range(5) for _ in (0, 1)],
                       "wall": [10.0] * 10, "comm_exposed": [0.0, 2.0, 0.0, 2.0, 2.0, 0.0, 2.0, 0.0, 2.0, 0.0]})
    assert consistency(bd, 0) == 0.4 and consistency(bd, 1) == 0.6
    assert outliers([10.0, 10.5]) == [] and [i for i, *_ in outliers([10.0, 13.0])] == [1]


def test_per_step_table_names_the_slowest_rank(tmp_path):
    res = _diagnose(make(tmp_path, {1: 1.5}))["straggler"]
    steps = pl.from_arrow(res.tables["per_step"])
    assert steps.height == 6 and set(steps["slowest"].to_list()) == {1}
    assert all(abs(x - 4.0 / 15.5) < 1e-3 for x in steps["rel_excess"].to_list())  # own 19.5 vs 15.5 ms


def _with_sched(root: Path, runq_ms: dict[int, float], steps: int = 6, world: int = 3) -> Path:
    """Move make()'s traces into a run directory whose meta.json carries per-step scheduler samples
    (the ``sched`` block rankscope.profile writes: CPU time and run-queue wait of the training thread)."""
    import json

    for r in range(world):
        d = root / "ranks" / str(r)
        d.mkdir(parents=True)
        (root / f"rank{r}.json").rename(d / "window-0000.pt.trace.json")
        wait = int(runq_ms.get(r, 0.2) * 1e6)
        sched = {"source": "schedstat", "step": list(range(1, steps + 1)), "cpu_ns": [12_000_000] * steps,
                 "runq_wait_ns": [wait] * steps}
        (d / "meta.json").write_text(json.dumps({"rank": r, "world_size": world, "windows": [
            {"index": 0, "steps": list(range(1, steps + 1)), "file": "window-0000.pt.trace.json", "sched": sched}]}))
    return root


def test_rank_that_waited_for_a_cpu_is_contention_not_compute(tmp_path):
    # rank 2's operators take 4 ms longer per step, and its thread waited 3.5 ms more per step on the
    # run queue: the host, not the code, slowed it down
    res = _diagnose(_with_sched(make(tmp_path, {2: 1.5}), {2: 3.7}))["straggler"]
    assert res.summary["verdict"].startswith("rank 2 is slow: contention, own time +")
    wait = res.findings[0].evidence["cpu_wait"]
    assert wait["excess_ns"] == 3_500_000 and wait["share_of_excess"] == 0.875 and wait["steps"] == 6


def test_small_cpu_wait_keeps_the_code_level_cause(tmp_path):
    res = _diagnose(_with_sched(make(tmp_path, {2: 1.5}), {2: 1.2}))["straggler"]
    assert res.summary["verdict"].startswith("rank 2 is slow: compute")
    assert res.findings[0].evidence["cpu_wait"]["share_of_excess"] == 0.25


def test_sched_sampler_reads_this_threads_cpu_time_and_wait():
    import time

    from rankscope.collect.sched import SchedSampler

    s = SchedSampler()
    t0 = time.thread_time_ns()
    a = s.sample()
    # spin until this thread has had 50 ms of CPU (not 50 ms of wall time: a loaded host gives less); a hang bound
    deadline = time.monotonic() + 120
    while time.thread_time_ns() - t0 < 50_000_000 and time.monotonic() < deadline:
        pass
    b = s.sample()
    ref = time.thread_time_ns() - t0  # the kernel's count of this thread's CPU time, around both samples
    cpu, wait = s.delta(a, b)
    assert ref >= 50_000_000 and 0.9 * ref - 5_000_000 < cpu <= ref + 1_000_000, (cpu, ref)
    assert (wait is None) == (s.source != "schedstat")
    assert wait is None or wait >= 0


def test_cpu_wait_above_a_tenth_of_the_step_is_advice(tmp_path):
    res = run_all(load_run(_with_sched(make(tmp_path, {}), {1: 3.0}), jobs=1))["advice"]
    hit = [f for f in res.findings if f.kind == "advice.cpu_contention"]
    assert len(hit) == 1 and hit[0].ranks == (1,)  # 3 ms of a 20 ms step: 15 %; others 0.2 ms (1 %)
    assert hit[0].evidence["share"] == {"1": 0.15}


def _pair(excess: list[float]) -> pl.DataFrame:
    """Two ranks, one row per step: rank 0 owns 10 ms per step, rank 1 10 ms × (1 + excess[step])."""
    n = len(excess)
    return pl.DataFrame({"rank": [0] * n + [1] * n, "step": list(range(n)) * 2,
                         "wall": [10.0] * n + [10.0 * (1 + e) for e in excess], "comm_exposed": [0.0] * (2 * n),
                         "data_wait": [0.0] * (2 * n), "computing": [0.0] * (2 * n), "free": [0.0] * (2 * n),
                         "complete": [True] * (2 * n)})


def test_signed_rank_p_values():
    # exact one-sided values (hand-counted: 2**n equally likely sign patterns)
    assert signed_rank_p(np.array([0.1] * 6)) == 1 / 64
    assert signed_rank_p(np.array([0.3, 0.2, 0.1, -0.05])) == 2 / 16  # W+ = 9 of 10: {all +, all but 1 +}
    assert signed_rank_p(np.array([-0.1, -0.2])) == 1.0 and signed_rank_p(np.array([])) == 1.0
    assert signed_rank_p(np.array([0.1, -0.1, 0.2, -0.2, 0.3, -0.3])) > 0.3  # balanced: no evidence


def test_paired_rule_two_ranks():
    from rankscope.analysis.diagnosis.rules import paired, per_rank

    steady = _pair([0.12, 0.15, 0.11, 0.13, 0.2, 0.12, 0.14, 0.16, 0.1, 0.13])  # +10-20 % in every step
    assert [(i, t) for i, _, t in paired(steady, per_rank(steady))] == [(1, "signed-rank")]
    mixed = _pair([0.12, 0.15, -0.05, 0.13, 0.2, -0.02, 0.14, 0.16, 0.1, 0.13])  # 8 of 10 steps: p = 0.005
    assert paired(mixed, per_rank(mixed)) == []
    eight = _pair([0.12, 0.15, 0.11, 0.13, 0.2, 0.12, 0.14, 0.16])  # 8 of 8: p = 1/256, too few steps
    assert paired(eight, per_rank(eight)) == []
    small = _pair([0.06] * 10)  # every step, but below the 8 % floor
    assert paired(small, per_rank(small)) == []
    assert outliers(per_rank(steady)["own"].to_numpy()) == []  # the +25 % ratio rule alone misses it


def test_cause_is_the_component_that_grew_most_against_its_usual_size():
    from rankscope.analysis.diagnosis.cause import cause

    others = pl.DataFrame({"computing": [21.5], "data_wait": [0.35], "free": [0.76]})
    # measured on a host-busy straggler (ms/step): +5.5 ms idle host time and, induced by the peer's
    # communication threads, +6.6 ms compute; idle grew 8x, compute 30 %: the cause is host
    assert cause({"computing": 28.1, "data_wait": 1.4, "free": 6.25}, others)[0] == "host"
    # compute alone carries the extra time: compute, whatever the small components do
    assert cause({"computing": 30.0, "data_wait": 0.7, "free": 1.0}, others)[0] == "compute"
    # a small component that carries a third of the extra time and grew 4x beats +7 % compute
    kind, excess = cause({"computing": 23.0, "data_wait": 1.35, "free": 0.76}, others)
    assert kind == "data" and round(excess["data"], 2) == 1.0
    # ... but under 30 % of the extra time it cannot, however much it grew
    assert cause({"computing": 24.0, "data_wait": 1.2, "free": 0.76}, others)[0] == "compute"
    # no component grew (a rank found on own time minus CPU wait): no cause is drawn from the least shrink
    assert cause({"computing": 21.0, "data_wait": 0.35, "free": 0.70}, others)[0] == "unclear"
    assert cause({"computing": 21.5, "data_wait": 0.3500007, "free": 0.76}, others)[0] == "unclear"


def _ranks(own: dict[int, list[float]], free: dict[int, list[float]] | None = None) -> pl.DataFrame:
    """One row per rank and step: own time ``own[r][step]`` (ms, no communication wait), of which
    ``free[r][step]`` is idle host time and the rest compute."""
    rows = []
    for r, vals in own.items():
        for s, v in enumerate(vals):
            f = (free or {}).get(r, [0.5] * len(vals))[s]
            rows.append({"rank": r, "step": s, "wall": v, "comm_exposed": 0.0, "data_wait": 0.0,
                         "computing": v - f, "free": f, "complete": True})
    return pl.DataFrame(rows)


def test_paired_rule_four_ranks_where_dixon_cannot_tell():
    from rankscope.analysis.diagnosis.rules import paired, per_rank

    rng = np.random.default_rng(3)
    base = {r: list(10 + rng.normal(0, 0.6, 12)) for r in range(4)}
    base[3] = [v * 1.15 for v in base[3]]  # +15 % in every step, within the others' spread per step
    bd = _ranks(base)
    pr = per_rank(bd)
    assert outliers(pr["own"].to_numpy()) == []  # Dixon's Q on 4 medians does not reach its critical value
    assert [(int(pr["rank"][i]), t) for i, _, t in paired(bd, pr)] == [(3, "signed-rank")]
    healthy = _ranks({r: list(10 + rng.normal(0, 0.6, 12)) for r in range(4)})
    assert paired(healthy, per_rank(healthy)) == []


def test_paired_rule_finds_a_component_the_total_hides():
    from rankscope.analysis.diagnosis.rules import paired, per_rank

    # rank 2: 2 ms more idle host time in every step (Python busy-work), but its total own time is
    # as noisy as everyone's (4 ranks sharing 2 cores); the "free" column shows it step after step
    own = {0: [10, 13, 9, 12, 10, 14, 9, 11, 13, 10, 12, 9], 1: [12, 9, 13, 10, 11, 9, 14, 10, 9, 12, 10, 13],
           2: [13, 10, 12, 14, 9, 12, 11, 13, 12, 9, 14, 12], 3: [9, 12, 10, 9, 13, 10, 12, 9, 11, 13, 9, 11]}
    free = {r: [0.5] * 12 for r in own}
    free[2] = [2.5] * 12
    bd = _ranks({r: [float(v) for v in vs] for r, vs in own.items()}, free)
    pr = per_rank(bd)
    found = paired(bd, pr)
    assert [(int(pr["rank"][i]), t) for i, _, t in found] == [(2, "signed-rank (host)")]
    free[2] = [0.5] * 12
    assert paired(_ranks({r: [float(v) for v in vs] for r, vs in own.items()}, free), pr) == []


def _wait_split(per_rank: dict[int, tuple[float, float]], rank: int, steps: int) -> dict:
    """``wait_excess`` of ``rank`` over ``steps`` alike steps: per rank (CPU ms, run-queue wait ms) per step,
    own time = CPU time + wait."""
    from rankscope.analysis.diagnosis.cpu import wait_excess

    rows = [(r, s, int(c * 1e6), int(w * 1e6)) for r, (c, w) in per_rank.items() for s in range(steps)]
    sched = pl.DataFrame(rows, schema={"rank": pl.Int64, "step": pl.Int64, "cpu_ns": pl.Int64,
                                       "runq_wait_ns": pl.Int64}, orient="row")
    own = sched.select("rank", "step", own=pl.col("cpu_ns") + pl.col("runq_wait_ns"))
    w = wait_excess(sched, rank, own)
    assert w is not None
    return w


def test_cpu_wait_that_comes_with_its_own_extra_work_is_not_contention():
    """Ranks sharing cores wait for a CPU in proportion to the CPU they use. Numbers of a real 4-rank
    run on 2 cores (bench/stragglers.py seed 109, run 1: 11.7 ms of host busy-work per step on rank 3):
    rank 3 used 5.2 ms more CPU per step and waited 6.1 ms more, the others waited 0.96 ms per CPU ms.
    Only the wait beyond 0.96 x 5.2 ms is the host's doing; the same wait excess with no extra CPU
    time is contention."""
    from rankscope.analysis.diagnosis.cpu import CONTENTION_SHARE

    def split(cpu3: float, wait3: float) -> dict:
        return _wait_split({0: (27.1, 25.5), 1: (26.3, 25.1), 2: (26.0, 25.2), 3: (cpu3, wait3)}, 3, steps=8)

    busy = split(31.5, 31.3)
    assert busy["others_wait_per_cpu"] == pytest.approx(25.2 / 26.3, abs=1e-3)
    assert busy["excess_ns"] == 6_100_000 and busy["share_of_excess"] < 0.15 < CONTENTION_SHARE
    assert busy["expected_from_cpu_ns"] == pytest.approx(5_200_000 * 25.2 / 26.3, rel=1e-3)
    hogged = split(26.3, 31.3)  # same wait excess, no extra CPU time: the host took the CPU
    assert hogged["unexplained_ns"] == hogged["excess_ns"] == 6_100_000
    assert hogged["share_of_excess"] >= CONTENTION_SHARE


def test_cpu_wait_beside_its_own_extra_work_is_that_work_not_contention():
    """The run-queue share alone is not enough. When the others wait little per CPU second (blocked in
    collectives most of the step) and the rank queues behind another job in bursts, its wait is mostly
    "unexplained", yet its own CPU time grew by its extra work: the cause is that work (the demo's host
    straggler, 20 ms of thread CPU time per step, beside another pytest worker: a24facb run 7). A healthy
    rank whose CPU time moved by noise stays contention, and so does a rank with no CPU samples."""
    from rankscope.analysis.diagnosis.cpu import CONTENTION_SHARE, is_contention

    def split(cpu1: float, wait1: float) -> dict:
        return _wait_split({0: (27.0, 2.0), 1: (cpu1, wait1), 2: (27.2, 2.1)}, 1, steps=6)

    worked = split(47.0, 32.0)  # +20 ms CPU, +30 ms wait
    assert worked["share_of_excess"] >= CONTENTION_SHARE  # the share alone would say contention
    assert worked["cpu_excess_ns"] == 19_900_000 and worked["others_cpu_ns"] == 27_100_000
    assert not is_contention(worked)
    noisy = split(28.0, 12.0)  # +0.9 ms CPU (3 % of the others'), +9.95 ms wait
    assert noisy["share_of_excess"] >= CONTENTION_SHARE and is_contention(noisy)
    small = split(29.5, 5.05)  # +2.4 ms CPU is over a quarter of the +5.35 ms excess, but 9 % of 27.1 ms
    assert small["cpu_excess_ns"] >= 0.25 * small["own_excess_ns"]
    assert small["share_of_excess"] >= CONTENTION_SHARE and is_contention(small)
    assert not is_contention({**worked, "share_of_excess": CONTENTION_SHARE - 0.01})
    assert is_contention({**worked, "cpu_excess_ns": None})


def test_bursty_cpu_wait_is_split_by_means():
    """A contended rank waits in bursts: 12 ms in two of six steps, nothing in the others. Own time is
    CPU time + run-queue wait step by step, so the mean split puts all of the extra time on the run
    queue; a median of per-step differences would have said 0 %."""
    from rankscope.analysis.diagnosis.cpu import wait_excess

    burst = [0, 0, 0, 0, 12_000_000, 12_000_000]
    rows = [(r, s, 12_000_000, burst[s] if r == 1 else 0) for r in (0, 1, 2) for s in range(6)]
    sched = pl.DataFrame(rows, schema={"rank": pl.Int64, "step": pl.Int64, "cpu_ns": pl.Int64,
                                       "runq_wait_ns": pl.Int64}, orient="row")
    own = sched.select("rank", "step", own=pl.col("cpu_ns") + pl.col("runq_wait_ns") + 500_000)
    w = wait_excess(sched, 1, own)
    assert w is not None and w["excess_ns"] == 4_000_000 and w["own_excess_ns"] == 4_000_000
    assert w["share_of_excess"] == 1.0 and w["cpu_excess_ns"] == 0
    assert wait_excess(sched, 0, own)["share_of_excess"] == 0.0  # rank 0 has no excess at all
    assert wait_excess(sched.filter(pl.col("rank") == 1), 1, own) is None  # nobody to compare with


def test_paired_rule_finds_blocked_time_under_cpu_noise():
    """Rank 1 sleeps 1.5 ms per step (a sleep in its gradient hook, inside "compute"): its own time,
    CPU time and compute are as noisy as everyone's (4 ranks on 2 cores), but own time minus CPU time
    minus run-queue wait ("blocked") is ~0 on every healthy rank and +1.5 ms on rank 1, step after
    step. Without scheduler samples nothing can see it; with them, only the blocked test does (16
    steps: at 4 ranks and 5 parts the test's level is 0.0002, below what 12 steps can reach)."""
    from rankscope.analysis.diagnosis.rules import paired, per_rank

    rng = np.random.default_rng(11)
    cpu = {r: list(10 + rng.normal(0, 1.5, 16)) for r in range(4)}
    runq = {r: list(np.abs(rng.normal(0, 0.8, 16))) for r in range(4)}
    own = {r: [c + q + (1.5 if r == 1 else 0.0) + rng.normal(0, 0.05) for c, q in zip(cpu[r], runq[r])]
           for r in range(4)}
    bd = _ranks(own)
    pr = per_rank(bd)
    assert paired(bd, pr) == []
    sched = pl.DataFrame([(r, s, int(cpu[r][s] * 1e6), int(runq[r][s] * 1e6)) for r in range(4) for s in range(16)],
                         schema={"rank": pl.Int64, "step": pl.Int64, "cpu_ns": pl.Int64, "runq_wait_ns": pl.Int64},
                         orient="row")
    bd_ns = bd.with_columns(pl.col(c) * 1e6 for c in ("wall", "computing", "free"))
    found = paired(bd_ns, per_rank(bd_ns), sched)
    pr_ns = per_rank(bd_ns)
    assert [(int(pr_ns["rank"][i]), t) for i, _, t in found] == [(1, "signed-rank (blocked)")]
    calm = {r: [c + q + rng.normal(0, 0.05) for c, q in zip(cpu[r], runq[r])] for r in range(4)}
    bd_calm = _ranks(calm).with_columns(pl.col(c) * 1e6 for c in ("wall", "computing", "free"))
    assert paired(bd_calm, per_rank(bd_calm), sched) == []


def test_blocked_time_sits_in_the_component_that_can_hold_it():
    from rankscope.analysis.diagnosis.cause import cause

    # measured at 4 ranks on 2 cores (ms/step): a 9 ms sleep in rank 2's gradient hook (inside
    # compute) came with +4.5 ms data loading under contention; data grew more against its usual size
    others = pl.DataFrame({"computing": [36.2], "data_wait": [5.4], "free": [0.5]})
    row = {"computing": 44.9, "data_wait": 9.9, "free": 0.6}
    assert cause(row, others)[0] == "data"
    # the thread was blocked (not running, not waiting for a CPU) 9.3 ms more per step: only compute
    # grew enough to hold that
    assert cause(row, others, blocked_excess=9.3)[0] == "compute"
    # a sleep in the data loader: data holds it
    assert cause({"computing": 38.0, "data_wait": 14.0, "free": 0.5}, others, blocked_excess=8.0)[0] == "data"
    # little blocked time (CPU work): the usual rule
    assert cause(row, others, blocked_excess=0.4)[0] == "data"
    # a 4.8 ms sleep per batch in rank 0's data loader (bench/stragglers.py seed 131, run 2, medians per
    # step): 6.0 ms more blocked time, data +3.6 ms, host +1.9 ms on a smaller usual size. No component
    # grew by 70 % of the blocked time; it is one interval, so the one that grew most holds it
    others = pl.DataFrame({"computing": [42.0, 44.2, 48.3], "data_wait": [8.2, 6.4, 7.2], "free": [1.5, 1.7, 2.0]})
    row = {"computing": 43.6, "data_wait": 10.8, "free": 3.6}
    assert cause(row, others)[0] == "host"
    assert cause(row, others, blocked_excess=6.0)[0] == "data"


def test_extra_operator_calls_make_compute_the_cause():
    from rankscope.analysis.diagnosis.cause import cause

    # medians per step (ms) of a real 4-rank run on 2 cores, CPUs rotated (bench/stragglers.py seed 127,
    # run 17): 6 extra matmul blocks on rank 3; its data loading, run beside its CPU partner's compute
    # once it fell out of step, grew more against its usual size than compute did
    others = pl.DataFrame({"computing": [43.6, 39.8, 40.5], "data_wait": [5.6, 5.6, 5.1], "free": [2.6, 3.4, 1.5]})
    row = {"computing": 51.0, "data_wait": 10.4, "free": 1.5}
    assert cause(row, others)[0] == "data"
    # aten::mm 13 vs 7 calls per step, 12.0 ms per step in the extra calls: counts, not noise
    assert cause(row, others, extra_calls_ns=12.0)[0] == "compute"
    # a little extra work (0.5 ms of 15 ms) does not override the timings
    assert cause(row, others, extra_calls_ns=0.5)[0] == "data"
    # nor does it make compute a candidate when compute did not grow
    assert cause({"computing": 40.5, "data_wait": 14.0, "free": 1.5}, others, extra_calls_ns=9.0)[0] == "data"


def test_extra_calls_that_hold_half_the_compute_growth_make_compute_the_cause():
    from rankscope.analysis.diagnosis.cause import cause

    # medians per step (ms) of a real 2-rank 1F1B pipeline, stage 1 with 2x the layers (bench/workloads.py seed
    # 2651, pp-1f1b@2): compute +27.3 ms and host +23.4 ms; the extra aten::mm calls (592 vs 288 per step) take
    # 14.6 ms, under CAUSE_SHARE of the +50.7 ms but over half the compute growth
    others = pl.DataFrame({"computing": [60.0], "data_wait": [0.0], "free": [10.0]})
    row = {"computing": 87.3, "data_wait": 0.0, "free": 33.4}
    assert cause(row, others)[0] == "host"
    assert cause(row, others, extra_calls_ns=14.6)[0] == "compute"
    assert cause(row, others, extra_calls_ns=10.0)[0] == "host"  # under half the compute growth: the timings decide


def test_host_time_that_grew_with_the_extra_calls_is_their_dispatch():
    from rankscope.analysis.diagnosis.cause import cause

    # medians per step (ms) of a real 4-rank 1F1B pipeline, stage 0 with 2x the layers (bench/workloads.py seed
    # 2651, pp-1f1b@4, rank 0): compute +44.2 ms, host between operators 49.0 ms against a usual 24.5 ms; aten::mm
    # 576 vs 288 calls per step, the extra calls' own time 12.4 ms. Host doubled with the calls: their dispatch.
    others = pl.DataFrame({"computing": [68.3, 59.6, 66.1], "data_wait": [0.0, 0.0, 0.0], "free": [24.5, 23.2, 38.0]})
    row = {"computing": 110.3, "data_wait": 0.0, "free": 49.0}
    assert cause(row, others, extra_calls_ns=12.4)[0] == "host"  # grew most against its usual size
    assert cause(row, others, extra_calls_ns=12.4, calls_ratio=2.0)[0] == "compute"
    assert cause(row, others, extra_calls_ns=12.4, calls_ratio=1.2)[0] == "host"  # 20 % more calls cannot hold +100 %
    # a Python loop between operators calls nothing more: host, whatever compute did beside it
    assert cause({"computing": 80.0, "data_wait": 0.0, "free": 49.0}, others)[0] == "host"


def test_work_note_tells_more_work_from_the_same_work_slower():
    from rankscope.analysis.diagnosis.work import Work, work_note

    # measured on demo runs (bench/RESULTS.md, stragglers): an injected compute straggler calls
    # aten::mm 13 times per step where the others call it 7 times; +6.8 ms of its +7.6 ms compute
    more = Work(unseen_shape_time_share=0.0, same_call_count_ops=42, example="",
                more_calls=[{"name": "aten::mm", "calls_per_step": 13.0, "others_calls_per_step": 7.0,
                             "extra_ns_per_step": 6_816_558}])
    assert work_note(more, 7_558_535) == " (more calls: aten::mm 13 vs 7 per step)"
    # extra calls that explain little of the excess say nothing
    assert work_note(more, 40_000_000) == ""
    # a healthy rank on a slower vCPU: the same 52 operators, same shapes, no extra calls
    same = Work(unseen_shape_time_share=0.0, same_call_count_ops=52, example="", more_calls=[])
    assert work_note(same, 4_542_490) == " (same operators and input sizes, slower)"
    # 5 % more input work: neither the same work nor enough to call it an imbalance
    assert work_note(Work(unseen_shape_time_share=0.1, same_call_count_ops=52, example="[[8, 4]]", work_ratio=1.05,
                          more_calls=[]), 4_542_490) == ""
    # no shapes recorded: says what it cannot tell
    assert "cannot tell more work from slower work" in work_note(Work(shapes_recorded=False, more_calls=[]), 1.0)


def test_outlier_rules_also_look_at_cpu_available_time():
    """Measured beside a CPU hog (2-rank demo, rank 1 with 20 ms of host busy-work per step): both ranks
    waited ~20 ms per step for a CPU, so rank 1's own time was only +23 % (under the +25 % ratio
    rule, 6 steps: too few for the step-by-step tests), while own time minus run-queue wait was
    +45 %. The ratio rule on that names rank 1; on a healthy pair it names nobody."""
    from rankscope.analysis.diagnosis.rules import cpu_available_outliers, per_rank, with_sched

    steps = 6
    own = {0: [47.0] * steps, 1: [57.8] * steps}
    wait = {0: 21.5, 1: 21.4}
    bd = _ranks(own).with_columns(pl.col(c) * 1e6 for c in ("wall", "computing", "free"))
    sched = pl.DataFrame([(r, s, int((own[r][s] - wait[r]) * 1e6), int(wait[r] * 1e6)) for r in (0, 1)
                          for s in range(steps)],
                         schema={"rank": pl.Int64, "step": pl.Int64, "cpu_ns": pl.Int64, "runq_wait_ns": pl.Int64},
                         orient="row")
    pr = per_rank(bd)
    assert outliers(pr["own"].to_numpy()) == []
    found = cpu_available_outliers(with_sched(bd, sched), pr)
    assert [(i, t) for i, _, t in found] == [(1, "ratio (cpu-available)")] and abs(found[0][1] - (36.4 / 25.5 - 1)) < 1e-6
    assert cpu_available_outliers(with_sched(bd, None), pr) == []  # no scheduler samples: nothing to say
    calm = _ranks({0: [47.0] * steps, 1: [49.0] * steps}).with_columns(
        pl.col(c) * 1e6 for c in ("wall", "computing", "free"))
    assert cpu_available_outliers(with_sched(calm, sched.with_columns(runq_wait_ns=pl.lit(1_000_000))),
                                  per_rank(calm)) == []


def test_cpu_available_time_is_never_below_the_cpu_time_the_thread_had():
    """The run-queue wait is the whole step's: a thread woken by gloo waits for a CPU inside what the trace
    books as communication wait, so own time minus that wait can fall near zero. Measured (tests/e2e/test_demo.py's
    healthy run beside the other pytest worker, 8 steps): rank 0 own 33.4 ms, CPU 17.3 ms, run-queue wait 31.9 ms;
    rank 1 own 27.7 ms, CPU 17.0 ms, wait 11.2 ms. Own minus wait, 1.5 against 16.5 ms, named rank 1 at +1078 %;
    floored at the CPU time, 17.3 against 17.0 ms, nobody."""
    from rankscope.analysis.diagnosis.rules import cpu_available_outliers, per_rank, with_sched

    steps = 8
    own, cpu, wait = {0: 33.4, 1: 27.7}, {0: 17.3, 1: 17.0}, {0: 31.9, 1: 11.2}
    bd = _ranks({r: [own[r]] * steps for r in own}).with_columns(pl.col(c) * 1e6 for c in ("wall", "computing", "free"))
    sched = pl.DataFrame([(r, s, int(cpu[r] * 1e6), int(wait[r] * 1e6)) for r in own for s in range(steps)],
                         schema={"rank": pl.Int64, "step": pl.Int64, "cpu_ns": pl.Int64, "runq_wait_ns": pl.Int64},
                         orient="row")
    steps_frame = with_sched(bd, sched)
    assert steps_frame.filter(pl.col("rank") == 0)["cpu_available"].to_list() == [17.3e6] * steps
    assert steps_frame.filter(pl.col("rank") == 1)["cpu_available"].to_list() == [17.0e6] * steps  # 16.5 < 17.0
    assert cpu_available_outliers(steps_frame, per_rank(bd)) == []


def test_title_says_when_the_excess_excludes_cpu_wait(tmp_path):
    """A rank found on own time minus run-queue wait: the title must not call that excess "step time"."""
    from rankscope.analysis.diagnosis.straggler import _finding

    f = _finding(1, "host", 0.46, {}, 0.9, measure="own time excluding CPU wait")
    assert f.title == "rank 1 is slow: host (idle between operators), own time excluding CPU wait +46% vs the other ranks' median"


@pytest.mark.parametrize("test,measure,lost,note,title", [
    ("dixon", "own time", 0, "",
     "rank 1 is slow: compute, own time +30% vs the other ranks' median"),
    ("ratio (cpu-available)", "own time excluding CPU wait", 3_000_000, " (same operators and input sizes, slower)",
     "rank 1 is slow: compute (same operators and input sizes, slower), own time excluding CPU wait +30% vs the "
     "other ranks' median, costs 3.0 ms per step (15%)"),
    ("signed-rank", "own time", 3_000_000, ", +35% input work per step (aten::bmm inputs [8, 130] vs [8, 84])",
     "rank 1 is slow: input imbalance, +35% input work per step (aten::bmm inputs [8, 130] vs [8, 84]), own time "
     "+30% vs the other ranks' median, costs 3.0 ms per step (15%)"),
    (None, "in every slow group (transfers up to 3.0x the other groups' median)", 3_000_000, "",
     "rank 1 is slow: communication, in every slow group (transfers up to 3.0x the other groups' median), "
     "costs 3.0 ms per step (15%)"),
])
def test_headline_every_variant(test, measure, lost, note, title):
    """The headline is the product: each variant ``_finding`` prints (measure own time / own time excluding
    CPU wait / a slow group's transfers; with and without the cost; with a cause's note), exactly, and
    ``tests.helpers.straggler_note`` (used by the end-to-end tests on real runs, where the variant depends on
    the machine's load) accepts each one from the finding's fields."""
    from rankscope.analysis.diagnosis.straggler import _finding
    from tests.helpers import straggler_note

    kind = "comm" if test is None else "imbalance" if "input work" in note else "compute"
    ev: dict = {"relative_excess": 0.3, "time_lost": {"lost_per_step_ns": lost, "lost_share_of_step": 0.15}}
    ev.update({"test": test} if test else {"transfer_ratio": 3.0})
    f = _finding(1, kind, 0.3, ev, 0.9, note, measure)
    assert f.title == title
    assert straggler_note(f) == note


def test_evidence_below_the_bar_is_said_beside_no_straggler(tmp_path):
    """Issue 12: rank 2 arrived last at every collective and had the longest own time in every step, but
    its excess (+9 % own time at 4 ranks) is under the outlier bar and under the twin spread (healthy 4-rank
    runs showed +8 to +11 %, bench/workloads.py runs 9-10): nothing is named, but the verdict says what was
    seen, never a bare "no straggler"; a +1 % steady difference and a healthy run stay "no straggler".
    Issue 25: what the critical path shows comes first: rank 2's 4 mm take 2.4 ms against 2 ms, so it bounds 8 of
    8 steps by 1.6 ms (8 % of the 20 ms step), under bound.BAR's 20 %; the +1 % run's 0.24 ms (1.2 %) is said too."""
    res = _diagnose(make(tmp_path / "a", {2: 1.2}, world=4, steps=8))["straggler"]
    assert res.findings == []
    v = res.summary["verdict"]
    assert v.startswith("no straggler (rank 2 bounds 8 of 8 steps on the critical path (") and (
        "by 1.6 ms per step (8.0%): below the bar for a verdict; rank 2 arrived last at 8 of 8 collectives, its own "
        "time +8.9%" in v) and (
        "the longest in 8 of 8 steps; not named: with no other evidence, a difference under 20% is within" in v), v
    from rankscope.render.views import overview

    run = load_run(tmp_path / "a", jobs=1)
    html = overview(run, run_all(run, names=["breakdown", "clock", "links", "critical_path", "straggler"]))
    assert '<p class="verdict note">no straggler (rank 2 bounds 8 of 8 steps' in html  # not the green of a clean run
    small = _diagnose(make(tmp_path / "b", {2: 1.03}, world=4, steps=8))["straggler"]
    assert small.findings == [] and small.summary["verdict"].startswith("no straggler (rank 2 bounds 8 of 8 steps")
    assert "by 0.2 ms per step (1.2%): below the bar" in small.summary["verdict"]  # 4 mm x 60 us
    assert _diagnose(make(tmp_path / "c", {}, world=4, steps=8))["straggler"].summary["verdict"] == "no straggler"
    # too few collectives to beat chance (2 ranks: last at 3 of 3 has p = 0.125); the critical path's
    # "bounds 3 of 3 steps" is as likely by chance, so its 1.6 ms is not said either (bound.STEADY_P)
    few = _diagnose(make(tmp_path / "d", {1: 1.2}, world=2, steps=3))["straggler"]
    assert few.summary["verdict"] == "no straggler"


def test_binomial_tail():
    from rankscope.analysis.diagnosis.likely import binom_tail

    assert abs(binom_tail(13, 16, 0.25) - 3.783e-06) < 1e-9  # exact: sum of C(16,i) .25^i .75^(16-i), i=13..16
    assert binom_tail(0, 5, 0.5) == 1.0 and abs(binom_tail(5, 5, 0.5) - 1 / 32) < 1e-12
    assert binom_tail(2000, 5000, 1 / 64) == 0.0  # no overflow at thousands of instances


def test_verdict_says_what_the_data_cannot_show(tmp_path):
    """Issue 12: a run without scheduler samples (trace_handler) can never be called contention, and one
    without shapes cannot tell more work from slower work: the summary says both instead of staying silent."""
    res = _diagnose(make(tmp_path / "a", {}))["straggler"]
    assert len(res.summary["limits"]) == 1 and res.summary["limits"][0].startswith("contention")
    root = make(tmp_path / "b", {})
    for f in root.glob("rank*.json"):  # the same traces without "Input Dims"
        f.write_text(f.read_text().replace('"Input Dims"', '"Other"'))
    limits = _diagnose(root)["straggler"].summary["limits"]
    assert [x.split(" ")[0] for x in limits] == ["contention", "input"]
    sched = _diagnose(_with_sched(make(tmp_path / "c", {}), {}))["straggler"]
    assert not any(x.startswith("contention") for x in sched.summary["limits"])


def test_more_input_work_explaining_the_extra_compute_is_imbalance_even_when_idle_grew_more(tmp_path):
    """Rank 2 runs its matmuls on 1.5x larger inputs (compute +4 ms per step) and also waits 1.8 ms more
    for data (usual 1 ms): data grew most against its usual size, but the extra compute is what the extra
    input work predicts, and it is the larger part: input imbalance. With the same inputs (slower
    compute only), the cause stays what the timings say."""
    res = _diagnose(make(tmp_path / "a", {2: 1.5}, dims={2: 384}, data={2: 2.8}))["straggler"]
    assert res.findings[0].evidence["cause"] == "imbalance", res.summary["verdict"]
    same = _diagnose(make(tmp_path / "b", {2: 1.5}, data={2: 2.8}))["straggler"]
    assert same.findings[0].evidence["cause"] != "imbalance", same.summary["verdict"]


def test_input_work_candidate_is_steady_when_the_others_wait_for_it(tmp_path):
    """bench/workloads.py run 7 (4 ranks on 2 cores): ranks with 1.29-1.57x the input elements had own time
    +5 to +16 % but exceeded the others' per-step median in only half the steps (per-step own times swing
    with whoever shares the CPU), while they arrived last at 5-7 of 8 collectives: named "no straggler".
    The input-work rule takes the arrivals as its steadiness, and its own-time bar drops to +5 % when
    the others wait for the rank; without that arrival evidence +5 % stays below the bar."""
    from rankscope.analysis.diagnosis.candidates import last_share, more_input

    root = make(tmp_path / "a", {2: 1.2}, world=4, steps=8)
    res = _diagnose(root)
    run = load_run(root, jobs=1)
    assert last_share(run, res, 2) == 1.0 and last_share(run, res, 0) == 0.0
    pr = pl.DataFrame({"rank": [0, 1, 2, 3], "own": [44.7, 41.3, 45.1, 47.0]})
    work = lambda r: {"shapes_recorded": True, "work_ratio": 1.35 if r == 3 else 1.0}  # noqa: E731
    assert more_input(pr, work) == []  # +5 %: under PAIR_MIN
    found = more_input(pr, work, lambda r: 0.75 if r == 3 else 0.0)
    assert [(i, t) for i, _, t in found] == [(3, "input work")] and abs(found[0][1] - (47.0 / 44.7 - 1)) < 1e-9
    assert more_input(pr, work, lambda r: 0.25 if r == 3 else 0.0) == []  # others did not wait for it
    healthy = lambda r: {"shapes_recorded": True, "work_ratio": 1.04}  # noqa: E731
    assert more_input(pr, healthy, lambda r: 1.0) == []  # no extra input work: never this rule


def test_two_ranks_need_more_than_the_twin_spread_and_say_what_they_saw(tmp_path):
    """Issue 12 (bench/twin_noise.py): two ranks doing identical work differed by up to +14 % own time in 8 of
    8 steps (healthy profiled 2-rank jobs), and at 2 ranks the arrival order is the same evidence as own time.
    Below TWIN_SPREAD nothing is named, but the verdict says what was seen; above it the rank is named.
    Issue 25: the critical path's cost comes first (4 mm at 2.4 ms against 2 ms: rank 1 bounds 8 of 8 steps by
    1.6 ms, 8 % of the 20 ms step, under bound.BAR's 20 %)."""
    from rankscope.analysis.diagnosis.likely import TWIN_SPREAD

    below = _diagnose(make(tmp_path / "a", {1: 1.2}, world=2, steps=8))["straggler"]
    assert below.findings == []
    v = below.summary["verdict"]
    assert v.startswith("no straggler (rank 1 bounds 8 of 8 steps on the critical path (") and (
        "by 1.6 ms per step (8.0%): below the bar for a verdict; rank 1's own time was +" in v), v
    assert "longer in 8 of 8 steps; not named" in v, v
    assert below.summary["below_bar"] and f"under {TWIN_SPREAD:.0%}" in v
    above = _diagnose(make(tmp_path / "b", {1: 1.6}, world=2, steps=8))["straggler"]
    assert [f.ranks for f in above.findings] == [(1,)] and above.summary["below_bar"] == ""
    healthy = _diagnose(make(tmp_path / "c", {}, world=2, steps=8))["straggler"]
    assert healthy.summary["verdict"] == "no straggler"


def test_arrival_order_names_a_rank_only_above_the_twin_spread(tmp_path):
    """Issue 12 (bench/workloads.py run 9): a healthy 4-rank decode run had a rank +11 % own time, last at 6
    of 8 collectives, slowest in 8 of 8 steps, and the verdict was "rank 2 is slow: data loading". With the
    other ranks spread too widely for Dixon's test, arrival order and steady own time name a rank only from
    TWIN_SPREAD (identical work differs by up to +14 % in every step); below it "no straggler" says what it saw."""
    from rankscope.analysis.diagnosis.likely import TWIN_SPREAD

    spread = {0: 0.8, 1: 1.0, 3: 1.15}
    below = _diagnose(make(tmp_path / "a", {**spread, 2: 1.35}, world=4, steps=8))["straggler"]
    assert below.findings == []  # +17 %: was "rank 2 is slow: compute" with the 10 % bar
    # issue 25: the critical path first: rank 2's mm take 2.7 ms, the next slowest rank 3's 2.3 ms, so at the
    # others' median (2 ms) the step would be set by rank 3: 4 x 0.4 ms = 1.6 ms saved (8 %), under bound.BAR
    v = below.summary["verdict"]
    assert v.startswith("no straggler (rank 2 bounds 8 of 8 steps on the critical path (") and (
        "by 1.6 ms per step (8.0%): below the bar for a verdict; rank 2 arrived last at 8 of 8 collectives, its own "
        "time +16.8% vs the other ranks' median" in v), v
    above = _diagnose(make(tmp_path / "b", {**spread, 2: 1.6}, world=4, steps=8))["straggler"]
    f = above.findings[0]
    assert f.ranks == (2,) and f.evidence["test"] == "arrival order + steps" and f.evidence["cause"] == "compute"
    assert f.evidence["relative_excess"] >= TWIN_SPREAD


def test_more_input_work_that_cost_no_time_is_said_beside_no_straggler(tmp_path):
    """Issue 12 (bench/workloads.py run 9, 4 ranks on 2 cores): a rank with 1.28x the input work had own time
    -1 % vs the others (they queued for the shared CPUs as long): nothing to name as slow, but the verdict says
    which rank has more input work, by how much, with shapes; equal work says nothing.
    Issue 25: "cost no time" only where the critical path shows it. Here the larger inputs cost nothing (the
    hand-made mm take 2 ms whatever their shapes): no rank's what-if shortens the path. With its mm 3 % slower
    (2.06 ms) the same rank bounds 8 of 8 steps by 4 x 60 us = 0.24 ms: that cost is said, not "no time"
    (was "its own time is +3 % ... cost no time")."""
    res = _diagnose(make(tmp_path / "a", {}, dims={2: 384}, world=4, steps=8))["straggler"]
    assert res.findings == []
    v = res.summary["verdict"]
    assert v.startswith("no straggler (rank 2 has +50% input work per step (aten::mm inputs [32, 384] vs [32, 256]), "
                        "but the critical path shows it did not bound the steps (no rank bounds them; rank 2's "
                        "what-if saving 0.0 ms per step)"), v
    assert v.endswith("an input imbalance that cost no time in these steps)") and res.summary["below_bar"]
    cost = _diagnose(make(tmp_path / "c", {2: 1.03}, dims={2: 384}, world=4, steps=8))["straggler"]
    v = cost.summary["verdict"]
    assert cost.findings == [] and "cost no time" not in v, v
    assert v.startswith("no straggler (rank 2 bounds 8 of 8 steps on the critical path (") and (
        "by 0.2 ms per step (1.2%): below the bar for a verdict; rank 2 has +50% input work per step" in v), v
    same = _diagnose(make(tmp_path / "b", {2: 1.03}, world=4, steps=8))["straggler"]
    assert same.findings == [] and "input work" not in same.summary["verdict"]  # its 0.24 ms is said, no imbalance


def test_extra_calls_of_a_frequent_operator_are_not_input_work(tmp_path):
    """bench/stragglers.py seed 157: the demo's extra matmul blocks (a "compute" straggler, more calls) added
    14 aten::as_strided calls on [512, 512] to 287 per step; within the old 5 % "same count" tolerance their
    inputs read as "+12 % input work" and the cause as "input imbalance". Operators count as called as often
    only to rounding (or 1 % of hundreds), so extra calls are more calls, never more input work; and an example
    shape is one the other ranks do not use."""
    from rankscope.analysis.diagnosis.work import imbalance

    for r in range(3):
        ev, t = [], 1000.0
        for s in range(4):
            t0 = t
            for _ in range(100):
                ev.append(x("aten::as_strided", t, 5, **{"Input Dims": [[64], [], [], []]}))
                t += 10
            for _ in range(4 if r == 2 else 0):  # the extra block: views of a large weight, and a matmul
                ev.append(x("aten::as_strided", t, 5, **{"Input Dims": [[512, 512], [], [], []]}))
                ev.append(x("aten::mm", t + 10, 500, **{"Input Dims": [[32, 512], [512, 512]]}))
                t += 600
            for d in (256, 512):  # two layers of one model, on every rank
                ev.append(x("aten::linear", t, 300, **{"Input Dims": [[32, d], [d, d], [d]]}))
                t += 400
            ev.append(x(f"ProfilerStep#{s + 1}", t0, t - t0 + 100, cat="user_annotation"))
            t += 200
        write_trace(tmp_path / f"rank{r}.json", ev, rank=r, world=3)
    work = imbalance(load_run(tmp_path, jobs=1), 2, [0, 1])
    assert work is not None and work["work_ratio"] == 1.0, work  # was 1.05+ (as_strided 104 vs 100 per step)
    assert [m["name"] for m in work["more_calls"]] == ["aten::mm"] and work["example"] == ""


def test_extra_cpu_time_between_operators_is_the_extra_input_work():
    """bench/workloads.py run 10 (4 ranks on 2 cores): a rank with 1.44x the input work whose trace showed
    compute +0.2 ms and idle between operators +3.3 ms per step, while its training thread's CPU time grew by
    7.9 ms: the extra time is work done, so more input work explains it (the caller passes the CPU time only
    when the cause would be "host"; extra CPU in data loading stays data loading)."""
    from rankscope.analysis.diagnosis.cause import work_explains

    work = {"shapes_recorded": True, "work_ratio": 1.44}
    excess = {"compute": 0.2e6, "data": 0.02e6, "host": 3.3e6}
    others = pl.DataFrame({"computing": [36e6, 37e6, 29e6]})
    assert not work_explains(work, excess, others, 0.35)  # the trace's compute alone does not
    assert work_explains(work, excess, others, 0.35, cpu_excess=7.9e6)
    assert not work_explains(work, excess, others, 0.35, cpu_excess=1.0e6)  # CPU time short of the extra time
    assert not work_explains({"shapes_recorded": True, "work_ratio": 1.02}, excess, others, 0.35, cpu_excess=7.9e6)


def test_a_rank_named_by_own_time_must_bound_the_steps_distinctly():
    """Issue 25: a rank the own-time rules name is kept only when the critical path shows it, and no other
    rank, bounds the steps. Measured (tests/e2e/test_demo.py's healthy 2-rank run, 2 loaded cores, rotated
    CPUs): rank 1 +32 % own time excluding CPU wait ("cause unclear"), but it bounded 4 of 8 steps and its
    what-if saved 2.26 ms per step against rank 0's 2.21 ms: no rank bounds those steps. The compute straggler
    above (6 of 6 steps, 4 ms against 0) does; so does one that bounds 5 of 8 at 3x any other rank's saving."""
    from rankscope.analysis.diagnosis.bound import Bound

    healthy = Bound(rank=1, cost_ns=2_262_439, noise_ns=2_213_221, step_ns=54_200_000, steps=4, of_steps=8,
                    savings={0: 2_213_221, 1: 2_262_439})
    assert not healthy.steady and not healthy.distinct
    slow = Bound(rank=2, cost_ns=4e6, noise_ns=0.0, step_ns=20e6, steps=6, of_steps=6, savings={0: 0.0, 1: 0.0, 2: 4e6})
    assert slow.steady and slow.distinct
    # 2 ranks, 5 of 8 steps is chance (p = 0.36), but 7 ms against 2 ms saved is not
    loud = Bound(rank=0, cost_ns=7e6, noise_ns=1e6, step_ns=50e6, steps=5, of_steps=8, savings={0: 7e6, 1: 2e6})
    assert not loud.steady and loud.distinct
    assert not Bound(rank=0, cost_ns=5e6, noise_ns=1e6, step_ns=50e6, steps=5, of_steps=8,
                     savings={0: 5e6, 1: 2e6}).distinct


def test_steady_asks_whether_any_of_the_ranks_would_bound_that_many_steps_by_chance():
    """The bounding rank is the one that bounds the most steps, so "more than chance" is the chance that any of
    the n ranks bounds that many (n times one rank's tail), not one named in advance. Measured (bench/workloads.py
    seed 2711, fsdp-input at 4 ranks on 2 cores, every rank's what-if 5-10 ms in most steps): rank 1, with no more
    work than the others, bounded 4 of 6 steps (one rank's tail 0.038; any of four's 0.15) and was taken as
    steady, which vetoed rank 3 with +35 % input work by count."""
    from rankscope.analysis.diagnosis.bound import Bound

    def make(steps: int, savings: dict[int, float]) -> Bound:
        return Bound(rank=1, cost_ns=9.6e6, noise_ns=7.6e6, step_ns=184e6, steps=steps, of_steps=6, savings=savings)

    four = {0: 4.7e6, 1: 9.6e6, 2: 2.6e6, 3: 7.6e6}
    assert not make(4, four).steady and not make(4, four).distinct
    assert make(5, four).steady  # 5 of 6: 0.019 for any of four
    assert make(6, {0: 1e6, 1: 9.6e6}).steady and not make(5, {0: 1e6, 1: 9.6e6}).steady  # 2 ranks: 6 of 6


def test_input_imbalance_that_cost_time_without_bounding_the_steps_says_its_saving(tmp_path):
    """Issue 25: "cost no time" only where the path shows it. Measured (rankscope.demo.workloads.moe, 2 ranks,
    6 steps, 2 loaded cores): rank 1 with 1.61x the input elements saved 7.6 ms per step on the path while rank 0
    bounded 4 of 6 steps; the draft said "its what-if saving 7.6 ms ...: an input imbalance that cost no time".
    Here (the hand-made traces' input work, a path given): rank 2 saves 1.0 ms of a 20 ms step (5 %), rank 0
    bounds 5 of 8: its saving is said as a cost; at 0.05 ms (0.25 %, under bound.STEADY_SHARE) it cost nothing."""
    from rankscope.analysis.diagnosis.bound import Bound
    from rankscope.analysis.diagnosis.likely import input_imbalance
    from rankscope.analysis.diagnosis.rules import per_rank

    root = make(tmp_path / "a", {}, dims={2: 384}, world=4, steps=8)
    run = load_run(root, jobs=1)
    pr = per_rank(pl.from_arrow(_diagnose(root)["breakdown"].tables["breakdown"]))
    b = Bound(rank=0, cost_ns=2e6, noise_ns=1e6, step_ns=20e6, steps=5, of_steps=8,
              savings={0: 2e6, 1: 0.0, 2: 1e6, 3: 0.0})
    said = input_imbalance(run, pr, [], b, {0: 2e6, 1: 0.0, 2: 1e6, 3: 0.0})
    assert said == ("rank 2 has +50% input work per step (aten::mm inputs [32, 384] vs [32, 256]); on the critical "
                    "path its what-if saves 1.0 ms per step (5.0%), but it does not bound the steps steadily (rank 0 "
                    "bounds 5 of 8)"), said
    small = input_imbalance(run, pr, [], b, {0: 2e6, 1: 0.0, 2: 5e4, 3: 0.0})
    assert small.endswith("an input imbalance that cost no time in these steps"), small


def test_the_critical_path_alone_names_a_rank_that_bounds_the_steps_well_above_the_others():
    """Issue 25's FSDP2 job (rankscope.demo.workloads.fsdp, 4 ranks on 2 loaded cores, 6 steps): rank 2's data
    loading +44.6 ms per step (14.3 % of the step, its own timers), waited for inside FSDP's spans; the own-time
    rules said "no straggler". On the path it bounded 5 of 6 steps, its what-if saving 41.8 ms (13.3 % of a
    314.8 ms step) against at most 13.0 ms for any other rank: named. Its healthy twin (best 12.7 ms, 4 %, 2 of
    6 steps) is not; at 2 ranks (no other ranks' savings to stand out of) the bar stays at the twin spread."""
    from rankscope.analysis.diagnosis.bound import Bound

    fsdp = Bound(rank=2, cost_ns=41.8e6, noise_ns=15.9e6, step_ns=314.8e6, steps=5, of_steps=6,
                 savings={0: 10.6e6, 1: 13.0e6, 2: 41.8e6, 3: 9.1e6})
    assert fsdp.clears_bar
    twin = Bound(rank=1, cost_ns=12.7e6, noise_ns=20.9e6, step_ns=320e6, steps=2, of_steps=6,
                 savings={0: 5.2e6, 1: 12.7e6, 2: 11.9e6, 3: 5.0e6})
    assert not twin.clears_bar and not twin.steady
    two = Bound(rank=1, cost_ns=2e6, noise_ns=0.0, step_ns=20e6, steps=6, of_steps=6, savings={0: 0.0, 1: 2e6})
    assert two.steady and not two.clears_bar  # 10 % at 2 ranks: under the twin spread
    assert Bound(rank=1, cost_ns=5e6, noise_ns=0.0, step_ns=20e6, steps=6, of_steps=6, savings={0: 0.0, 1: 5e6}).clears_bar


def test_a_saving_well_above_the_others_in_too_few_steps_is_said_not_named():
    """Issue 25's 2-D job said a bare "no straggler". Measured (rankscope.demo.workloads.tp_fsdp, 4 ranks on 2
    loaded cores, 6 steps, rank 3's 25 ms host loop, +23.8 ms per step by its own timers): rank 3's what-if saved
    13.7 ms per step (6.5 % of 211 ms), 1.9x any other rank's 7.2 ms, bounding 3 of 6 steps (chance at 4 ranks:
    p = 0.17): said beside "no straggler". A healthy twin's leader (3.49 against 3.48 ms) and a 2-rank run
    where the other rank saves nothing (it saves 0 wherever this one bounds) say nothing."""
    from rankscope.analysis.diagnosis.bound import Bound

    tp = Bound(rank=3, cost_ns=13.7e6, noise_ns=7.2e6, step_ns=211e6, steps=3, of_steps=6,
               savings={0: 3.3e6, 1: 7.2e6, 2: 2.2e6, 3: 13.7e6})
    assert not tp.steady and tp.below_bar() == ("on the critical path rank 3's what-if saves 13.7 ms per step (6.5%), "
                                                "1.9x any other rank's, but it bounds only 3 of 6 steps: not named")
    twin = Bound(rank=2, cost_ns=3.49e6, noise_ns=3.48e6, step_ns=126e6, steps=1, of_steps=6,
                 savings={0: 0.85e6, 1: 2.5e6, 2: 3.49e6, 3: 3.48e6})
    assert twin.below_bar() == ""
    two = Bound(rank=1, cost_ns=1.6e6, noise_ns=0.0, step_ns=20e6, steps=3, of_steps=3, savings={0: 0.0, 1: 1.6e6})
    assert not two.steady and two.below_bar() == ""
    # at 2 ranks, over a saving of the other rank's own (bench/workloads.py seed 3005, fsdp-data at 2 ranks, rank 0's
    # tokenizing +11.8 ms per step by its timers): said, where it was a bare "no straggler"
    data = Bound(rank=0, cost_ns=20.9e6, noise_ns=7.9e6, step_ns=97.0e6, steps=3, of_steps=6,
                 savings={0: 20.9e6, 1: 7.9e6})
    assert not data.steady and data.below_bar() == ("on the critical path rank 0's what-if saves 20.9 ms per step "
                                                    "(21.5%), 2.6x the other rank's, but it bounds only 3 of 6 steps: "
                                                    "not named")
    # no ratio over a saving within a step's rounding (seed 2752, a healthy 4-rank DDP twin: "176.4x" over 7 µs)
    tiny = Bound(rank=2, cost_ns=1.3e6, noise_ns=7e3, step_ns=186e6, steps=2, of_steps=6,
                 savings={0: 7e3, 1: -5e3, 2: 1.3e6, 3: 0.0})
    assert tiny.below_bar() == ("on the critical path rank 2's what-if saves 1.3 ms per step (0.7%), where no other "
                                "rank's saves more than 0.0 ms, but it bounds only 2 of 6 steps: not named")


def test_at_two_ranks_the_path_names_a_data_straggler_its_own_timers_agree_on():
    """The 2-rank FSDP2 data straggler (rankscope.demo.workloads.fsdp, bench/workloads.py seeds 2612, 2614):
    7.5-9.3 ms of tokenizing per step (its own timers), 10-14 % of the step, under the 2-rank share bar. On the
    path it bounded 6 of 6 steps by 10.1 ms, 9.0 ms of that its own data loading, the other rank's saving 1.8 ms:
    named, as data, when its data wait is over the other rank's too. Its healthy twins (3-4 of 6 steps, at most
    1.3 ms of data on the path) and the same cost held by compute (a slower vCPU) are not."""
    from rankscope.analysis.diagnosis.bound import BAR, Bound

    def make(path_data: float, steps: int = 6, cost: float = 10.1e6, other: float = 1.83e6) -> Bound:
        return Bound(rank=1, cost_ns=cost, noise_ns=other, step_ns=88.3e6, steps=steps, of_steps=6,
                     path={"data": path_data, "compute": 28.4e6, "host": 0.4e6}, savings={0: other, 1: cost})

    slow = make(9.0e6)
    assert not slow.clears_bar and slow.clears_bar_on_data(8.9e6)
    assert make(7.9e6, steps=5, cost=8.3e6, other=1.24e6).clears_bar_on_data(7.5e6)  # 5 of 6: not steady, named
    assert not slow.clears_bar_on_data(2.0e6)  # its own timers show no data wait over the other rank's
    assert not make(1.3e6).clears_bar_on_data(8.9e6)  # the cost is held by compute on its path
    assert not make(9.0e6, steps=2).clears_bar_on_data(8.9e6)  # 2 of 6 steps: under half
    # 3 of 6 steps is a coin's chance at 2 ranks: named only where the saving leads the other rank's 1.5x
    assert not make(9.0e6, steps=3, other=7.0e6).clears_bar_on_data(8.9e6)  # 1.44x
    assert make(9.0e6, steps=3).clears_bar_on_data(8.9e6)  # 5.5x
    # seed 3005 (fsdp-data@2, quiet): +11.8 ms of tokenizing per step (its timers), 20.9 ms per step (21.5 %) at 2.6x
    # the other rank's saving, data loading on the path (over half the cost; the run's exact path split was not
    # kept, 17 ms stands for it), in 3 of 6 steps: "no straggler" before ``lead_data_two``
    coin = Bound(rank=0, cost_ns=20.9e6, noise_ns=7.9e6, step_ns=97.2e6, steps=3, of_steps=6,
                 path={"data": 17.0e6, "compute": 55.0e6, "host": 2.0e6}, savings={0: 20.9e6, 1: 7.9e6})
    assert not coin.clears_bar and coin.clears_bar_on_data(11.8e6) and not coin.clears_bar_on_data(6.0e6)
    assert not make(9.0e6, other=8.5e6).clears_bar_on_data(8.9e6)  # the other rank saves nearly as much (1.19x)
    # seed 2741 (fsdp-data@2, quiet): 22.1 ms per step (13.7 %), 5 of 6 steps, at 1.53x the other rank's saving
    quiet = Bound(rank=0, cost_ns=29.5e6, noise_ns=19.3e6, step_ns=215.3e6, steps=5, of_steps=6,
                  path={"data": 29.5e6, "compute": 60.0e6, "host": 2.6e6}, savings={0: 29.5e6, 1: 19.3e6})
    assert not quiet.clears_bar and quiet.clears_bar_on_data(22.8e6) and not quiet.clears_bar_on_data(10.0e6)
    # seed 2711 (fsdp-data@2): 6.95 ms per step, 6 of 6 steps, data on the path and in the timers, at 2.96x the
    # other rank's saving: named under the 2-rank data bar (2x), where the general one (3x) said "no straggler"
    near = make(6.2e6, cost=6.95e6, other=2.35e6)
    assert near.clears_bar_on_data(5.9e6) and near.cost_ns < BAR["over_noise"] * near.others_best_ns
    assert not make(5.0e6, cost=5.0e6, other=1.0e6).clears_bar_on_data(5.0e6)  # 5.7 % of the step: under the bar
    # 4 ranks on 2 cores (bench/workloads.py seed 2622, fsdp-data@4): 30.5 ms (11.2 %), 5 of 6 steps, the other
    # ranks' savings up to 21.1 ms (1.45x): its own timers say whose the cost is, the what-if ranks it first
    four = Bound(rank=3, cost_ns=30.5e6, noise_ns=11.6e6, step_ns=273.4e6, steps=5, of_steps=6,
                 path={"data": 29.0e6, "compute": 40.0e6, "host": 1.0e6}, savings={0: 11.6e6, 1: 2.2e6, 2: 21.1e6, 3: 30.5e6})
    assert not four.clears_bar and four.clears_bar_on_data(30.8e6)
    assert not four.clears_bar_on_data(5.0e6)  # its own timers show no data wait over the others'
    rival = Bound(**{**four.__dict__, "savings": {0: 11.6e6, 1: 2.2e6, 2: 26.0e6, 3: 30.5e6}})
    assert not rival.clears_bar_on_data(30.8e6)  # another rank saves nearly as much (1.17x)


def test_data_excess_is_over_what_a_slower_cpu_explains_of_the_other_ranks_median():
    import polars as pl

    from rankscope.analysis.diagnosis.likely import TWIN_SPREAD
    from rankscope.analysis.diagnosis.path_choice import data_excess

    pr = pl.DataFrame({"rank": [0, 1, 2], "data_wait": [1e6, 10e6, 3e6]})
    scale = 1.0 + TWIN_SPREAD
    assert data_excess(pr, 1) == pytest.approx(10e6 - scale * 2e6) and data_excess(pr, 7) == 0.0
    assert data_excess(pr, 0) == pytest.approx(1e6 - scale * 6.5e6)
    # bench/workloads.py seed 2753 run 21 (DDP decoding, 2 ranks, healthy): data loading 94.0 ms against 82.6 ms per
    # step (+14 %, a slower CPU), bounding the step by 7.6 ms: no excess left for the data bar to name
    twins = pl.DataFrame({"rank": [0, 1], "data_wait": [82.6e6, 94.0e6]})
    assert data_excess(twins, 1) < 0.5 * 7.6e6
    # seed 2751 (FSDP2, 2 ranks): a data straggler at 9.1 ms against 0.4 ms keeps nearly all of its excess
    assert data_excess(pl.DataFrame({"rank": [0, 1], "data_wait": [0.4e6, 9.1e6]}), 1) > 8.5e6


def test_a_pipeline_edge_stage_the_path_cannot_measure_is_left_to_the_stage_model():
    """bench/workloads.py seed 2616, GPipe on 4 stages, stage 0 with 2x the layers: the critical path has a
    what-if for ranks 1 and 2 only (no other rank runs stage 0's or stage 3's calls) and named rank 1 at 1.6 ms,
    which dropped the rules' rank 0 (+82 % own time). A rank without a what-if is now kept where the pipeline
    analysis names its stage the bottleneck, and its cost is that analysis's (43.5 ms; the job's own: 43.1 ms)."""
    import polars as pl

    from rankscope.analysis.base import Result
    from rankscope.analysis.diagnosis.bound import without_what_if
    from rankscope.analysis.diagnosis.stage_verdict import bottleneck_ranks, stage_cost

    wi = pl.DataFrame({"step": [1, 1, 1, 1, 2, 2, 2, 2], "rank": [0, 1, 2, 3] * 2,
                       "step_ns": [200e6] * 8, "step_if_median_ns": [None, 198e6, None, None, None, 199e6, 203e6, None],
                       "saving_ns": [0.0, 2e6, 0.0, 0.0, 0.0, 1e6, -3e6, 0.0]})
    results = {"critical_path": Result("critical_path", tables={"what_if": wi.to_arrow()}),
               "pipeline": Result("pipeline", summary={"balanced": False, "bottleneck_stage": 0,
                                                       "stage_ranks": [[0], [1], [2], [3]], "cost_ns": 43501000,
                                                       "cost_share": 0.2149, "of_steps": 6})}
    assert without_what_if(results) == {0, 3}  # rank 2 has a what-if in one step: measured
    assert bottleneck_ranks(results) == {0}
    lost = stage_cost(results)
    assert lost["lost_per_step_ns"] == 43501000 and lost["lost_share_of_step"] == 0.2149
    assert lost["lost_total_ns"] == 6 * 43501000
    # a balanced pipeline (its twin) and a job without one name no stage
    results["pipeline"] = Result("pipeline", summary={"balanced": True, "bottleneck_stage": 0,
                                                      "stage_ranks": [[0], [1], [2], [3]]})
    assert bottleneck_ranks(results) == set()
    assert bottleneck_ranks({}) == set() and without_what_if({}) == set()


def test_a_pipeline_stage_s_ranks_are_left_to_the_stage_model():
    """bench/workloads.py seed 2712, pp-gpipe at 4 ranks, stage 1 with 2x the layers: the path matched rank 1's
    calls with stage 2's (the same layer calls, fewer of them) and gave it a what-if of -2.8 to -6.1 ms per step,
    which dropped the rules' rank 1 (+74-83 % own time) in 3 of 3 runs, while the stage model named stage 1 in 6 of
    6 steps at 21-23 % of the step. A rank alone in its stage has no peer that runs its program: like a rank
    without a what-if, the stage model speaks for it. So it does for ranks that share a stage (data-parallel
    replicas): the path compares them with each other, as heavy (rankscope.demo.workloads.pipeline --dp 2, stage 1
    with 2x the layers: rank 2's what-if 0.2 ms, the stage model 18.7 ms, and "no straggler" with the path's)."""
    from rankscope.analysis.base import Result
    from rankscope.analysis.diagnosis.stage_verdict import bottleneck_ranks, staged

    def pipeline(stage_ranks: list[list[int]], bottleneck: int = 1) -> dict[str, Result]:
        return {"pipeline": Result("pipeline", summary={"balanced": False, "bottleneck_stage": bottleneck,
                                                        "stage_ranks": stage_ranks})}

    four = pipeline([[0], [1], [2], [3]])
    assert staged(four) == {0, 1, 2, 3} and bottleneck_ranks(four) == {1}
    replicas = pipeline([[0, 2], [1, 3]])  # 2 stages x 2 replicas: the replicas are as heavy as each other
    assert staged(replicas) == {0, 1, 2, 3} and bottleneck_ranks(replicas) == {1, 3}
    assert staged(pipeline([[0, 2], [1]])) == {0, 1, 2}
    assert staged(pipeline([[0, 1, 2, 3]])) == set()  # one stage: not a pipeline
    assert staged({}) == set()
    assert staged({"pipeline": Result("pipeline", skipped="no send / receive pairs")}) == set()


def test_a_named_bottleneck_stage_takes_the_stage_models_cost_where_the_path_cannot_compare_it():
    """bench/workloads.py seed 2713, pp-gpipe at 4 ranks, stage 1 with 2x the layers (+28-34 ms of extra CPU per
    step by the job's timers): named, but with the path's what-if of 1.2-8.6 ms as its cost, where the stage model
    said 27.8-32.8 ms. A rank of the bottleneck stage, alone in it or with replicas (the path compares them with
    each other, as heavy), or one the path has no what-if for, takes the stage model's cost; a rank of another
    stage takes none."""
    from rankscope.analysis.base import Result
    from rankscope.analysis.diagnosis.stage_verdict import stage_cost, takes_stage_cost

    def pipeline(stage_ranks: list[list[int]]) -> dict[str, Result]:
        return {"pipeline": Result("pipeline", summary={
            "balanced": False, "bottleneck_stage": 1, "stage_ranks": stage_ranks, "cost_ns": 30.7e6,
            "cost_share": 0.226, "of_steps": 6})}

    four = pipeline([[0], [1], [2], [3]])
    assert takes_stage_cost(four, 1, on_path=True) and takes_stage_cost(four, 1, on_path=False)
    assert not takes_stage_cost(four, 2, on_path=True) and not takes_stage_cost(four, 2, on_path=False)
    replicas = pipeline([[0, 2], [1, 3]])
    assert takes_stage_cost(replicas, 1, on_path=True) and takes_stage_cost(replicas, 3, on_path=False)
    assert not takes_stage_cost(replicas, 0, on_path=True)
    assert stage_cost(four) == {"lost_per_step_ns": 30_700_000, "lost_total_ns": 184_200_000,
                                "lost_share_of_step": 0.226, "steps": 6,
                                "method": "pipeline stages: the step if the stages' work were balanced"}


def test_a_path_bounded_by_a_rank_that_waited_for_a_cpu_does_not_veto_the_rules(tmp_path):
    """tests/fixtures/runs/demo_host_starved (a real 2-rank demo run with a host straggler on rank 1, recorded beside
    another pytest worker's jobs): the path's bounding rank is rank 0, which waited for a CPU 14.6 ms per step over
    rank 1 with less CPU time of its own; its what-if saving (13 ms) is that wait. Before: "no straggler" (the path
    vetoed the rules' rank 1). Now the rules' rank 1 stands, with its cause; the path alone names nobody there."""
    import shutil

    from rankscope.analysis.base import frame
    from rankscope.analysis.diagnosis.bound import bound
    from rankscope.analysis.diagnosis.cpu import wait_excess
    from rankscope.analysis.diagnosis.rules import per_rank
    from rankscope.analysis.diagnosis.path_choice import starved
    from rankscope.analysis.diagnosis.straggler import verdict_input
    from rankscope.analysis.diagnosis.verdict_ctx import Ctx

    src = tmp_path / "run"  # a copy: the analysis writes its cache beside the run
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "demo_host_starved", src)
    run = load_run(src, jobs=1)
    res = run_all(run)
    st = res["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((1,), "host")], st.summary["verdict"]
    b, _ = bound(res)
    assert b is not None and b.rank == 0 and b.steps >= 4  # the path alone would say rank 0
    bd, _, _ = verdict_input(run, frame(res["breakdown"].tables["breakdown"]))
    ctx = Ctx(run, res, bd, per_rank(bd))
    waited = wait_excess(ctx.sched, 0, ctx.own_steps)
    assert waited is not None and waited["unexplained_ns"] >= b.cost_ns and waited["cpu_excess_ns"] < 0
    assert starved(ctx, b)


def test_more_input_work_on_a_saturated_machine_is_named_from_cpu_time(tmp_path):
    """tests/fixtures/runs/lm_saturated (a real 2-rank LM run, rank 1 with 1.47x the input work, recorded with four
    pytest workers on 2 cores): no traced component of rank 1 grew (rank 0's compute holds 14.7 ms of run-queue
    wait per step, rank 1's 4.8 ms), but rank 1's CPU time grew by 9.4 ms per step, more than half of the 16.5 ms
    its extra input predicts. Before: "cause unclear". Now: the input imbalance, with its work evidence."""
    import shutil

    from rankscope.analysis.diagnosis.cause import cpu_time_explains
    from tests.helpers import straggler_note

    src = tmp_path / "run"  # a copy: the analysis writes its cache beside the run
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "lm_saturated", src)
    st = run_all(load_run(src, jobs=1))["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((1,), "imbalance")], st.summary["verdict"]
    ev = st.findings[0].evidence
    assert all(v <= 0.01 * ev["others_median_ns"] for v in ev["excess_ns"].values())  # no traced component grew
    assert ev["cpu_wait"]["cpu_excess_ns"] > 0 and ev["work"]["work_ratio"] > 1.3
    straggler_note(st.findings[0])
    # the rule itself: half the expected extra time, in CPU time
    work = {"shapes_recorded": True, "work_ratio": 1.5}
    others = pl.DataFrame({"computing": [30e6]})  # expected: 15 ms
    assert cpu_time_explains(work, others, 0.4, 7.6e6) and not cpu_time_explains(work, others, 0.4, 7.4e6)
    assert not cpu_time_explains(work, others, 0.4, None)
    assert not cpu_time_explains({"shapes_recorded": True, "work_ratio": 1.05}, others, 0.4, 20e6)  # too little work
    # where the others' CPU time was sampled, the prediction is in CPU time: 0.5 x 20 ms = 10 ms, half of it 5 ms
    assert cpu_time_explains(work, others, 0.4, 5.1e6, 20e6) and not cpu_time_explains(work, others, 0.4, 4.9e6, 20e6)
    # the fixture: 0.47 x the others' 22.9 ms of CPU time = 10.8 ms predicted, against 16.5 ms from their compute
    # (which holds their 14.7 ms of run-queue wait); rank 1's +9.4 ms is most of the former
    waited = ev["cpu_wait"]
    assert waited["cpu_excess_ns"] >= 0.75 * (ev["work"]["work_ratio"] - 1) * waited["others_cpu_ns"]


def test_more_input_work_on_a_crowded_machine_is_judged_against_cpu_time(tmp_path):
    """tests/fixtures/runs/lm_crowded (a real 2-rank LM run, rank 1 with 1.47x the input work, beside two busy loops
    and two other jobs on 2 cores): own time +260 %, CPU time +87 %. Judged against own time, 1.47x the work explained
    too little (a third of +260 % needed): "compute". Judged against the CPU time's excess: the input imbalance."""
    import shutil

    from rankscope.analysis.diagnosis.cpu import work_rel
    from rankscope.analysis.diagnosis.work import is_input_imbalance

    src = tmp_path / "run"  # a copy: the analysis writes its cache beside the run
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "lm_crowded", src)
    run = load_run(src, jobs=1)
    st = run_all(run)["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((1,), "imbalance")], st.summary["verdict"]
    ev = st.findings[0].evidence
    waited, work, rel = ev["cpu_wait"], ev["work"], ev["relative_excess"]
    assert rel > 2.0 and not is_input_imbalance(work, rel)  # the old judgement, on own time
    rw = work_rel(run, rel, waited)
    assert rw == pytest.approx(waited["cpu_excess_ns"] / waited["others_cpu_ns"]) and rw < 1.0
    assert is_input_imbalance(work, rw)
    assert ev["time_lost"]["lost_per_step_ns"] > 0
    # the smaller of the two; own time where no CPU time was sampled, or a rank ran on a device
    assert work_rel(run, 0.5, waited) == 0.5 and work_rel(run, rel, None) == rel
    assert work_rel(run, rel, {**waited, "cpu_excess_ns": None}) == rel
    run.ranks[0].meta["device"] = "cuda"
    assert work_rel(run, rel, waited) == rel


def test_a_named_rank_whose_own_time_shows_no_cost_is_said_with_its_cpu_time(tmp_path):
    """Under load tests/e2e/test_workloads.py's LM job once named rank 1 (input imbalance) with "costs 0.0 ms": own
    time against the next slowest rank was never positive, and no path what-if was its. "No time" is the path's to
    say; without it the cost is the rank's extra CPU time. Read on tests/fixtures/runs/lm_crowded through rank 0
    (its own time is below rank 1's in every step)."""
    import shutil

    from rankscope.analysis.base import frame
    from rankscope.analysis.diagnosis.rules import per_rank
    from rankscope.analysis.diagnosis.straggler import _cost, verdict_input
    from rankscope.analysis.diagnosis.verdict_ctx import Ctx

    src = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "lm_crowded", src)
    run = load_run(src, jobs=1)
    res = run_all(run)
    bd, _, _ = verdict_input(run, frame(res["breakdown"].tables["breakdown"]))
    ctx = Ctx(run, res, bd, per_rank(bd))
    row = ctx.pr.filter(pl.col("rank") == 0).row(0, named=True)
    ev: dict = {}
    _cost(ctx, 0, row, None, None, None, ev)
    assert ev["time_lost"]["lost_per_step_ns"] == 0  # own time: nothing, and no CPU time to say instead
    ev = {}
    _cost(ctx, 0, row, None, None, 4e6, ev)
    assert ev["time_lost"]["lost_per_step_ns"] == 4_000_000 and "CPU time" in ev["time_lost"]["method"]
    ev = {}
    _cost(ctx, 1, ctx.pr.filter(pl.col("rank") == 1).row(0, named=True), None, None, 4e6, ev)
    assert ev["time_lost"]["lost_per_step_ns"] > 4e6 and "CPU time" not in ev["time_lost"]["method"]  # own time's
    run.ranks[1].meta["device"] = "cuda:0"  # a device rank's thread CPU time is not its work: not said as its cost
    ev = {}
    _cost(ctx, 0, row, None, None, 4e6, ev)
    assert ev["time_lost"]["lost_per_step_ns"] == 0


def test_a_bottleneck_stage_the_path_cannot_judge_is_named_from_the_stage_model():
    """bench/workloads.py seed 2621, pp-gpipe at 4 ranks (stage 0 with 2x the layers, +59 ms of CPU per step by the
    job's own timers): the pipeline analysis found stage 0 the bottleneck in 6 of 6 steps at 77.7 ms (20.6 %);
    the path has no what-if for rank 0 (no other rank runs its calls), the rules named nobody: "no straggler".
    The stage's rank is named where the stage model's cost clears the path's bar, steadily."""
    from types import SimpleNamespace

    from rankscope.analysis.base import Result
    from rankscope.analysis.diagnosis.stage_verdict import stage_candidate

    pr = pl.DataFrame({"rank": [0, 1, 2, 3], "own": [150e6, 140e6, 145e6, 142e6]})
    summary = {"cost_share": 0.2064, "bottleneck_steps": 6, "of_steps": 6, "bottleneck_stage": 0, "balanced": False,
               "stage_ranks": [[0], [1], [2], [3]]}
    ctx = SimpleNamespace(pr=pr, results={"pipeline": Result("pipeline", summary=summary)})
    got = stage_candidate(ctx, {0})
    assert [(i, t) for i, _, t, _ in got] == [(0, "pipeline stages")]
    assert stage_candidate(ctx, set()) == []  # a rank the path can judge is the path's to name
    for change in ({"cost_share": 0.09}, {"bottleneck_steps": 3}, {"of_steps": 0}):  # below the bar; not steady
        ctx.results["pipeline"] = Result("pipeline", summary={**summary, **change})
        assert stage_candidate(ctx, {0}) == [], change
    two = SimpleNamespace(pr=pr.head(2), results={"pipeline": Result("pipeline", summary={**summary, "cost_share": 0.15})})
    assert stage_candidate(two, {0}) == []  # at 2 ranks the bar is 20 %
    # seed 2651, pp-1f1b at 4 ranks, stage 0 with 2x the layers: 1.47x the stages' mean work, and 1F1B hides part of
    # a slow first stage behind its warm-up (9.5 % by the replay): named; a twin's 1.15x at 9 % is not
    ctx.results["pipeline"] = Result("pipeline", summary={**summary, "cost_share": 0.095, "imbalance": 1.47})
    assert [(i, t) for i, _, t, _ in stage_candidate(ctx, {0})] == [(0, "pipeline stages")]
    for change in ({"imbalance": 1.15}, {"cost_share": 0.05}):
        ctx.results["pipeline"] = Result("pipeline", summary={**summary, "cost_share": 0.09, "imbalance": 1.47, **change})
        assert stage_candidate(ctx, {0}) == [], change
    assert stage_candidate(SimpleNamespace(pr=pr, results={}), {0}) == []


def test_from_three_ranks_a_saving_far_above_every_other_rank_s_is_named_in_half_the_steps():
    """bench/workloads.py seed 2623, tp_fsdp at 4 ranks on 2 cores: rank 3's Python loop (+32.5 ms per step by its own
    timers) saved 29.5 ms per step (17.2 %) on the path, 17.5x any other rank's median saving, but bounded only 3
    of 6 steps (a preempted step of rank 2 saved 40.9 ms once): "no straggler". From 3 ranks up, half the steps do
    when the median saving is 3x every other rank's and over the share bar; at 2 ranks the count still rules."""
    from rankscope.analysis.diagnosis.bound import Bound

    four = Bound(rank=3, cost_ns=29.5e6, noise_ns=1.7e6, step_ns=171.6e6, steps=3, of_steps=6,
                 savings={0: 0.6e6, 1: -0.1e6, 2: 1.7e6, 3: 29.5e6})
    assert four.clears_bar
    assert not Bound(**{**four.__dict__, "steps": 2}).clears_bar  # a third of the steps: not enough
    assert not Bound(**{**four.__dict__, "savings": {0: 0.6e6, 1: -0.1e6, 2: 12.0e6, 3: 29.5e6}}).clears_bar  # 2.5x
    assert not Bound(**{**four.__dict__, "cost_ns": 15.0e6, "savings": {0: 0.6e6, 2: 1.7e6, 3: 15.0e6, 1: 0.0}}).clears_bar  # 8.7 %
    two = Bound(rank=1, cost_ns=40e6, noise_ns=0.0, step_ns=171.6e6, steps=3, of_steps=6, savings={0: 0.0, 1: 40e6})
    assert not two.clears_bar  # 2 ranks: 3 of 6 is a coin's chance


def test_from_three_ranks_host_time_on_the_path_and_in_the_breakdown_lowers_the_bar():
    """bench/workloads.py seed 2651, tp_fsdp at 4 ranks on 2 cores: rank 2's 20 ms Python loop saved 15.7 ms per
    step (7.9 %) on the path, 5.0x any other rank's, in 4 of 6 steps; 32.3 ms of its path segments were host time
    between operators: "no straggler" under the 10 % bar. Host time on the path and in the rank's own breakdown,
    each at least half the cost, are two lines of evidence: 6 % at 2x the other ranks' savings suffices. A rank
    whose cost sits in its operators (the same work, slower: a slower vCPU) keeps the 10 % bar; 2 ranks need 15 %
    (``test_at_two_ranks_host_time_on_the_path_and_in_the_breakdown_names_the_rank``)."""
    from rankscope.analysis.diagnosis.bound import Bound

    b = Bound(rank=2, cost_ns=15.66e6, noise_ns=0.64e6, step_ns=197.9e6, steps=4, of_steps=6,
              path={"data": 0.0, "compute": 25.2e6, "host": 32.3e6}, savings={0: 0.64e6, 1: 0.61e6, 2: 15.66e6, 3: 3.15e6})
    assert not b.clears_bar and b.clears_bar_on_host(20.0e6)
    assert not b.clears_bar_on_host(7.0e6)  # the breakdown's host time grew by under half the cost
    assert not Bound(**{**b.__dict__, "path": {"compute": 40.0e6, "host": 5.0e6}}).clears_bar_on_host(20.0e6)
    assert not Bound(**{**b.__dict__, "steps": 2}).clears_bar_on_host(20.0e6)  # a third of the steps
    # seed 2701: 2.57x its dp peer's saving clears (the breakdown says whose the cost is); under 2x does not
    assert Bound(**{**b.__dict__, "savings": {0: 0.6e6, 1: 0.6e6, 2: 15.66e6, 3: 6.1e6}}).clears_bar_on_host(20.0e6)
    assert not Bound(**{**b.__dict__, "savings": {0: 0.6e6, 1: 0.6e6, 2: 15.66e6, 3: 8.0e6}}).clears_bar_on_host(20.0e6)
    assert not Bound(**{**b.__dict__, "savings": {0: 0.6e6, 1: 0.6e6, 2: 15.66e6, 3: 6.1e6}}).clears_bar
    assert not Bound(**{**b.__dict__, "cost_ns": 9.0e6, "savings": {0: 0.6e6, 1: 0.6e6, 2: 9.0e6, 3: 2.0e6}}
                     ).clears_bar_on_host(20.0e6)  # 4.5 %: the healthy twins' range
    assert not Bound(**{**b.__dict__, "savings": {1: 0.0, 2: 15.66e6}}).clears_bar_on_host(20.0e6)  # 2 ranks: 7.9 %


def test_at_two_ranks_host_time_on_the_path_and_in_the_breakdown_names_the_rank():
    """bench/workloads.py seed 2741, tp_fsdp at 2 ranks (quiet): rank 1's 22.7 ms Python loop (28.2 ms of wall time by
    its timers) bounded 4 of 6 steps by 32.9 ms (24.2 %), at 1.57x rank 0's saving (20.9 ms: on 2 cores each rank's
    operators are preempted in turn), 60.2 ms of its path segments host time, 27.4 ms more host time than rank 0
    in its breakdown: "no straggler" (under the 3x of ``clears_bar``, and not steady at 2 ranks). Healthy 2-rank
    twins bound 10-18 % of the step, but with at most 3.8 ms of a 12.9 ms cost in their breakdown's host time."""
    from rankscope.analysis.diagnosis.bound import Bound

    b = Bound(rank=1, cost_ns=32.88e6, noise_ns=20.89e6, step_ns=136.0e6, steps=4, of_steps=6,
              path={"data": 0.0, "compute": 16.7e6, "host": 60.2e6}, savings={0: 20.89e6, 1: 32.88e6})
    assert not b.clears_bar and b.clears_bar_on_host(27.4e6)
    assert not b.clears_bar_on_host(3.8e6)  # a healthy twin's host excess: not its loop
    assert not Bound(**{**b.__dict__, "path": {"compute": 60.0e6, "host": 10.0e6}}).clears_bar_on_host(27.4e6)
    assert not Bound(**{**b.__dict__, "steps": 2}).clears_bar_on_host(27.4e6)  # a third of the steps
    assert not Bound(**{**b.__dict__, "savings": {0: 28.0e6, 1: 32.88e6}}).clears_bar_on_host(27.4e6)  # 1.17x
    # seed 2731, tpfsdp-healthy@2: 12.4 % of the step, host excess 3.8 ms; and a loop whose cost is 12 % of the step
    twin = Bound(rank=1, cost_ns=12.9e6, noise_ns=8.2e6, step_ns=104.0e6, steps=3, of_steps=6,
                 path={"data": 0.0, "compute": 20.0e6, "host": 6.8e6}, savings={0: 8.2e6, 1: 12.9e6})
    assert not twin.clears_bar_on_host(3.8e6) and not twin.clears_bar_on_host(12.0e6)


def test_the_path_agrees_with_the_rules_rank_in_most_steps_at_twice_the_others_saving():
    """bench/workloads.py seed 2623, fsdp-compute at 2 ranks: the rules named rank 0 (+32 % own time); the path had
    it bound 5 of 6 steps at 22.0 ms against rank 1's 8.4 ms, not distinctly (neither beyond chance nor 3x): the
    rules' rank was dropped. Agreement needs most steps and twice the others' saving."""
    from rankscope.analysis.diagnosis.bound import Bound
    from rankscope.analysis.diagnosis.path_choice import agrees

    b = Bound(rank=0, cost_ns=22.0e6, noise_ns=8.4e6, step_ns=129.3e6, steps=5, of_steps=6, savings={0: 22.0e6, 1: 8.4e6})
    assert not b.distinct and agrees(b)
    assert not agrees(Bound(**{**b.__dict__, "steps": 3}))  # half the steps
    # the healthy demo's "cause unclear" rank: 4 of 8 steps, 2.26 against 2.21 ms
    assert not agrees(Bound(rank=1, cost_ns=2.26e6, noise_ns=2.21e6, step_ns=40e6, steps=4, of_steps=8,
                            savings={0: 2.21e6, 1: 2.26e6}))
    assert not agrees(Bound(**{**b.__dict__, "savings": {0: 22.0e6, 1: 12.0e6}}))  # 1.8x


def test_an_own_time_outlier_whose_excess_is_data_loading_within_a_slower_cpus_reach_is_not_a_data_straggler():
    """bench/workloads.py seed 2761 run 63 (DDP decoding, 4 ranks, a healthy twin): rank 2's data loading 189
    against 165-171 ms per step (1.13x; its timers: 8 % more CPU for the same bytes), own time +11 %: a Dixon
    outlier the path agreed with at 5 % of the step, named "data loading". A data straggler's loading is 1.5x and
    more (decode-slow) or 19x and more (FSDP2's tokenizer)."""
    import polars as pl

    from rankscope.analysis.diagnosis.path_choice import slower_cpu

    def pr(data2: float, own2: float) -> pl.DataFrame:
        return pl.DataFrame({"rank": [0, 1, 2, 3], "data_wait": [168e6, 171e6, data2, 165e6],
                             "own": [192e6, 195e6, own2, 190e6]})

    assert slower_cpu(pr(189e6, 213e6), 2, 0.11)
    assert not slower_cpu(pr(2.2 * 168e6, 213e6), 2, 0.11)  # its data loading 2.2x the others': a data straggler
    assert not slower_cpu(pr(189e6, 240e6), 2, 0.25)  # over the twin spread: the own-time rules stand
    assert not slower_cpu(pr(172e6, 213e6), 2, 0.11)  # the excess is not data loading: not this test's to say


def test_steps_the_host_bounded_are_left_out_of_the_paths_count():
    """tests/e2e/test_demo.py's host straggler beside the other pytest worker's jobs (one failed suite run): rank 1's
    loop bounded steps 3, 4 and 7 by 29-31 ms; rank 0 "bounded" steps 2, 5 and 6, its operators stretched by 58-65
    ms of run-queue wait against rank 1's 21-44 ms, each wait excess over its saving there: rank 1 bounded 3 of 6,
    "no straggler". Without scheduler samples nothing is left out; a step whose bounding rank waited less than its
    saving stays."""
    import polars as pl

    from rankscope.analysis.diagnosis.bound import without_host_steps

    ms = 1e6
    save = {2: (16.2, 0.0), 3: (0.0, 30.7), 4: (0.0, 5.5), 5: (1.8, 0.0), 6: (7.9, 0.0), 7: (0.0, 28.8)}
    wi = pl.DataFrame([{"rank": r, "step": s, "saving_ns": v[r] * ms} for s, v in save.items() for r in (0, 1)])
    wait = {2: (65.4, 21.0), 3: (20.9, 43.0), 4: (42.6, 28.0), 5: (60.8, 43.8), 6: (57.7, 30.0), 7: (12.6, 20.5)}
    runq = pl.DataFrame([{"rank": r, "step": s, "runq_wait_ns": v[r] * ms} for s, v in wait.items() for r in (0, 1)])
    assert sorted(set(without_host_steps(wi, runq)["step"])) == [3, 4, 7]
    assert without_host_steps(wi, None).height == wi.height
    short = runq.with_columns(pl.when((pl.col("rank") == 0) & (pl.col("step") == 5)).then(1.0 * ms)
                              .otherwise(pl.col("runq_wait_ns")).alias("runq_wait_ns"))
    assert sorted(set(without_host_steps(wi, short)["step"])) == [3, 4, 5, 7]


def test_a_path_rank_whose_extra_own_time_was_waiting_for_a_cpu_is_contended_not_its_own_work():
    """bench/workloads.py seed 2761 run 175 (DDP LM at 4 ranks on 2 CPUs, a healthy twin): rank 1 bounded 5 of 8
    steps by 6.2 ms; 90 % of its +18 % own time was run-queue wait, its CPU time +0.5 ms: "rank 1 is slow:
    contention". A pipeline's heavy stage (tests/e2e/test_pipeline_workload.py, GPipe) can show no own-time excess
    at all (the others wait inside their Forward / Backward spans): its run-queue share says nothing there."""
    from types import SimpleNamespace

    from rankscope.analysis.diagnosis.bound import Bound
    from rankscope.analysis.diagnosis.path_choice import contended

    ms = 1e6

    def ctx(own1: float, cpu1: float, runq1: float) -> SimpleNamespace:
        rows = [(r, s, own1 if r == 1 else 40.0, cpu1 if r == 1 else 20.0, runq1 if r == 1 else 20.0)
                for r in range(4) for s in range(6)]
        sched = pl.DataFrame([{"rank": r, "step": s, "cpu_ns": c * ms, "runq_wait_ns": q * ms} for r, s, _, c, q in rows])
        own = pl.DataFrame([{"rank": r, "step": s, "own": o * ms} for r, s, o, _, _ in rows])
        return SimpleNamespace(sched=sched, own_steps=own, peers=lambda r: None)

    b = Bound(rank=1, cost_ns=6.2 * ms, noise_ns=1.0 * ms, step_ns=48.0 * ms, steps=5, of_steps=8)
    assert contended(ctx(47.0, 20.5, 26.5), b)  # +7 ms own time, +0.5 ms CPU, +6.5 ms run-queue wait
    assert not contended(ctx(40.0, 35.0, 5.0), b)  # no own-time excess (a pipeline stage): nothing to split
    assert not contended(ctx(60.0, 22.0, 38.0), b)  # +2 ms of its own CPU work: a third of the path's cost
    c = ctx(47.0, 20.5, 26.5)
    c.sched = c.sched.with_columns(cpu_ns=pl.lit(None, pl.Float64))
    assert not contended(c, b)  # its CPU time unknown: run-queue wait alone does not say it


def test_a_path_rank_that_waited_for_a_cpu_longer_than_it_saved_in_the_steps_it_bounds_is_contended():
    """bench/workloads.py seed 2781 run 55 (DDP LM at 4 ranks on 2 CPUs, a healthy twin): rank 2 bounded steps 3, 4,
    5, 8 and 9 by 4.6-14.0 ms, and in 4 of them it waited longer for a CPU, over the others' median there (7-14 ms),
    than it saved; its CPU time +0.4 ms per step. Over all steps the run-queue share of its extra own time was 49.5 % (one 45 ms preemption of
    rank 3 in step 7 raised the others' mean): "rank 2 is slow: compute (same operators and input sizes, slower)".
    Step by step it is contention. The same rank with the wait in other steps than the ones it bounds is not."""
    from types import SimpleNamespace

    import pyarrow as pa

    from rankscope.analysis.base import Result
    from rankscope.analysis.diagnosis.bound import Bound, host_bounded
    from rankscope.analysis.diagnosis.path_choice import contended

    ms = 1e6
    # seed 2781 run 55, ms per step and rank 0-3: own time, CPU time, run-queue wait, the path's what-if saving
    own = {2: (24.4, 35.3, 37.7, 42.5), 3: (34.0, 34.1, 38.9, 16.7), 4: (22.2, 19.5, 32.1, 17.5),
           5: (22.5, 17.4, 27.0, 18.1), 6: (32.3, 22.7, 18.6, 27.1), 7: (33.5, 34.1, 20.6, 65.8),
           8: (23.4, 18.9, 33.2, 15.2), 9: (21.5, 22.4, 36.4, 18.9)}
    cpu = {2: (18.3, 18.0, 20.1, 20.9), 3: (19.0, 18.9, 16.7, 16.7), 4: (18.2, 17.2, 18.7, 15.5),
           5: (16.5, 17.1, 17.9, 18.1), 6: (16.4, 18.1, 17.6, 19.9), 7: (19.2, 17.6, 16.6, 20.7),
           8: (15.5, 16.3, 19.2, 15.1), 9: (18.3, 19.4, 18.9, 19.0)}
    runq = {2: (7.0, 17.7, 15.5, 22.2), 3: (17.6, 15.5, 22.5, 0.3), 4: (4.1, 2.4, 13.6, 4.8),
            5: (8.2, 0.7, 9.9, 0.7), 6: (16.1, 5.2, 1.6, 6.5), 7: (20.8, 19.6, 4.2, 45.5),
            8: (10.5, 2.9, 14.3, 1.4), 9: (3.3, 3.3, 17.7, 0.8)}
    save = {2: (0.0, 0.0, 2.8, 4.4), 3: (0.0, 0.2, 4.6, 0.0), 4: (0.0, 0.0, 9.8, 0.0), 5: (0.0, 0.0, 4.7, 0.0),
            6: (5.2, 0.0, 0.0, 0.0), 7: (0.0, 0.0, 0.0, 28.6), 8: (0.2, 0.0, 7.6, 0.0), 9: (0.0, 0.0, 14.0, 0.4)}

    def ctx(wait: dict[int, tuple[float, ...]]) -> SimpleNamespace:
        sched = pl.DataFrame([{"rank": r, "step": s, "cpu_ns": cpu[s][r] * ms, "runq_wait_ns": wait[s][r] * ms}
                              for s in own for r in range(4)])
        steps = pl.DataFrame([{"rank": r, "step": s, "own": own[s][r] * ms} for s in own for r in range(4)])
        wi = pa.Table.from_pylist([{"rank": r, "step": s, "saving_ns": save[s][r] * ms} for s in save for r in range(4)])
        return SimpleNamespace(sched=sched, own_steps=steps, steps=sched, excluded=(), peers=lambda r: None,
                               results={"critical_path": Result("critical_path", tables={"what_if": wi})})

    b = Bound(rank=2, cost_ns=4.66 * ms, noise_ns=0.3 * ms, step_ns=45.4 * ms, steps=5, of_steps=8,
              bounded=[3, 4, 5, 8, 9])
    here = ctx(runq)
    assert host_bounded(here.results, b, here.steps) == 4  # steps 3, 5, 8, 9 (step 4: 9.5 ms against 9.8 ms)
    assert contended(here, b)
    # the same run-queue wait, a step later: in the steps it bounds rank 2 waited no longer than the others
    later = {s: runq[s - 1] if s > 2 else runq[9] for s in runq}
    moved = ctx(later)
    assert host_bounded(moved.results, b, moved.steps) < 3
    assert not contended(moved, b)


def test_a_rules_candidate_whose_extra_time_was_waiting_for_a_cpu_is_not_kept_where_the_path_starved():
    """bench/workloads.py seed 2793 run 20 (a healthy FSDP2 job at 4 ranks on 2 CPUs): the path's rank 0 waited for a
    CPU longer than it saved, so the path named nobody and kept the rules' rank 2 (+11 % own time) unchecked: "rank 2
    is slow: contention, ... costs 0.6 ms per step (0%)". Its CPU time was -0.6 ms per step against the others', its
    run-queue wait +11.0 ms. The test the path's rank gets applies to it too; a rank with extra CPU work of its own
    is still kept."""
    from types import SimpleNamespace

    from rankscope.analysis.diagnosis.path_choice import waited_for_cpu

    ms = 1e6
    # seed 2793 run 20, ms per step and rank 0-3: own time, CPU time, run-queue wait
    own = {1: (42.3, 45.0, 55.6, 46.4), 2: (78.5, 52.4, 61.3, 51.9), 3: (51.5, 64.6, 43.7, 52.0),
           4: (53.9, 63.3, 64.0, 59.1), 5: (63.8, 47.7, 64.3, 53.6), 6: (53.0, 54.5, 57.6, 52.7)}
    cpu = {1: (43.5, 42.6, 46.5, 46.8), 2: (50.4, 47.9, 46.8, 48.1), 3: (46.2, 50.7, 43.3, 43.8),
           4: (47.0, 52.4, 51.4, 51.2), 5: (49.3, 45.8, 45.1, 49.0), 6: (50.1, 47.9, 50.5, 49.3)}
    runq = {1: (19.4, 21.9, 29.4, 13.0), 2: (46.8, 31.3, 42.1, 23.4), 3: (28.1, 23.7, 22.0, 36.1),
            4: (28.7, 26.0, 36.3, 29.2), 5: (47.9, 19.0, 42.6, 27.1), 6: (24.7, 15.6, 35.0, 12.5)}

    def ctx(cpu2: float = 0.0) -> SimpleNamespace:
        sched = pl.DataFrame([{"rank": r, "step": s, "cpu_ns": (cpu[s][r] + (cpu2 if r == 2 else 0.0)) * ms,
                               "runq_wait_ns": runq[s][r] * ms} for s in own for r in range(4)])
        steps = pl.DataFrame([{"rank": r, "step": s, "own": (own[s][r] + (cpu2 if r == 2 else 0.0)) * ms}
                              for s in own for r in range(4)])
        return SimpleNamespace(sched=sched, own_steps=steps, peers=lambda r: None)

    assert waited_for_cpu(ctx(), 2)
    assert not waited_for_cpu(ctx(), 3)  # less own time than the others: nothing to split
    assert not waited_for_cpu(ctx(cpu2=10.0), 2)  # 10 ms more CPU work of its own per step: its work, not the host


def test_the_rules_candidate_is_rescued_only_where_the_steps_left_out_were_another_ranks_wait_for_a_cpu():
    """tests/e2e/test_demo.py's host straggler beside the other pytest worker's jobs: rank 1 +83 % own time bounded 3
    of 6 steps, rank 0 (58-65 ms of run-queue wait per step) the other 3: "no straggler". With those 3 steps left out
    (``bound.without_host_steps``) rank 1 bounds 3 of 3 by 28.8 ms and the rules' candidate stands. Nothing else is
    rescued: a candidate under the twin spread, another rank than the one left bounding, fewer than half the steps
    left, or a bounding rank that itself waited for a CPU longer than its saving (``starved``)."""
    from types import SimpleNamespace

    from rankscope.analysis.diagnosis.bound import Bound
    from rankscope.analysis.diagnosis.path_choice import rescued

    ms = 1e6

    def ctx(cand_rank: int, rel: float, runq1: float = 25.0) -> SimpleNamespace:
        rows = [(r, s, 73.2 if r == 1 else 40.0, 50.0 if r == 1 else 40.0, runq1 if r == 1 else 60.0)
                for r in (0, 1) for s in range(6)]
        return SimpleNamespace(
            peers=lambda r: None, pr=pl.DataFrame({"rank": [0, 1], "own": [40.0 * ms, 73.2 * ms]}),
            sched=pl.DataFrame([{"rank": r, "step": s, "cpu_ns": c * ms, "runq_wait_ns": q * ms}
                                for r, s, _, c, q in rows]),
            own_steps=pl.DataFrame([{"rank": r, "step": s, "own": o * ms} for r, s, o, _, _ in rows]),
            rule_candidates=lambda: [(cand_rank, rel, "ratio", 1.0)], results={})

    b = Bound(rank=0, cost_ns=9.0 * ms, noise_ns=0.0, step_ns=120.0 * ms, steps=3, of_steps=6,
              savings={0: 9.0 * ms, 1: 8.0 * ms})
    hb = Bound(rank=1, cost_ns=28.8 * ms, noise_ns=0.0, step_ns=120.0 * ms, steps=3, of_steps=3,
               savings={0: 0.0, 1: 28.8 * ms}, host_steps=3)
    got, keep, note = rescued(ctx(1, 0.83), hb, b, "a note")
    assert (got.rank, keep, note) == (1, [(1, 0.83, "ratio", 1.0)], "")
    for c, h in ((ctx(1, 0.15), hb),  # under the twin spread (+20 %)
                 (ctx(0, 0.83), hb),  # the rules' candidate is not the rank left bounding the steps
                 (ctx(1, 0.83), Bound(**{**hb.__dict__, "of_steps": 2, "host_steps": 4})),  # a third of the steps left
                 # rank 1 itself waited 50 ms per step more for a CPU, 35 ms beyond what its +10 ms CPU brings at
                 # rank 0's rate (1.5 ms per CPU ms), over its 28.8 ms saving: starved
                 (ctx(1, 0.83, runq1=110.0), hb),
                 (ctx(1, 0.83), Bound(**{**hb.__dict__, "host_steps": 0})),  # nothing was left out
                 (ctx(1, 0.83), None)):
        assert rescued(c, h, b, "a note") == (b, [], "a note")


def test_more_input_work_with_more_ranks_than_cpus_is_found_on_cpu_time():
    """bench/workloads.py seed 2771 run 18 (DDP LM, 4 ranks on 2 CPUs; rank 1 with 1.37x longer sequences, +4.2 ms of
    CPU per step by the job's timers): own time 29.5 / 35.5 / 36.9 / 36.5 ms (ranks 2 and 3 waited 3-4 ms more for a
    CPU), so the own-time input rule saw rank 1 at -3 %; its training thread's CPU time 24.0 against 19.1-20.1 ms,
    +29 % input elements, last at 5 of 8 collectives: "no straggler (... an input imbalance that cost no time)"."""
    from rankscope.analysis.diagnosis.candidates import more_input

    ms = 1e6
    pr = pl.DataFrame({"rank": [0, 1, 2, 3], "own": [29.5 * ms, 35.5 * ms, 36.9 * ms, 36.5 * ms]})
    cpu = {0: 19.5 * ms, 1: 24.0 * ms, 2: 19.1 * ms, 3: 20.1 * ms}
    work = lambda r: {"shapes_recorded": True, "work_ratio": 1.29 if r == 1 else 1.0}  # noqa: E731
    last = lambda r: 0.625 if r == 1 else 0.125  # noqa: E731
    assert more_input(pr, work, last) == []  # own time alone: rank 1 under the others
    found = more_input(pr, work, last, cpu)
    assert [(i, t) for i, _, t in found] == [(1, "input work (cpu time)")]
    assert abs(found[0][1] - (24.0 / 19.5 - 1)) < 1e-9
    assert more_input(pr, work, lambda r: 0.25, cpu) == []  # the others did not wait for it
    assert more_input(pr, lambda r: {"shapes_recorded": True, "work_ratio": 1.05}, last, cpu) == []  # no extra input
    # +60 % input but only +23 % CPU time: under half of what the input predicts, not this rule's to say
    assert more_input(pr, lambda r: {"shapes_recorded": True, "work_ratio": 1.6 if r == 1 else 1.0}, last, cpu) == []
    assert more_input(pr, work, last, {0: 19.5 * ms, 1: 24.0 * ms}) == []  # CPU time of every rank, or none


def test_an_input_imbalance_on_more_ranks_than_cpus_is_named_with_its_extra_cpu_time(tmp_path):
    """tests/fixtures/runs/lm_oversubscribed (its README): rank 1 named an input imbalance on its CPU time, and
    the cost said is that extra CPU time, against the job's own timers (truth.json: 4.2 ms per step)."""
    import json
    import shutil

    from tests.helpers import straggler_note

    src = tmp_path / "run"  # a copy: the analysis writes its cache beside the run
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "lm_oversubscribed", src)
    truth = json.loads((src / "truth.json").read_text())
    st = run_all(load_run(src, jobs=1))["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((truth["slow_rank"],), "imbalance")], \
        st.summary["verdict"]
    f = st.findings[0]
    assert f.evidence["test"] == "input work (cpu time)"
    straggler_note(f)  # "..., CPU time +23% vs the other ranks' median, costs 4.8 ms per step (8%)"
    lost = f.evidence["time_lost"]["lost_per_step_ns"] / 1e6
    assert 0.7 < lost / truth["summary"]["extra_ms_per_step"] < 1.3, (lost, truth["summary"]["extra_ms_per_step"])


def test_a_pipeline_s_balanced_stages_deny_an_own_time_candidate():
    """bench/workloads.py seed 2843, pp-zbv-healthy at 4 ranks (ZB-V: rank 0 holds the first and the last stage): "rank
    0 is slow: compute, own time excluding CPU wait +29 %", where the stage model found the stages' thread CPU work
    within 1.05x of their mean: rank 0's extra own time was its waits inside the schedule's spans. A candidate on
    own time is dropped there, with a note; one that stands on counts or on data loading stays; an unbalanced
    pipeline, or no pipeline, leaves the candidates alone."""
    from types import SimpleNamespace

    from rankscope.analysis.base import Result
    from rankscope.analysis.diagnosis.path_choice import balanced_stages

    ms = 1_000_000

    def ctx(balanced: bool, data0: float = 1.0) -> SimpleNamespace:
        pipe = Result("pipeline", summary={"balanced": balanced, "stage_ranks": [[0], [1], [2], [3]], "imbalance": 1.05})
        return SimpleNamespace(results={"pipeline": pipe}, work_of=lambda r: None,
                               pr=pl.DataFrame({"rank": [0, 1, 2, 3], "own": [180.0 * ms, 140.0 * ms, 139.0 * ms,
                                                                               141.0 * ms],
                                                "data_wait": [data0 * ms, 1.0 * ms, 1.0 * ms, 1.0 * ms]}))

    found = [(0, 0.29, "ratio (cpu-available)", 1.0)]
    keep, note = balanced_stages(ctx(True), found)
    assert keep == [] and "rank 0" in note
    assert balanced_stages(ctx(False), found) == (found, "")  # the stage model names a heavy stage itself
    assert balanced_stages(SimpleNamespace(results={}, work_of=lambda r: None, pr=ctx(True).pr), found) == (found, "")
    assert balanced_stages(ctx(True), [(0, 0.29, "more calls", 1.0)])[0] == [(0, 0.29, "more calls", 1.0)]
    assert balanced_stages(ctx(True, data0=35.0), found) == (found, "")  # 34 ms of its 40 ms excess: data loading


def test_a_path_rank_whose_own_extra_cpu_time_is_half_its_saving_is_not_starved():
    """rankscope.demo.workloads.pipeline --dp 2 --straggler data (1F1B, 2 stages x 2 replicas, 4 ranks on 2 CPUs):
    rank 1 loaded data 17.5 ms longer per step (its timers); per step it used 24.2 ms more CPU and waited 48.8 ms
    more for one than the other ranks, and saved 20.4 ms on the path in 5 of 6 steps. Its unexplained wait (35.2 ms)
    is over the saving, but its own extra CPU work alone is more than it: it is not starved. The same waits with no
    CPU excess of its own are (tests/e2e/test_demo.py's case: a rank that only waited for a CPU)."""
    from types import SimpleNamespace

    from rankscope.analysis.diagnosis.bound import Bound
    from rankscope.analysis.diagnosis.path_choice import starved

    ms = 1e6

    def ctx(cpu1: float) -> SimpleNamespace:
        # own = CPU + run-queue wait + blocked; the others: 27.3 ms CPU, 15.4 ms run-queue wait
        rows = [(r, s, cpu1 if r == 1 else 27.3, 64.2 if r == 1 else 15.4) for r in range(4) for s in range(6)]
        sched = pl.DataFrame([{"rank": r, "step": s, "cpu_ns": c * ms, "runq_wait_ns": q * ms} for r, s, c, q in rows])
        own = pl.DataFrame([{"rank": r, "step": s, "own": (c + q + 5.0) * ms} for r, s, c, q in rows])
        return SimpleNamespace(sched=sched, own_steps=own, peers=lambda r: None)

    b = Bound(rank=1, cost_ns=20.4 * ms, noise_ns=0.0, step_ns=99.9 * ms, steps=5, of_steps=6)
    assert not starved(ctx(51.5), b)  # +24.2 ms of its own CPU work
    assert starved(ctx(27.5), b)  # +0.2 ms: the saving was the run queue's


def test_a_rank_s_cpu_waits_are_compared_with_its_replicas():
    """``cpu.wait_excess`` with ``peers``: a pipeline stage's rank against its replicas only (the other stage runs
    other layers: its CPU time says nothing of this rank's own extra work)."""
    from rankscope.analysis.diagnosis.cpu import wait_excess

    ms = 1e6
    cpu = {0: 28.0, 1: 28.0, 2: 28.0, 3: 20.5}  # stage 0: ranks 0, 1 (heavier layers); stage 1: ranks 2, 3
    rows = [(r, s) for r in range(4) for s in range(6)]
    sched = pl.DataFrame([{"rank": r, "step": s, "cpu_ns": cpu[r] * ms, "runq_wait_ns": 5 * ms} for r, s in rows])
    own = pl.DataFrame([{"rank": r, "step": s, "own": (cpu[r] + 5) * ms} for r, s in rows])
    every = wait_excess(sched, 2, own)
    mates = wait_excess(sched, 2, own, [3])
    assert every is not None and mates is not None
    assert every["cpu_excess_ns"] == 0  # against the median of ranks 0, 1, 3: 28 ms
    assert mates["cpu_excess_ns"] == round(7.5 * ms)  # against its replica, rank 3


def test_a_stage_named_by_the_stage_model_with_more_calls_is_compute_whatever_its_gaps_did():
    """A heavy pipeline stage (the stage model's thread CPU work) whose gaps between operators grew more than its
    compute on a busy host: its extra operator calls (a count) say compute. Without more calls, or for another
    cause, the components' reading stands."""
    from rankscope.analysis.diagnosis.stage_verdict import stage_cause

    assert stage_cause("host", 12.0e6, 2.0) == "compute"
    assert stage_cause("unclear", 12.0e6, 2.0) == "compute"
    assert stage_cause("host", 0.0, 1.0) == "host"  # a Python loop of its own: no extra calls
    assert stage_cause("host", 12.0e6, 1.0) == "host"
    assert stage_cause("data", 12.0e6, 2.0) == "data"
    assert stage_cause("contention", 12.0e6, 2.0) == "contention"


def test_cpu_time_is_not_the_work_beside_an_intra_op_pool(tmp_path):
    """The same lm_saturated run, its windows saying torch ran 4 intra-op threads (as rankscope.profile records since
    2026-11-29): the operators' work then runs on the pool's threads too, and the training thread's CPU time is a part
    of it. The input imbalance read from CPU time above, and its CPU-time cost, are not drawn; the verdict says why."""
    import json
    import shutil

    from rankscope.analysis.diagnosis.cpu import cpu_run, many_intra_op_threads

    src = tmp_path / "run"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "runs" / "lm_saturated", src)
    for meta in src.glob("ranks/*/meta.json"):
        doc = json.loads(meta.read_text())
        for w in doc["windows"]:
            w["sched"]["intra_op_threads"] = 4
        meta.write_text(json.dumps(doc))
    run = load_run(src, jobs=1)
    assert many_intra_op_threads(run) == 4 and not cpu_run(run)
    st = run_all(run)["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((1,), "unclear")], st.summary["verdict"]
    assert "CPU time" not in st.findings[0].evidence["time_lost"]["method"]
    assert any("4 intra-op threads" in line for line in st.summary["limits"]), st.summary["limits"]
