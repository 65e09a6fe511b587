"""How much work a rank does per step, from its operators' calls and input shapes (``record_shapes``).

A straggler whose compute grew may be doing *more work* (an input imbalance: longer sequences or a
larger batch on that rank; more operator calls) or *the same work slower* (a slower processor,
throttling). The amount of input work is the number of input elements of the operators a rank runs
per step (the product of each input tensor's dims, summed over inputs and calls): variable sequence
lengths change it in proportion to the tokens, whatever the shape sets. Measured (issue 12): a rank
whose batches are padded to 1.5x the tokens ran 97 % of its time on shapes no other rank saw, but so
did 20-34 % of the healthy ranks' time (every rank's lengths vary): comparing shape *sets* cannot tell;
comparing the *amount* can.
"""
from __future__ import annotations

import json
from typing import Any, TypedDict

import polars as pl

from rankscope.analysis.base import Result, frame
from rankscope.model.run import Run

# Input imbalance: the rank's input elements per step exceed the others' median by at least this ...
IMBALANCE_WORK = 0.10
# ... and explain at least this share of its relative own-time excess (more work, not only slower work).
IMBALANCE_EXPLAINS = 0.3
# Extra calls of an operator per step that make "more calls" (a count, not a timing).
CAUSE_SHARE = 0.3


class Work(TypedDict, total=False):
    """Evidence of different work on a rank (see ``imbalance``)."""

    shapes_recorded: bool
    input_elements_per_step: float  # of the operators called as often as on the others
    others_input_elements_per_step: float
    work_ratio: float
    unseen_shape_time_share: float
    same_call_count_ops: int
    example: str
    example_op: str
    example_others: str
    more_calls: list[dict[str, Any]]


def elements(dims: str) -> int:
    """Input elements of one call from its ``Input Dims`` text ("[[8, 4, 130, 32], [], [32]]")."""
    try:
        val = json.loads(dims) if dims else []
    except ValueError:
        return 0
    total = 0
    for d in val if isinstance(val, list) else []:
        if isinstance(d, list) and d and all(isinstance(v, int) and v >= 0 for v in d):
            n = 1
            for v in d:
                n *= v
            total += n
    return total


def shapes(run: Run, rank: int) -> tuple[pl.DataFrame, int]:
    """Per (operator, input shapes) of one rank: time (t), calls per step (n), calls, elements per call;
    and the number of steps."""
    ev = frame(run.table(rank, "events", columns=["name", "kind", "dur", "input_dims"]))
    n_steps = max(run.table(rank, "steps", columns=["step"]).num_rows, 1)
    df = (ev.filter((pl.col("kind").cast(pl.Utf8) == "cpu_op") & (pl.col("input_dims").cast(pl.Utf8) != ""))
          .group_by(pl.col("name").cast(pl.Utf8), pl.col("input_dims").cast(pl.Utf8))
          .agg(t=pl.col("dur").sum(), n=pl.len() / n_steps, calls=pl.len()))
    return df.with_columns(el=pl.col("input_dims").map_elements(elements, return_dtype=pl.Int64)), n_steps


def first_dims(dims: str) -> str:
    """The first non-empty input's dims, for a headline ("[8, 4, 130, 32]")."""
    try:
        val = json.loads(dims)
    except ValueError:
        return dims
    return next((json.dumps(d) for d in val if isinstance(d, list) and d), dims) if isinstance(val, list) else dims


def _dims(text: str) -> list[int] | None:
    try:
        d = json.loads(first_dims(text))
    except ValueError:
        return None
    return d if isinstance(d, list) and all(isinstance(v, int) for v in d) else None


def _example(mine: pl.DataFrame, theirs: list[pl.DataFrame]) -> tuple[str, str, str]:
    """A telling pair of input shapes: among this rank's (operator, shape) by time, the first that no other
    rank uses and whose first input differs from a shape the others use for the same operator in exactly one
    dimension, larger here (a longer sequence, a larger batch); the others' shape is their most used such one.
    (A shape the others use too is no example: aten::linear [256, 512] vs [256, 256] named two layers of one
    model, on every rank.)
    Returns (operator, shape here, the others' shape), or empty strings."""
    ref = pl.concat(theirs).group_by("name", "input_dims").agg(t=pl.col("t").sum()).sort("t", descending=True)
    by_name: dict[str, list[list[int]]] = {}
    for name, dims in ref.select("name", "input_dims").iter_rows():
        d = _dims(dims)
        if d:
            by_name.setdefault(name, []).append(d)
    # operators (aten::bmm) before autograd nodes (ReluBackward0): the names users write
    order = mine.with_columns(aten=pl.col("name").str.starts_with("aten::")).sort(["aten", "t"], descending=True)
    used = set(ref.select("name", "input_dims").iter_rows())
    for name, dims in order.head(200).select("name", "input_dims").iter_rows():
        d = _dims(dims)
        if not d or (name, dims) in used:
            continue
        for o in by_name.get(name, []):
            diff = [i for i, (a, b) in enumerate(zip(d, o)) if a != b]
            if len(o) == len(d) and len(diff) == 1 and d[diff[0]] > o[diff[0]]:
                return name, json.dumps(d), json.dumps(o)
    return "", "", ""


def imbalance(run: Run, rank: int, others: list[int]) -> Work | None:
    """Work of ``rank`` against the others (at most 8 of them): input elements per step and their
    ratio, the largest-input example, operators called more often, and the time share on input shapes
    no other rank uses (kept for reference). None when the rank recorded no operators."""
    mine, _ = shapes(run, rank)
    if mine.height == 0:
        return Work(shapes_recorded=False, more_calls=[]) if run.table(rank, "events", columns=["name"]).num_rows \
            else None
    theirs = [shapes(run, o)[0] for o in others[:8]]
    theirs = [t for t in theirs if t.height] or [mine]
    seen = pl.concat([t.select("name", "input_dims") for t in theirs]).unique()
    calls = pl.concat([t.group_by("name").agg(n=pl.col("n").sum()) for t in theirs]).group_by("name").agg(
        ref=pl.col("n").median())
    per_name = (mine.group_by("name").agg(n=pl.col("n").sum(), t=pl.col("t").sum(), calls=pl.col("calls").sum())
                .join(calls, on="name", how="left"))
    # the same count per step: to rounding (a step cut at the window's edge), or 1 % for operators called
    # hundreds of times a step. Not 5 %: the demo's extra matmul blocks (bench/stragglers.py seed 157) added 14
    # aten::as_strided calls on [512, 512] to 287 per step, and their inputs read as "+12 % input work"
    same = per_name.filter((pl.col("n") - pl.col("ref")).abs() <= pl.max_horizontal(pl.lit(0.5), 0.01 * pl.col("ref"))
                           )["name"]
    # operators this rank calls more often per step than the others (more work, whatever the shapes):
    # the extra calls' share of its time in them, per step
    more = (per_name.with_columns(ref=pl.col("ref").fill_null(0.0))
            .filter((pl.col("n") - pl.col("ref") >= 0.5) & (pl.col("n") > 1.05 * pl.col("ref")))
            .with_columns(extra_ns=pl.col("t") / pl.col("calls") * (pl.col("n") - pl.col("ref")))
            .sort("extra_ns", descending=True).head(3))
    same_ops = mine.filter(pl.col("name").is_in(same.to_list()))
    # input work of the operators called as often as on the others: larger inputs, not extra calls
    # (those are ``more_calls``)
    per_step = lambda df: float((df["el"] * df["n"]).filter(df["name"].is_in(same.to_list())).sum() or 0)  # noqa: E731
    ref_work = sorted(per_step(t) for t in theirs)[len(theirs) // 2]
    work = per_step(mine)
    new = same_ops.join(seen, on=["name", "input_dims"], how="anti")
    total = float(same_ops["t"].sum() or 0)
    op, here, there = _example(same_ops, [t.filter(pl.col("name").is_in(same.to_list())) for t in theirs])
    return Work(shapes_recorded=True, input_elements_per_step=round(work),
                others_input_elements_per_step=round(ref_work),
                work_ratio=round(work / ref_work, 4) if ref_work else 1.0,
                unseen_shape_time_share=round(float(new["t"].sum() or 0) / total, 3) if total else 0.0,
                same_call_count_ops=int(same.len()), example=here, example_op=op, example_others=there,
                more_calls=[{"name": r["name"], "calls_per_step": round(r["n"], 2),
                             "others_calls_per_step": round(r["ref"], 2), "extra_ns_per_step": round(r["extra_ns"])}
                            for r in more.iter_rows(named=True)])


def is_input_imbalance(work: Work | None, rel_excess: float) -> bool:
    """More input work per step than the others, by enough to explain a good part of the excess."""
    if not work or not work.get("shapes_recorded"):
        return False
    extra = work.get("work_ratio", 1.0) - 1
    return extra >= IMBALANCE_WORK and extra >= IMBALANCE_EXPLAINS * rel_excess


def imbalance_note(work: Work) -> str:
    """", +35% input work per step (aten::bmm inputs [8, 4, 130, 32] vs [8, 4, 84, 32])"."""
    ex = (f" ({work['example_op']} inputs {work['example']} vs {work['example_others']})"
          if work.get("example_op") else "")
    return f", +{work.get('work_ratio', 1.0) - 1:.0%} input work per step{ex}"


def work_note(work: Work, compute_excess_ns: float) -> str:
    """More work or the same work slower, for a compute straggler's title. Calls per step are counts,
    not timings: a rank that runs extra operators (the demo's injected matmul blocks: aten::mm 13 vs 7
    per step) differs from one whose same operators on the same amount of input take longer (a slower
    processor or device; measured here on a slower vCPU: no operator called more often)."""
    if not work.get("shapes_recorded", True):
        return " (input sizes not recorded: cannot tell more work from slower work; profile with record_shapes=True)"
    more = work["more_calls"]
    if more and more[0]["extra_ns_per_step"] >= CAUSE_SHARE * max(compute_excess_ns, 1.0):
        m = more[0]
        return f" (more calls: {m['name']} {m['calls_per_step']:g} vs {m['others_calls_per_step']:g} per step)"
    if not more and abs(work.get("work_ratio", 1.0) - 1) < 0.02 and work["same_call_count_ops"] > 0:
        return " (same operators and input sizes, slower)"
    return ""


def calls_ratio(work: Work | None) -> float:
    """Calls per step over the others' of the operator with the most extra time (1.0 when none)."""
    more = work.get("more_calls", []) if work else []
    if not more:
        return 1.0
    m = more[0]
    return float(m["calls_per_step"]) / float(m["others_calls_per_step"]) if m["others_calls_per_step"] else 1.0


def extra_calls_ns(work: Work | None) -> float:
    """Time per step in the operators called more often than on the other ranks; the largest, not the
    sum: operator times are inclusive (aten::matmul holds aten::mm)."""
    return max((m["extra_ns_per_step"] for m in work.get("more_calls", [])), default=0.0) if work else 0.0


def work_peers(results: dict[str, Result], ranks: list[int], rank: int) -> list[int]:
    """The ranks whose work ``rank``'s is compared with: the other ranks of its pipeline stage where it has some (its
    data-parallel replicas hold the same layers; the other stages hold other layers and the stage model compares
    the stages), else every other rank. Measured (rankscope.demo.workloads.pipeline --dp 2, 1F1B, 2 stages x 2
    replicas, stage 1 with 2x the layers): against ranks 0, 1 and 3, rank 2 had "+498 % input work" (stage 0's
    embedding against stage 1's head) and was named an input imbalance; against rank 3, its replica, none."""
    others = [r for r in ranks if r != rank]
    pp = results.get("pipeline")
    if pp is None or pp.skipped:
        return others
    mine = next((list(map(int, rs)) for rs in pp.summary.get("stage_ranks") or [] if rank in rs), [])
    same = [r for r in mine if r != rank and r in ranks]
    return same or others
