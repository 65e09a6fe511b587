"""The cause of a straggler's extra own time: the component of its step that explains it.

Pattern: per component (compute, data wait, host time between operators) the rank's median minus the
other ranks' median; the component carrying a good share of the extra time that grew most against its
usual size wins, with three corrections measured on real jobs (each at its constant below): blocked time
(sleeps, I/O) sits in a component that grew by most of it; extra operator calls (counts, no noise) make
it compute; more input work that explains the extra compute makes it an input imbalance. DDP's gradient
hooks growing on a host trace are communication. ``eligible`` narrows the components to those the rank's
own segments on the critical path hold (``bound.holds``).
"""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.base import frame
from rankscope.analysis.diagnosis.rules import COMPONENTS
from rankscope.analysis.diagnosis.work import CAUSE_SHARE, Work, is_input_imbalance
from rankscope.analysis.stats import as_float
from rankscope.model.run import Run

# A component explains the straggler when it carries at least this share of the extra time (CAUSE_SHARE,
# from rankscope.analysis.diagnosis.work) ...
# ... and among those, the one that grew most against its usual size wins (usual sizes below 5 % of
# the others' own time count as 5 %, so a near-zero component cannot win on noise). Why: on a
# shared host, a rank that is late for other reasons (5 ms of Python busy-work per step, measured
# here) also computes its backward slower while its peer's communication threads run beside it,
# by as much again; the busy-work grew 8x against its usual size, the compute 30 %.
BASE_FLOOR = 0.05


# Blocked time (the training thread neither running nor waiting for a CPU: a sleep, I/O, a lock) is one
# interval somewhere in the step; when it carries a share of the extra time, only a component that
# grew by most of it can hold it. Measured (4 ranks on 2 cores): a 9 ms sleep in the gradient hook
# (inside compute) came with +4.5 ms of data loading under contention, and "grew most against its
# usual size" picked data; compute (+8.7 ms) is the only component that can hold 9 ms. When no
# component grew by that much, the one that grew most (absolute) is taken: measured, a 4.8 ms sleep
# per batch in the data loader gave +6.0 ms blocked, data +3.6 ms and host +1.9 ms on a smaller usual
# size; "grew most against its usual size" said host.
BLOCKED_HOLD = 0.7

# a cause needs a component that grew by at least this share of the usual own time; else "unclear".
# Seen in bench/workloads.py runs: a rank found on own time minus run-queue wait with every component
# at or below the others' (the cause was the largest of three negative numbers), and "data loading"
# drawn from +0.7 µs of data wait.
UNCLEAR_SHARE = 0.01


# Extra operator calls that account for at least this share of the compute growth make compute the cause,
# whatever the time between operators did: a rank that runs more operators also spends more time between
# them (the dispatch of each extra call), so host time grows with the work. Measured (bench/workloads.py
# seed 2651, pp-1f1b at 2 ranks, stage 1 with 2x the layers: aten::mm 592 vs 288 calls per step): compute
# +27.3 ms, host +23.4 ms, the extra aten::mm calls 14.6 ms; below CAUSE_SHARE of the total, so host (which
# grew most against its usual size) was named.
CALLS_HOLD = 0.5


# Host time between operators that grew by no more than this many times its usual size times the extra share
# of calls ((calls - others' calls) / others' calls of the operator with the most extra time) is the dispatch of
# the extra operators, not a cause of its own. Measured (bench/workloads.py seed 2651, pp-1f1b at 4 ranks,
# stage 0 with 2x the layers, aten::mm 576 vs 288 per step): compute +44.2 ms, host +24.5 ms; the extra
# calls' own time 12.4 ms held neither CAUSE_SHARE of the total nor CALLS_HOLD of compute: "host" was named.
CALLS_HOST_SLACK = 1.5


def cause(row: dict[str, float], others: pl.DataFrame, blocked_excess: float | None = None,
          extra_calls_ns: float = 0.0, eligible: set[str] | None = None,
          calls_ratio: float = 1.0) -> tuple[str, dict[str, float]]:
    """The component that explains the extra own time: see CAUSE_SHARE, BASE_FLOOR, BLOCKED_HOLD.

    ``extra_calls_ns``: time per step in operators this rank calls more often than the others
    (``Work.more_calls``). Call counts are not timings and carry no noise: when they account for a
    good share of the extra time, or for ``CALLS_HOLD`` of the compute growth, compute wins among the candidates. Measured (4 ranks on 2 cores, CPUs
    rotated): 6 extra matmul blocks per step made compute +10.5 ms, and data loading, run beside the
    CPU partner's compute once the rank fell out of step, +4.9 ms on a usual 7.7 ms: "grew most
    against its usual size" named data. ``calls_ratio``: that operator's calls per step over the others'
    (``CALLS_HOST_SLACK``)."""
    usual = {name: as_float(others[col].median(), 0.0) for col, name in COMPONENTS.items()}
    excess = {name: float(row[col]) - usual[name] for col, name in COMPONENTS.items()}
    total = sum(v for v in excess.values() if v > 0)
    floor = BASE_FLOOR * as_float((others["computing"] + others["data_wait"] + others["free"]).median(), 0.0)
    big = [k for k, v in excess.items() if v > 0 and v >= CAUSE_SHARE * total]
    # only what the rank's own segments on the critical path hold (all, when none of them does)
    big = [k for k in big if eligible is None or k in eligible] or big
    if "compute" in big and "host" in big and calls_ratio > 1.0 and (
            excess["host"] <= CALLS_HOST_SLACK * (calls_ratio - 1.0) * max(usual["host"], floor)):
        big.remove("host")  # the gaps between its extra operators: more work, not a cause of its own
    if blocked_excess is not None and blocked_excess >= CAUSE_SHARE * total > 0:
        hold = [k for k in big if excess[k] >= BLOCKED_HOLD * blocked_excess]
        # none grew by most of it: it is still one interval, likeliest in the one that grew most
        big = hold or ([max(big, key=lambda k: excess[k])] if big else big)
    if max(excess.values()) < UNCLEAR_SHARE * sum(usual.values()):
        return "unclear", excess  # no component grew: never a cause drawn from +0.7 µs or from a shrink
    if "compute" in big and (extra_calls_ns >= CAUSE_SHARE * total or extra_calls_ns >= CALLS_HOLD * excess["compute"]):
        return "compute", excess
    if len(big) < 2:
        return (big[0] if big else max(excess, key=lambda k: excess[k])), excess
    return max(big, key=lambda k: excess[k] / max(usual[k], floor, 1.0)), excess


def from_path(path: dict[str, float], cost_ns: float, excess: dict[str, float]) -> str | None:
    """The cause from the bounding rank's own segments on the critical path (``bound.path_classes``: data, host,
    compute), where no component of its own time grew by half its cost: then the other ranks' time categories
    hold waits they could not see (a training thread blocked, untraced, in ``backward()`` while DDP waits for the
    collective is "host" time, as long as the straggler's own host work), and only the path says where the
    cost sits. The class holding most of the rank's time on the path, among those holding at least half the
    cost; None when the components explain the cost, or no class holds half of it.
    Measured (bench/gpu_demo.py, H100, 2 ranks on gloo with CUDA tensors, rank 1 spinning 20 ms of Python per
    step): path host 21.6-22.2 ms, data 9.2-11.2 ms, cost 20.1-23.2 ms; component excess at most 2.6 ms, the
    cause said was "data" twice and "unclear" once."""
    if cost_ns <= 0 or not path or max(excess.values(), default=0.0) >= 0.5 * cost_ns:
        return None
    held = {k: v for k, v in path.items() if v >= 0.5 * cost_ns}
    grown = {k: excess.get(k, 0.0) for k in held if excess.get(k, 0.0) >= PATH_GROWN * cost_ns}
    if grown:  # the class that grew, not the one every rank spends most of its step in (compute, on a CPU job)
        return max(grown, key=lambda k: grown[k])
    return max(held, key=lambda k: held[k]) if held else None


# Where the components cannot hold the path's cost, a class the path holds that grew by at least this share of the
# cost is the cause, before the class holding the most time on the path. Measured (bench/workloads.py seed 3004,
# ppdp-data at 4 ranks): a replica's data wait grew by 11.2 of a 22.8 ms cost (5.1 of 10.8 in another), its path held
# 14.7 ms of data and 82.3 ms of compute (its whole forward and backward), and the cause said was "compute". On the
# GPU demo's host straggler the largest growth was 2.4 of 20.7 ms (12 %): the path's host time stands.
PATH_GROWN = 0.25

# DDP launches gradient communication from AccumulateGrad post-hooks (reducer -> comm hook);
# host time that grows there is time spent getting the rank's gradients onto the wire.
_COMM_HOOK_MARKERS = ("AccumulateGrad", "reducer", "comm_hook", "allreduce_hook")


def top_level_excess(run: Run, rank: int, others: list[int]) -> tuple[str, float]:
    """The step-level operator whose time per step grew most on ``rank`` against ``others``."""
    def per_op(r: int) -> pl.DataFrame:
        ev = frame(run.table(r, "events", columns=["name", "dur", "depth", "kind"]))
        n_steps = max(run.table(r, "steps", columns=["step"]).num_rows, 1)
        return (ev.filter((pl.col("depth") == 1) & pl.col("kind").cast(pl.Utf8).is_in(["cpu_op", "user_annotation"]))
                .group_by(pl.col("name").cast(pl.Utf8)).agg((pl.col("dur").sum() / n_steps).alias(str(r))))
    mine = per_op(rank)
    ref = pl.concat([per_op(o).rename({str(o): "v"}) for o in others]).group_by("name").agg(pl.col("v").median())
    joined = mine.join(ref, on="name", how="left").fill_null(0).with_columns(
        excess=pl.col(str(rank)) - pl.col("v")).sort("excess", descending=True)
    if joined.height == 0:
        return "", 0.0
    top = joined.row(0, named=True)
    return str(top["name"]), float(top["excess"])


def refine(run: Run, kind: str, rank: int, others: list[int], evidence: dict[str, Any]) -> str:
    """Split host 'compute' into real compute and gradient-communication hooks."""
    if kind != "compute":
        return kind
    op, excess = top_level_excess(run, rank, others)
    evidence["top_operator_excess"] = {"name": op, "excess_ns": round(excess)}
    if any(m in op for m in _COMM_HOOK_MARKERS):
        return "comm"
    return kind


def expected_extra_ns(work: Work, others: pl.DataFrame) -> float:
    """The extra compute per step that the rank's extra input work predicts: the others' usual compute times
    the work ratio's excess."""
    return (work.get("work_ratio", 1.0) - 1) * as_float(others["computing"].median(), 0.0)


def work_explains(work: Work, excess: dict[str, float], others: pl.DataFrame, rel: float,
                  cpu_excess: float | None = None) -> bool:
    """More input work accounts for the rank's extra compute, which is a good share of its extra own time:
    then the cause is the input imbalance even when another component grew more against its usual size.
    Measured (bench/workloads.py, 4 ranks on 2 cores): an LM rank with 1.55x longer sequences had compute
    +9 ms, and its idle gaps between operators (queued behind the other ranks for a CPU) +3 ms on a usual
    1 ms: "grew most against its usual size" said host."""
    if not is_input_imbalance(work, rel):
        return False
    expected = expected_extra_ns(work, others)
    total = sum(v for v in excess.values() if v > 0)
    # the extra compute either matches the extra work, or is the largest part of the extra time (4 ranks on
    # 2 cores, bench run 3: 1.33x input work, compute +3.6 ms of an expected ~10, host idle +1.6 ms)
    # or the rank's CPU time (``cpu_excess``: its training thread's extra CPU time per step, from schedstat)
    # grew by half the extra work's expected time, or by all of its extra time: the extra time is work done,
    # not waiting, though the trace put it between operators (bench/workloads.py run 10, 4 ranks on 2 cores:
    # 1.44x input work, the trace's compute +0.2 ms, idle between operators +3.3 ms, CPU time +7.9 ms: "host").
    # Callers pass it only when the cause would be "host": a decode rank reading 1.8x the bytes sorts 1.8x the
    # elements in its DataLoader, and that is data loading (bench/workloads.py, the first try of run 11)
    return expected > 0 and ((excess["compute"] >= CAUSE_SHARE * total and (
        excess["compute"] >= 0.5 * expected or excess["compute"] >= max(excess.values())))
        or (cpu_excess is not None and total > 0 and cpu_excess >= min(0.5 * expected, total)))


def cpu_time_explains(work: Work, others: pl.DataFrame, rel: float, cpu_excess: float | None,
                      others_cpu: float | None = None) -> bool:
    """No traced component grew, yet the rank was found (on its own time less its CPU wait: on a saturated
    machine the others' components hold their run-queue wait), and its training thread's CPU time grew by at
    least half of what its extra input work predicts: the extra time is that work, done. Measured (a kept run
    of tests/e2e/test_workloads.py's LM job, 2 ranks, 1.47x input work, beside three other pytest workers'
    jobs): computing 34.5 against 35.2 ms per step, rank 0 waited 14.7 ms per step for a CPU and rank 1 4.8 ms,
    rank 1's CPU time +9.4 ms: "cause unclear" (tests/fixtures/runs/lm_saturated).
    The prediction is read in CPU time too: the work ratio's excess times the others' CPU time per step
    (``others_cpu``, schedstat), where sampled. Their traced compute holds their run-queue wait (14.7 ms of 35.2
    above): 16.5 ms predicted from it, 10.8 ms from their 22.9 ms of CPU time. CI at 0263c18 (the same job
    beside another pytest worker) read "cause unclear, own time excluding CPU wait +42 %" against the former."""
    if cpu_excess is None or not is_input_imbalance(work, rel):
        return False
    expected = ((work.get("work_ratio", 1.0) - 1) * others_cpu if others_cpu else expected_extra_ns(work, others))
    return expected > 0 and cpu_excess >= 0.5 * expected
