"""The ``pipeline`` analysis on small runs built here, whose schedule is known to the microsecond.

``gpipe_run`` writes the Kineto traces a GPipe pipeline of p stages (one rank each) and m microbatches
leaves on gloo, event by event as torch 2.13 writes them (checked on the traces of
rankscope.demo.workloads.pipeline; ``rankscope/model/comm_issue.py``): on the training thread,
``ProfilerStep#N``, the schedule's ``Forward i`` / ``Backward i`` spans, for each receive or send a
``c10d::recv_`` / ``c10d::send`` op (Concrete Inputs ``['', '', '<peer>', '<tag>']``) and inside it the
``gloo:recv`` / ``gloo:send`` span that ends when ``wait()`` returns, and the stage's own operators.

The times come from the schedule itself: stage s runs forward i when its previous op ended and stage s-1's
forward i arrived, backward i when stage s+1's backward i arrived; a step ends on each rank with its last
backward (stage 0 last) and the next step's forward starts there. With equal stages the idle share of
every stage is the natural bubble (p-1)/(m+p-1) of a pipeline (GPipe, Huang et al. 2019), up to the 4 µs
each op spends in its send / receive calls. Stages sit on ranks in a shuffled order, so their order can
only come from the point-to-point pairs.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rankscope.analysis.base import Severity
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import tiny_run, write_trace, x

EDGE = 2.0  # µs of each op's slot in its receive (start) and its send (end)


def _schedule(work: list[tuple[float, float]], m: int) -> tuple[list[list[tuple[str, int, float, float]]], float]:
    """Per stage its ops (F|B, microbatch, start, end) relative to the step's first forward, and the period
    (stage 0's last backward ends it). ``work``: per stage the (forward, backward) µs of one microbatch."""
    p = len(work)
    ops: list[list[tuple[str, int, float, float]]] = [[] for _ in range(p)]
    free = [0.0] * p
    f_end = [[0.0] * m for _ in range(p)]
    for i in range(m):
        for s in range(p):
            a = max(free[s], f_end[s - 1][i] if s else 0.0)
            f_end[s][i] = free[s] = a + work[s][0]
            ops[s].append(("F", i, a, free[s]))
    b_end = [[0.0] * m for _ in range(p)]
    for i in range(m):
        for s in reversed(range(p)):
            a = max(free[s], b_end[s + 1][i] if s < p - 1 else 0.0)
            b_end[s][i] = free[s] = a + work[s][1]
            ops[s].append(("B", i, a, free[s]))
    return ops, free[0]


def _rank_events(s: int, order: list[int], ops: list[tuple[str, int, float, float]], period: float,
                 steps: int, gap: float = 0.0) -> list[dict[str, Any]]:
    """With ``gap`` > 0, the sends are waited as torch's ScheduleGPipe waits them (all of a phase's at its
    end) and each op's own work is two operators with ``gap`` of its slot between them (Python time)."""
    p, evs = len(order), []
    last = ops[-1][3]  # this stage's step ends with its last backward; the next one starts there
    phase_end = {act: max(e for a2, _, _, e in ops if a2 == act) for act in ("F", "B")}
    for k in range(steps):
        base = 1000.0 + k * period
        start = base + last - period
        evs.append(x(f"ProfilerStep#{k + 1}", start, period, cat="user_annotation"))
        prev = start
        for act, i, a, e in ops:
            a, e = base + a, base + e
            src = s - 1 if act == "F" else s + 1  # whom the input comes from
            dst = s + 1 if act == "F" else s - 1
            evs.append(x(f"{'Forward' if act == 'F' else 'Backward'} {i}", prev, e - prev, cat="user_annotation"))
            if 0 <= src < p and not (act == "B" and s == p - 1):
                evs += [x("c10d::recv_", prev, 1.0, **{"Concrete Inputs": ["", "", str(order[src]), "0"]}),
                        x("gloo:recv", prev + 0.5, a + EDGE - prev - 0.5, cat="user_annotation")]
            own = e - a - 2 * EDGE
            if gap:
                half = (own - gap * (e - a)) / 2
                evs += [x("aten::mm", a + EDGE, half), x("aten::mm", e - EDGE - half, half)]
            else:
                evs.append(x("aten::mm", a + EDGE, own))
            if 0 <= dst < p and not (act == "F" and s == p - 1):
                waited = base + phase_end[act] if gap else e  # when wait() returns
                evs += [x("c10d::send", e - EDGE, 1.0, **{"Concrete Inputs": ["", "", str(order[dst]), "0"]}),
                        x("gloo:send", e - EDGE + 0.5, waited - e + EDGE - 0.5, cat="user_annotation")]
            prev = e
    return evs


def gpipe_run(root: Path, work: list[tuple[float, float]], m: int, order: list[int], steps: int = 3,
              layout: dict[str, int] | None = None, gap: float = 0.0) -> tuple[Path, float]:
    """A run of a GPipe pipeline: stage s on rank ``order[s]``; returns the directory and the step (µs)."""
    ops, period = _schedule(work, m)
    world = len(order)
    for s, r in enumerate(order):
        d = root / "ranks" / str(r)
        write_trace(d / f"rank{r}.pt.trace.json", _rank_events(s, order, ops[s], period, steps, gap), rank=r, world=world)
        meta = {"format": "rankscope.meta/1", "run_id": root.name, "rank": r, "world_size": world, "host": "node-0",
                "device": "cpu", "clock": {"anchors": [], "offset_to_rank0_ns": 0, "offset_error_ns": 1000}}
        (d / "meta.json").write_text(json.dumps(meta))
    run = {"format": "rankscope.run/1", "run_id": root.name, "world_size": world, "ranks_expected": list(range(world)),
           "hosts": ["node-0"], **({"layout": layout} if layout else {})}
    (root / "run.json").write_text(json.dumps(run))
    return root, period


@pytest.mark.parametrize("p,m,gap", [(2, 4, 0.0), (3, 8, 0.0), (2, 8, 0.3)])
def test_balanced_gpipe_bubble_is_the_natural_one(tmp_path, p, m, gap):
    """gap 0.3: sends waited at the end of each phase, 30 % of each op's slot outside any operator: still own time."""
    order = [2, 0, 1][:p] if p == 3 else [1, 0]
    root, period = gpipe_run(tmp_path / "run", [(1000.0, 2000.0)] * p, m, order, gap=gap)
    res = run_all(load_run(root, jobs=1))
    r = res["pipeline"]
    assert r.skipped is None, r.skipped
    s = r.summary
    assert s["stage_ranks"] == [[o] for o in order] and s["stages_from"] == "p2p"  # no layout: the pairs
    assert (s["microbatches"], s["schedule"], s["schedule_from"]) == (m, "GPipe", "spans")
    natural = (p - 1) / (m + p - 1)
    assert s["expected_bubble_share"] == pytest.approx(natural)
    fb = 3000e3  # ns of forward + backward of one microbatch
    for row in s["per_stage"]:
        st = row["stage"]
        assert row["step_ns"] == pytest.approx(period * 1e3, abs=10)
        assert row["bubble_share"] == pytest.approx(natural, abs=0.01), row  # up to the 4 µs per op in calls
        # stage s waits s (f + b) for activations (the fill, and the previous step's drain) and the rest for gradients
        assert row["fwd_wait_ns"] == pytest.approx(st * fb, rel=0.02, abs=50e3), row
        assert row["bwd_wait_ns"] == pytest.approx((p - 1 - st) * fb, rel=0.02, abs=50e3), row
    assert s["balanced"] and s["imbalance"] < 1.01
    assert "pipeline_bottleneck" not in [f.kind for f in r.findings]
    bubble = next(f for f in r.findings if f.kind == "pipeline_bubble")
    assert bubble.evidence["natural"] is True
    adv = res["advice"].findings
    kinds = [f.kind for f in adv]
    assert "advice.pipeline_balance" not in kinds and "advice.pipeline_bubble" in kinds
    assert "advice.pipeline_schedule" in kinds  # GPipe: 1F1B / interleaved said
    assert not {"advice.exposed_comm", "advice.missing_overlap"} & set(kinds)  # a bubble is no DDP communication
    assert all(f.severity == Severity.INFO for f in adv if f.kind.startswith("advice.pipeline"))


def test_unbalanced_stage_is_the_bottleneck_and_its_cost_is_the_schedule_s(tmp_path):
    """Stage 1 (rank 0) does twice the work: the schedule's step is Σ w + (m-1)·max w (flow shop of identical
    jobs), and with the same work spread evenly Σ w + (m-1)·mean w: the bottleneck's cost is their difference."""
    m, work = 8, [(1000.0, 2000.0), (2000.0, 4000.0), (1000.0, 2000.0)]
    root, period = gpipe_run(tmp_path / "run", work, m, [2, 0, 1], layout={"pp": 3})
    res = run_all(load_run(root, jobs=1))
    s = res["pipeline"].summary
    w = [f + b for f, b in work]
    assert period == sum(w) + (m - 1) * max(w)  # the simulated schedule obeys the model
    assert s["bottleneck_stage"] == 1 and s["stage_ranks"][1] == [0] and not s["balanced"]
    cost_ms = (m - 1) * (max(w) - sum(w) / len(w)) / 1e3
    assert s["cost_ms"] == pytest.approx(cost_ms, rel=0.03)
    assert s["step_ms"] == pytest.approx(period / 1e3, rel=1e-4)
    # the replay of torch's GPipe program on the measured work gives the step the trace holds; each receive
    # here returns 2·EDGE after its send was posted (the sender's send op opens EDGE before its op's end)
    assert s["model"] == "replay of torch's GPipe schedule"
    assert s["model_step_ms"] == pytest.approx(period / 1e3, rel=1e-3)
    assert s["hop_latency_ms"] == pytest.approx(2 * EDGE / 1e3, abs=1e-4)
    assert s["bottleneck_work_share"] == pytest.approx(0.5, abs=0.01)
    # the layout says pp=3 on contiguous ranks 0,1,2; the traffic says 2 -> 0 -> 1: the traffic wins, and says so
    assert s["stages_from"] == "p2p" and any("layout says pp=3" in n for n in s["notes"])
    found = {f.kind: f for f in res["pipeline"].findings}
    assert found["pipeline_bottleneck"].ranks == (0,)
    balance = next(f for f in res["advice"].findings if f.kind == "advice.pipeline_balance")
    assert balance.ranks == (0,) and balance.evidence["bottleneck_stage"] == 1
    assert balance.severity == (Severity.CRITICAL if s["cost_share"] >= 0.25 else Severity.WARNING)


def test_no_pipeline_no_word(tmp_path):
    """A data-parallel run (all_reduce only): skipped with its reason, no line in the terminal, no advice."""
    from rankscope.render.terminal import pipeline_lines

    res = run_all(load_run(tiny_run(tmp_path / "dp"), jobs=1))
    assert res["pipeline"].skipped and "not a pipeline" in res["pipeline"].skipped
    assert pipeline_lines(res) == []
    assert not [f for f in res["advice"].findings if f.kind.startswith("advice.pipeline")]


def test_report_has_the_pipeline_view(tmp_path):
    """The report gets a "Pipeline" view with the stages table on a pipeline run, and none without one."""
    from rankscope.render.html import build

    root, _ = gpipe_run(tmp_path / "run", [(1000.0, 2000.0)] * 2, 4, [1, 0])
    run = load_run(root, jobs=1)
    page = build(run, run_all(run))
    view = page.split('id="view-pipeline"')[1].split('<div class="view"')[0]
    assert "Pipeline stages and bubbles" in view and "natural bubble (p-1)/(m+p-1)" in view
    assert view.count("<tr") >= 1 + 2  # the stages table: a header and one row per stage
    assert 'href="#pipeline"' in page
    dp = load_run(tiny_run(tmp_path / "dp"), jobs=1)
    assert 'id="view-pipeline"' not in build(dp, run_all(dp))


@pytest.mark.parametrize("coll_ms,kept", [(0.0, False), (30.0, True)])
def test_exposed_comm_advice_only_for_collectives_beside_the_pipeline(coll_ms, kept):
    """Seen on real GPipe runs (bench/pipeline_twins.py, 2 of 3 unbalanced runs): the breakdown booked 30 ms of a
    stage's step as exposed communication while its waits were 10 ms (sends still in flight while it computed),
    and the DDP rule "exposed communication" fired, critical. That advice stays only where another collective
    (an all-reduce beside the pipeline) was in flight long enough to pass the rule's own bar (10 % of the step)."""
    import pyarrow as pa

    from rankscope.analysis.base import Finding, Result
    from rankscope.analysis.diagnosis.advice import RULES
    from rankscope.analysis.diagnosis.pipeline_advice import shape_advice

    ms = 1_000_000
    bd = pa.Table.from_pylist([{"rank": 0, "step": k, "wall": 100 * ms, "comm_exposed": 30 * ms,
                                "communication": 80 * ms, "complete": True} for k in (1, 2, 3)])
    ranks = pa.Table.from_pylist([{"rank": 0, "step": k, "bubble_ns": 10 * ms, "p2p_ns": 80 * ms,
                                   "coll_ns": int(coll_ms * ms)} for k in (1, 2, 3)])
    results = {"breakdown": Result("breakdown", tables={"breakdown": bd}),
               "pipeline": Result("pipeline", tables={"ranks": ranks}, summary={"stages": 2, "stage_ranks": [[0], [1]]})}
    f = Finding("advice.exposed_comm", "exposed communication ...", Severity.CRITICAL, (0,), {"share": {"0": 0.3}})
    out = [g for g in shape_advice(results, [f], RULES) if g.kind == f.kind]
    assert bool(out) is kept
    # "barely overlaps": its 80 ms of communication were all sends and receives in flight, the pipeline's own
    late = Finding("advice.missing_overlap", "communication barely overlaps ...", Severity.WARNING, (0,),
                   {"comm_share": {"0": 0.8}, "overlap": {"0": 0.0}})
    assert not [g for g in shape_advice(results, [late], RULES) if g.kind == late.kind]
    if kept:  # restated on what is left: min(exposed 30 - bubble 10, collectives in flight 30) = 20 ms of 100
        assert out[0].evidence["share"] == {"0": 0.2} and out[0].evidence["with_pipeline_waits_share"] == {"0": 0.3}
        assert out[0].severity == Severity.WARNING and out[0].ranks == (0,)  # 20 %: under 3x the rule's 10 %


def test_json_names_the_bubble_per_stage_and_step(tmp_path):
    """``rankscope analyze RUN --json``: analyses.pipeline.summary.bubble holds one entry per stage and step, each
    with the step's waits in ms (the natural bubble here: (p-1)/(m+p-1) of the 12 ms step, up to the calls' µs)."""
    import subprocess
    import sys

    p, m, steps = 2, 4, 3
    root, period = gpipe_run(tmp_path / "run", [(1000.0, 2000.0)] * p, m, [1, 0], steps=steps)
    proc = subprocess.run([sys.executable, "-m", "rankscope.cli", "analyze", str(root), "--json", "--jobs", "1"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = json.loads(proc.stdout)["analyses"]["pipeline"]["summary"]
    rows = s["bubble"]
    assert sorted((r["stage"], r["step"]) for r in rows) == [(st, k) for st in range(p) for k in range(1, steps + 1)]
    natural_ms = (p - 1) / (m + p - 1) * period / 1e3
    assert all(r["bubble_ms"] == pytest.approx(natural_ms, abs=0.05) for r in rows), rows
    assert all(r["bubble_ms"] == pytest.approx(r["fwd_wait_ms"] + r["bwd_wait_ms"] + r["send_wait_ms"], abs=0.01)
               for r in rows)


def test_the_group_of_a_send_the_trace_does_not_name():
    """gloo's trace names a send's peer by its rank in the group ("Concrete Inputs" [.., "1", "0"]) and not the
    group. Rank 0 of a 2 x 2 (pp, dp) job is in the world, [0, 2] (its pipeline) and [0, 1] (its stage's replicas):
    peer "1" is rank 2 through its pipeline, rank 1 through the others. The pipeline's group comes from a
    description that names it (DeviceMesh's "mesh_pp", Megatron's "PIPELINE_MODEL_PARALLEL_GROUP"), else from the
    layout (pp outermost), and only when the trace lists that group; else it stays unknown."""
    from rankscope.model.comm_issue import p2p_group

    def cfg(*groups: tuple[str, list[int]]) -> list[dict]:
        return [{"pg_name": str(i), "pg_desc": d, "ranks": r} for i, (d, r) in enumerate(groups)]

    plain = cfg(("default_pg", [0, 1, 2, 3]), ("undefined", [0, 2]), ("undefined", [0, 1]))
    assert p2p_group(plain, {"pp": 2, "dp": 2}, 0) == [0, 2]
    assert p2p_group(plain, {"pp": 2}, 0) == [0, 2]  # the other dimensions follow from the world
    assert p2p_group(plain, None, 0) is None and p2p_group(plain, {"dp": 4}, 0) is None
    assert p2p_group(plain, {"pp": 4}, 0) is None  # one stage per rank: the world is the pipeline
    assert p2p_group(plain, {"pp": 2, "dp": 2}, None) is None
    # the layout's group must be one the trace lists: with dp outermost the pipeline of rank 0 is [0, 1]
    assert p2p_group(cfg(("default_pg", [0, 1, 2, 3]), ("undefined", [0, 1]), ("undefined", [0, 2])),
                     {"pp": 2}, 1) is None
    mesh = cfg(("default_pg", [0, 1, 2, 3]), ("mesh_dp", [0, 1]), ("mesh_pp", [0, 2]))
    assert p2p_group(mesh, None, 0) == [0, 2]
    megatron = cfg(("default_pg", list(range(8))), ("PIPELINE_MODEL_PARALLEL_GROUP", [0, 4]),
                   ("DATA_PARALLEL_GROUP", [0, 2]), ("TENSOR_MODEL_PARALLEL_GROUP", [0, 1]))
    assert p2p_group(megatron, None, 0) == [0, 4]
    assert p2p_group(cfg(("default_pg", [0, 1, 2, 3]), ("app", [0, 2])), None, 0) is None  # "app": not "pp"


def test_a_runtime_schedule_s_cost_is_a_replay_of_the_trace_s_own_order():
    """Interleaved 1F1B at 2 ranks (torch's own order, as the trace's "PP:..." spans give it): with the ranks' work
    as measured the replay is the runtime's own program; balanced it costs nothing. Rank 0 (the first) with twice
    the work of each of its stages never waits, so the step is its own work; balanced, each rank at the mean, the
    step is interleaved 1F1B's published one, m·(t_f + t_b) + (p - 1)·(t_f + t_b) / v (Narayanan et al. 2021)."""
    from types import SimpleNamespace

    import torch.distributed.pipelining.schedules as ts

    from rankscope.analysis.diagnosis import pipeline_replay as pr
    from rankscope.analysis.diagnosis.pipeline import _runtime_steps

    p, m = 2, 4
    ns = SimpleNamespace(n_local_stages=2, pp_group_size=p, _n_microbatches=m, number_of_rounds=2,
                         microbatches_per_round=2)
    kinds = {"FORWARD": "F", "FULL_BACKWARD": "B"}
    orders = {r: [(kinds[a.computation_type.name], a.stage_index, a.microbatch_index)
                  for a in ts.ScheduleInterleaved1F1B._calculate_single_rank_operations(ns, r) if a is not None]
              for r in range(p)}

    def work(own: dict[tuple[int, str], float]) -> dict[int, float]:
        return {r: sum(own[(s, a)] for a, s, _ in o) for r, o in orders.items()}

    even = {(s, a): (1.0 if a == "F" else 2.0) for s in range(4) for a in "FB"}
    as_is, balanced, how = _runtime_steps((orders, even), work(even), [0.0, 0.0], m, 0.0) or (0, 0, "")
    assert as_is == balanced == pr.replay(pr.runtime_programs([orders[0], orders[1]], even) or [])
    assert how == "replay of the schedule's own order in the trace"
    heavy = {(s, a): v * (2 if s % 2 == 0 else 1) for (s, a), v in even.items()}  # rank 0 holds stages 0 and 2
    got = _runtime_steps((orders, heavy), work(heavy), [0.0, 0.0], m, 0.0)
    assert got is not None
    w = work(heavy)
    t = (w[0] + w[1]) / 2 / m  # per microbatch, one rank's forwards and backwards at the mean
    assert got[:2] == pytest.approx((w[0], m * t + (p - 1) * t / 2))


def test_a_stage_s_own_work_is_its_faster_replica_s():
    """Two replicas of stage 0, one loading data 20 ms longer: the stage's own work is the faster one's (the lower
    median), while its step and waits stay the replicas' median."""
    import polars as pl

    from rankscope.analysis.diagnosis.pipeline import WAITS, _stage_steps

    rows = [{"rank": r, "stage": r // 2, "step": 1, "step_ns": 100, "bubble_ns": b, "work_ns": w, "cpu_ns": w,
             "optim_ns": 5, **{k: 0 for k in WAITS}} for r, w, b in ((0, 40, 60), (1, 60, 40), (2, 50, 50), (3, 52, 48))]
    out = _stage_steps(pl.DataFrame(rows), None).sort("stage")
    assert out["work_ns"].to_list() == [40, 50] and out["cpu_ns"].to_list() == [40, 50]
    assert out["bubble_ns"].to_list() == [50, 49]


def test_a_host_with_more_ranks_than_cpus_bounds_both_steps():
    """bench/pipeline_twins.py seed 2904, ZB-V at 4 ranks on one host with 2 CPUs: the ranks' threads used 83, 92,
    155 and 88 ms of CPU per step; no schedule runs that in less than 418 / 2 = 209 ms, balanced or not. A host with
    as many CPUs as ranks, or whose CPUs are unknown (a trace from before meta.json had them), bounds nothing."""
    from types import SimpleNamespace

    import polars as pl

    from rankscope.analysis.diagnosis.pipeline import cpu_floor

    def run(cpus: object) -> SimpleNamespace:
        return SimpleNamespace(ranks={r: SimpleNamespace(meta={"host": "node-0", "host_cpus": cpus}) for r in range(4)})

    cpu = {0: 83.2, 1: 91.8, 2: 155.3, 3: 88.3}
    ranks = pl.DataFrame([{"rank": r, "step": s, "cpu_ns": int((c + s) * 1e6)} for r, c in cpu.items() for s in range(3)])
    assert cpu_floor(run(2), ranks) == pytest.approx((sum(cpu.values()) + 4) / 2 * 1e6)  # the median step: s = 1
    assert cpu_floor(run(4), ranks) == 0.0 and cpu_floor(run(None), ranks) == 0.0
    assert cpu_floor(run(2), ranks.with_columns(cpu_ns=pl.lit(None, pl.Int64))) == 0.0


def test_a_compute_imbalance_on_a_pipeline_is_said_against_the_rank_s_replicas():
    """bench/workloads.py seed 3011, ppdp-1f1b (2 stages x 2 replicas, stage 0 with 2x the layers): the rule said
    "rank 0 computes 1.67x the other ranks' median", a ratio over both stages' layers; against rank 1, its replica,
    1.11x. Kept only between replicas, and said so; a finding already read as waiting is left as it was."""
    from rankscope.analysis.base import Finding
    from rankscope.analysis.diagnosis.advice import RULES
    from rankscope.analysis.diagnosis.pipeline_advice import _within_one_stage

    s = {"stage_ranks": [[0, 1], [2, 3]]}
    ms = 1_000_000

    def rule(rank0_ms: float, **ev: object) -> Finding:
        comp = {"0": rank0_ms * ms, "1": 170 * ms, "2": 110 * ms, "3": 110 * ms}
        return Finding("advice.dp_imbalance", "compute differs across ranks: rank 0 computes 1.43x ...",
                       Severity.WARNING, (0,), {"ratio": 1.43, "computing_ns": comp, **ev})

    got = _within_one_stage(rule(200), s, RULES)
    assert got is not None and got.evidence["ratio"] == pytest.approx(200 / 170, abs=1e-3)
    assert got.evidence["all_ranks_ratio"] == 1.43 and got.evidence["compared_with"] == [1] and got.evidence["stage"] == 0
    assert "pipeline stage 0" in got.title and "1.18x rank 1" in got.title and got.severity == Severity.WARNING
    assert _within_one_stage(rule(180), s, RULES) is None  # 1.06x its replica: under the rule's 1.10
    waited = rule(200, not_work=True)
    assert _within_one_stage(waited, s, RULES) is waited
    assert _within_one_stage(rule(200), {"stage_ranks": [[0], [1], [2], [3]]}, RULES) is None  # no replica
