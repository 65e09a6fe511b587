"""The pipeline replay (``rankscope.analysis.diagnosis.pipeline_replay``) against oracles it did not write.

- The order of each stage's forwards and backwards is torch's own: ``ScheduleGPipe._get_pipeline_order`` and
  ``Schedule1F1B._get_pipeline_order`` (torch.distributed.pipelining.schedules, the schedule IR that torch
  checks its runtime schedules against), read from the installed torch.
- GPipe's step is two flow shops of identical jobs back to back (forwards, then backwards in reverse stage
  order): Σ_s F_s + (m - 1)·max_s F_s + Σ_s B_s + (m - 1)·max_s B_s (Huang et al. 2019, GPipe; the same
  closed form as the permutation flow shop of identical jobs).
- 1F1B with equal stages has GPipe's bubble, (m + p - 1)(F + B) (Narayanan et al. 2019, PipeDream-Flush),
  is never longer than GPipe on the same work, and never shorter than its busiest stage, m·max_s(F_s + B_s).
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rankscope.analysis.diagnosis import pipeline_replay as pr

import torch.distributed.pipelining.schedules as torch_schedules  # noqa: E402


def _torch_order(name: str, p: int, m: int) -> dict[int, list[tuple[str, int]]]:
    """Per stage, torch's (F|B, microbatch) order from the schedule IR; reduce-grad and idle slots dropped."""
    cls = getattr(torch_schedules, name)
    order = cls._get_pipeline_order(SimpleNamespace(_num_stages=p, _n_microbatches=m))
    kinds = {"FORWARD": "F", "FULL_BACKWARD": "B"}
    return {s: [(kinds[a.computation_type.name], a.microbatch_index) for a in acts
                if a is not None and a.computation_type.name in kinds] for s, acts in order.items()}


@pytest.mark.parametrize("schedule,name", [("GPipe", "ScheduleGPipe"), ("1F1B", "Schedule1F1B")])
@pytest.mark.parametrize("p,m", [(2, 2), (2, 8), (3, 4), (4, 4), (4, 8), (5, 12)])
def test_each_stage_runs_torch_s_order(schedule, name, p, m):
    progs = pr.programs(schedule, [1.0] * p, [2.0] * p, m)
    assert progs is not None
    ours = {s: [(op, arg[0]) for op, arg in prog if op in ("F", "B")] for s, prog in enumerate(progs)}
    theirs = _torch_order(name, p, m)
    # The kinds in torch's order. Its IR numbers the last stage's 1F1B forwards from 1 (torch 2.13's
    # ``forward_mb`` starts at 0 and is incremented before its first use when there is no warm-up), while
    # the runtime (``Schedule1F1B._step_microbatches``) runs microbatches 0..m-1 in order of each kind.
    assert {s: [k for k, _ in acts] for s, acts in ours.items()} == {s: [k for k, _ in a] for s, a in theirs.items()}
    for acts in ours.values():
        assert [i for k, i in acts if k == "F"] == list(range(m)) == [i for k, i in acts if k == "B"]


works = st.lists(st.tuples(st.floats(0.1, 10.0), st.floats(1.0, 3.0)), min_size=2, max_size=6)


def _fb(work: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Per stage (forward, backward / forward) -> the forwards and the backwards."""
    return [a for a, _ in work], [a * r for a, r in work]


@settings(max_examples=200, deadline=None)
@given(works, st.integers(1, 12))
def test_gpipe_is_two_flow_shops(work, m):
    f, b = _fb(work)
    got = pr.step({"schedule": "GPipe", "fwd": f, "bwd": b}, m)
    assert got == pytest.approx(sum(f) + (m - 1) * max(f) + sum(b) + (m - 1) * max(b))


@settings(max_examples=200, deadline=None)
@given(works, st.integers(1, 12))
def test_1f1b_between_the_busiest_stage_and_gpipe(work, m):
    f, b = _fb(work)
    one = pr.step({"schedule": "1F1B", "fwd": f, "bwd": b}, m)
    gpipe = pr.step({"schedule": "GPipe", "fwd": f, "bwd": b}, m)
    assert one is not None and gpipe is not None
    assert m * max(x + y for x, y in zip(f, b)) - 1e-9 <= one <= gpipe + 1e-9


@pytest.mark.parametrize("p,m", [(2, 1), (2, 8), (4, 4), (4, 16), (6, 9)])
def test_1f1b_balanced_has_gpipe_s_bubble(p, m):
    assert pr.step({"schedule": "1F1B", "fwd": [1.0] * p, "bwd": [2.0] * p}, m) == pytest.approx((m + p - 1) * 3.0)


def test_1f1b_hides_a_fast_stage_behind_a_slow_first_one():
    """Stage 0 is slow: in 1F1B it never waits (its warm-up covers the fast stage's round trip), so the step
    is its own m·w0; GPipe adds the fast stage's forward and backward of the last microbatch. The what-if
    that took GPipe's model for both schedules overstated 1F1B's bottleneck by that much."""
    f, b, m = [8.0, 2.0], [16.0, 4.0], 8
    assert pr.step({"schedule": "1F1B", "fwd": f, "bwd": b}, m) == pytest.approx(m * 24.0)
    assert pr.step({"schedule": "GPipe", "fwd": f, "bwd": b}, m) == pytest.approx(m * 24.0 + 6.0)


def test_other_schedules_are_not_replayed():
    assert pr.step({"schedule": "interleaved 1F1B", "fwd": [1.0, 1.0], "bwd": [2.0, 2.0]}, 4) is None


tails = st.lists(st.floats(0.0, 30.0), min_size=6, max_size=6)


@settings(max_examples=150, deadline=None)
@given(works, tails, st.integers(1, 10), st.sampled_from(["GPipe", "1F1B"]))
def test_the_steady_step_with_an_optimizer_is_bounded_by_the_busiest_stage_and_one_isolated_step(work, tail, m, sched):
    """Steps back to back, each stage's optimizer (``tail``) after its microbatches. Each stage does all of its
    work every step, so the steady step is at least the busiest stage's; and a stage starts its next step no
    later than the latest end of one isolated step (the replay only moves a wait later when a post comes later),
    so it is at most that step's."""
    f, b = _fb(work)
    t = tail[:len(f)]
    got = pr.step({"schedule": sched, "fwd": f, "bwd": b, "tail": t}, m)
    alone = pr.replay([prog + [("T", (0, t[s]))] for s, prog in enumerate(pr.programs(sched, f, b, m) or [])])
    assert got is not None and alone is not None
    assert max(m * (x + y) + z for x, y, z in zip(f, b, t)) - 1e-6 <= got <= alone + 1e-6


@settings(max_examples=100, deadline=None)
@given(works, st.integers(1, 10), st.sampled_from(["GPipe", "1F1B"]))
def test_without_an_optimizer_the_steady_step_is_one_step(work, m, sched):
    """The first stage starts each step and, with its last backward, ends it: steps do not overlap."""
    f, b = _fb(work)
    got = pr.step({"schedule": sched, "fwd": f, "bwd": b, "tail": [0.0] * len(f)}, m)
    assert got == pytest.approx(pr.step({"schedule": sched, "fwd": f, "bwd": b}, m))


def test_a_slow_last_stage_s_optimizer_overlaps_the_first_stage_s_turn():
    """bench/pipeline_twins.py seed 2801, pair 0 (1F1B, 2 stages, the last one holding 16 layers against 4;
    rankscope analyze's stage table): per step, stage 0 worked 50.1 ms of wall time (46.9 ms of CPU time) of
    which its optimizer 2.5 ms, stage 1 155.3 ms (151.3 ms of CPU time) of which its optimizer 12.6 ms (AdamW's
    step after its last send); a message took 0.167 ms, 8 microbatches. The job's own perf_counter step (its
    truth.json, median over steps and ranks): 155.9 ms. One isolated step with the optimizer spread over the
    microbatches replayed 164.4 ms (+5.4 %): stage 1's optimizer runs while stage 0 does its last backward,
    its optimizer and the next step's first forward."""
    m, lat, scale = 8, 0.167, (50.11 + 155.3) / (46.88 + 151.29)
    work = [scale * 46.88, scale * 151.29]
    opt = [2.49, 12.56]
    spread = pr.step({"schedule": "1F1B", "fwd": [w / m / 3 for w in work], "bwd": [2 * w / m / 3 for w in work],
                      "latency": lat}, m)
    mb = [(w - o) / m for w, o in zip(work, opt)]
    steady = pr.step({"schedule": "1F1B", "fwd": [x / 3 for x in mb], "bwd": [2 * x / 3 for x in mb], "latency": lat,
                      "tail": opt}, m)
    measured = 155.9
    assert spread is not None and spread > 1.05 * measured
    assert steady is not None and abs(steady / measured - 1) < 0.02


# torch's runtime schedules (interleaved 1F1B, ZB-V): each rank's actions in torch's own order, from the schedule
# classes' ``_calculate_single_rank_operations`` (read from the installed torch; the attributes it reads are the
# ones each class's __init__ sets).
KINDS = {"FORWARD": "F", "FULL_BACKWARD": "B", "BACKWARD_INPUT": "I", "BACKWARD_WEIGHT": "W"}


def _runtime_order(name: str, p: int, m: int) -> list[list[tuple[str, int, int]]]:
    cls = getattr(torch_schedules, name)
    rounds = max(1, m // p)
    ns = SimpleNamespace(n_local_stages=2, pp_group_size=p, _n_microbatches=m, number_of_rounds=rounds,
                         microbatches_per_round=m // rounds, num_stages=2 * p)
    return [[(KINDS[a.computation_type.name], a.stage_index, a.microbatch_index)
             for a in cls._calculate_single_rank_operations(ns, r) if a is not None and a.computation_type.name in KINDS]
            for r in range(p)]


@pytest.mark.parametrize("p,m", [(2, 4), (2, 8), (3, 6), (4, 8), (4, 16)])
def test_interleaved_1f1b_in_torch_s_order_has_the_published_bubble(p, m):
    """Interleaved 1F1B with v stages per rank, each virtual stage's forward t_f / v and backward t_b / v: the step is
    m·(t_f + t_b) plus the bubble (p - 1)·(t_f + t_b) / v (Narayanan et al. 2021, Efficient Large-Scale Language
    Model Training on GPU Clusters Using Megatron-LM, section 2.2.2)."""
    order = _runtime_order("ScheduleInterleaved1F1B", p, m)
    durs = {(s, a): (1.0 if a == "F" else 2.0) for s in range(2 * p) for a in "FB"}  # t_f = 2, t_b = 4, v = 2
    assert pr.replay(pr.runtime_programs(order, durs) or []) == pytest.approx(m * 6.0 + (p - 1) * 6.0 / 2)


def _longest_path(order: list[list[tuple[str, int, int]]], durs: dict[tuple[int, str], float], lat: float) -> float:
    """The oracle: the longest path through the actions (networkx), each weighted by its time, with an edge from
    each action to the next on its rank and from the action whose output it takes (weighted by a message's latency
    where the two run on different ranks)."""
    import networkx as nx

    where = {stg: r for r, o in enumerate(order) for _, stg, _ in o}
    last = max(where)
    g = nx.DiGraph()
    done_by = {}  # (stage, F|G, microbatch) -> the action that sends it: an activation F, a gradient G
    for r, o in enumerate(order):
        for i, (a, s, mb) in enumerate(o):
            node = (a, s, mb)
            g.add_node(node)
            if i:
                g.add_edge(o[i - 1], node, w=durs[(o[i - 1][1], o[i - 1][0])])
            if a in ("F", "B", "I"):
                done_by[("F" if a == "F" else "G", s, mb)] = (node, r)
    for r, o in enumerate(order):
        for a, s, mb in o:
            src = ("F", s - 1, mb) if a == "F" and s > 0 else ("G", s + 1, mb) if a in ("B", "I") and s < last else None
            if src is not None:
                u, ru = done_by[src]
                g.add_edge(u, (a, s, mb), w=durs[(u[1], u[0])] + (lat if ru != r else 0.0))
    g.add_node("end")
    for a, s, mb in g.nodes - {"end"}:
        g.add_edge((a, s, mb), "end", w=durs[(s, a)])
    return float(nx.dag_longest_path_length(g, weight="w"))


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(["ScheduleInterleaved1F1B", "ScheduleZBVZeroBubble"]), st.integers(2, 4), st.integers(1, 3),
       st.lists(st.floats(0.1, 10.0), min_size=32, max_size=32), st.floats(0.0, 1.0))
def test_a_runtime_schedule_s_replay_is_the_longest_path_of_its_dependencies(name, p, rounds, times, lat):
    """The replay of torch's own order for any stage times equals the longest path through the same dependencies
    (a different algorithm: networkx on the graph), and never deadlocks."""
    m = p * rounds if name == "ScheduleInterleaved1F1B" else max(2 * p - 1, p * rounds)
    order = _runtime_order(name, p, m)
    durs = {(s, a): times[(4 * s + "FBIW".index(a)) % 32] for s in range(2 * p) for a in "FBIW"}
    got = pr.replay(pr.runtime_programs(order, durs) or [], lat)
    assert got is not None
    assert got == pytest.approx(_longest_path(order, durs, lat))


def test_a_runtime_schedule_whose_stage_has_no_time_is_not_replayed():
    assert pr.runtime_programs([[("F", 0, 0)], [("F", 1, 0)]], {(0, "F"): 1.0}) is None
