"""Advice: rules with explicit thresholds, each a Finding with severity and the numbers behind it.

Every rule reads medians over complete steps per rank (from the "breakdown" table) or the
matched collectives, compares with a named threshold, and says what to try. The thresholds are
data (``RULES``) so a report can list them. No rule fires on a healthy, well-overlapped run.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from rankscope.analysis.base import Analysis, Finding, Result, Severity
from rankscope.analysis.view import View
from rankscope.analysis.diagnosis.rules import complete_steps
from rankscope.analysis.stats import as_float
from rankscope.intlist import format_int_list
from rankscope.model.run import Run

RULES: dict[str, dict[str, float]] = {
    "data_loading": {"share": 0.05, "abs_ns": 10_000_000},
    "exposed_comm": {"share": 0.10},
    "host_bound": {"share": 0.10},
    "memory_peak": {"share": 0.90},
    "small_messages": {"bytes": 1 << 20, "share": 0.5, "per_step": 20},
    "dp_imbalance": {"ratio": 1.10, "min_share": 0.02},
    "missing_overlap": {"comm_share": 0.10, "overlap": 0.20},
    "cpu_contention": {"share": 0.10},
}


def _medians(bd: pl.DataFrame) -> pl.DataFrame:
    done = complete_steps(bd)
    cols = ["wall", "computing", "communication", "overlapped", "comm_exposed", "data_wait", "free"]
    return done.group_by("rank").agg(pl.col(c).median() for c in cols).sort("rank")


def _share_rule(m: pl.DataFrame, name: str, col: str, title: str, advice: str,
                abs_ns: float | None = None) -> Finding | None:
    share = m[col] / m["wall"]
    hit = m.with_columns(share=share).filter(
        (pl.col("share") > RULES[name]["share"]) | (pl.lit(abs_ns is not None) & (pl.col(col) > (abs_ns or 0))))
    if hit.height == 0:
        return None
    worst = as_float(hit["share"].max())
    sev = Severity.CRITICAL if worst > 3 * RULES[name]["share"] else Severity.WARNING
    ranks = tuple(int(r) for r in hit["rank"].to_list())
    return Finding(kind=f"advice.{name}", severity=sev, ranks=ranks,
                   title=f"{title}: up to {worst:.0%} of the step ({_ranks(ranks)}). {advice}",
                   evidence={"threshold": RULES[name], "median_ns": {str(r["rank"]): round(r[col]) for r in
                                                                     hit.iter_rows(named=True)},
                             "share": {str(r["rank"]): round(r["share"], 4) for r in hit.iter_rows(named=True)}})


def breakdown_rules(bd: pl.DataFrame) -> list[Finding]:
    """Data loading, exposed communication, host-bound gaps, DP imbalance, missing overlap."""
    m = _medians(bd)
    out = [
        _share_rule(m, "data_loading", "data_wait", "data loading stalls the step",
                    "Use more DataLoader workers, pin_memory, prefetching.", RULES["data_loading"]["abs_ns"]),
        _share_rule(m, "exposed_comm", "comm_exposed", "communication is exposed (not overlapped)",
                    "Overlap it with compute (bucket sizes, async collectives) or reduce its volume."),
        _share_rule(m, "host_bound", "free", "host-bound gaps: the device / step thread sits idle",
                    "Reduce Python overhead and syncs (CUDA graphs, torch.compile, fewer .item() calls)."),
    ]
    out.append(_imbalance(bd, m))
    comm_share = m["communication"] / m["wall"]
    overlap = (m["overlapped"] / m["communication"]).fill_nan(0.0)
    bad = m.with_columns(cs=comm_share, ov=overlap).filter(
        (pl.col("cs") > RULES["missing_overlap"]["comm_share"]) & (pl.col("ov") < RULES["missing_overlap"]["overlap"]))
    if bad.height:
        ranks = tuple(int(r) for r in bad["rank"])
        out.append(Finding(kind="advice.missing_overlap", severity=Severity.WARNING, ranks=ranks,
                           title=f"communication barely overlaps compute ({as_float(bad['ov'].max()):.0%} at best, "
                                 f"{_ranks(ranks)}). Start gradient all-reduce during backward (DDP buckets, FSDP "
                                 "prefetch).",
                           evidence={"threshold": RULES["missing_overlap"],
                                     "overlap": dict(zip(map(str, ranks), map(float, bad["ov"]))),
                                     "comm_share": dict(zip(map(str, ranks), map(float, bad["cs"])))}))
    return [f for f in out if f is not None]


def _imbalance(bd: pl.DataFrame, m: pl.DataFrame) -> Finding | None:
    """The rank that computes most, over ``RULES["dp_imbalance"]["ratio"]`` times the other ranks' median, by the
    median of its steps and by their mean both, and by at least ``min_share`` of its step. Why both: on a loaded
    host a few steps swing a median over 8 steps (bench/workloads.py seed 2791, healthy 4-rank LM and decode jobs
    on 2 CPUs: 1.11-1.20x by medians in 5 of 40 runs where the means were 0.97-1.01x). Why the floor: the decode
    family computes 2 ms of a 200 ms step, and 1.17x of it is 0.3 ms (0.15 % of the step)."""
    comp = m["computing"]
    if m.height < 2 or as_float(comp.median(), 0.0) <= 0:
        return None
    top = comp.arg_max() or 0  # never None here: the column has values (median > 0)
    r = int(m["rank"][top])
    # against the *other* ranks: on 2 ranks a median that includes the rank itself halves the gap
    med = as_float(comp.filter(m["rank"] != r).median(), 0.0)
    ratio = as_float(comp.max()) / med if med > 0 else 0.0
    done = complete_steps(bd)
    means = done.group_by("rank").agg(pl.col("computing").mean())
    mine, others = means.filter(pl.col("rank") == r)["computing"], means.filter(pl.col("rank") != r)["computing"]
    ref = as_float(others.median(), 0.0)
    mean_ratio = as_float(mine.max(), 0.0) / ref if ref > 0 else 0.0
    rule = RULES["dp_imbalance"]
    share = (as_float(comp.max()) - med) / as_float(m["wall"][top], 0.0) if as_float(m["wall"][top], 0.0) > 0 else 0.0
    if ratio <= rule["ratio"] or mean_ratio <= rule["ratio"] or share < rule["min_share"]:
        return None
    return Finding(kind="advice.dp_imbalance", severity=Severity.WARNING, ranks=(r,),
                   title=f"compute differs across ranks: rank {r} computes {ratio:.2f}x the other ranks' median per "
                         "step. Balance the work (shard sizes, sequence lengths) or check that rank.",
                   evidence={"threshold": rule, "ratio": round(ratio, 3), "mean_ratio": round(mean_ratio, 3),
                             "share_of_step": round(share, 4),
                             "computing_ns": dict(zip(map(str, m["rank"]), map(round, comp)))})


def small_messages(inst: pl.DataFrame, n_steps: int) -> Finding | None:
    """Many collectives below 1 MiB: latency-bound; bucket them."""
    if inst.height == 0:
        return None
    rule = RULES["small_messages"]
    small = inst.filter(pl.col("bytes") < rule["bytes"])
    share, per_step = small.height / inst.height, small.height / max(n_steps, 1)
    if share <= rule["share"] or per_step <= rule["per_step"]:
        return None
    return Finding(kind="advice.small_messages", severity=Severity.INFO,
                   title=f"{share:.0%} of collectives move < 1 MiB ({per_step:.0f} per step): latency-bound. "
                         "Bucket them (larger DDP bucket_cap_mb, coalescing).",
                   evidence={"threshold": rule, "share": round(share, 3), "per_step": round(per_step, 1),
                             "median_bytes": as_float(small["bytes"].median(), 0.0)})


def memory_rule(peaks: list[dict[str, Any]], totals: dict[int, int]) -> Finding | None:
    """Peak allocated memory above 90 % of the device's memory on some rank."""
    hits = [(p, p["peak_allocated"] / totals[p["rank"]]) for p in peaks if totals.get(p["rank"])]
    hits = [(p, s) for p, s in hits if s > RULES["memory_peak"]["share"]]
    if not hits:
        return None
    ranks = tuple(sorted({int(p["rank"]) for p, _ in hits}))
    worst = max(s for _, s in hits)
    return Finding(kind="advice.memory_peak", severity=Severity.CRITICAL if worst > 0.97 else Severity.WARNING,
                   ranks=ranks, title=f"memory peak at {worst:.0%} of device memory ({_ranks(ranks)}): close to "
                                      "OOM. Use activation checkpointing, smaller micro-batches or sharding.",
                   evidence={"threshold": RULES["memory_peak"], "peaks": [p for p, _ in hits]})


def cpu_contention(run: Run, bd: pl.DataFrame) -> Finding | None:
    """The training thread waits for a CPU (run-queue wait per step, rankscope.profile's samples)."""
    from rankscope.analysis.diagnosis.cpu import sched_frame, wait_share

    m = wait_share(sched_frame(run), bd)
    hit = m.filter(pl.col("share") > RULES["cpu_contention"]["share"])
    if hit.height == 0:
        return None
    worst = as_float(hit["share"].max())
    ranks = tuple(int(r) for r in hit["rank"])
    return Finding(kind="advice.cpu_contention", ranks=ranks,
                   severity=Severity.WARNING if worst > 2 * RULES["cpu_contention"]["share"] else Severity.INFO,
                   title=f"the training thread waits for a CPU: up to {worst:.0%} of the step ({_ranks(ranks)}). "
                         "The host is oversubscribed: check other processes, DataLoader workers x OMP threads "
                         "against the cores, and CPU affinity (taskset, numactl).",
                   evidence={"threshold": RULES["cpu_contention"],
                             "runq_wait_ns": {str(r["rank"]): round(r["runq_wait_ns"]) for r in hit.iter_rows(named=True)},
                             "share": {str(r["rank"]): round(r["share"], 4) for r in hit.iter_rows(named=True)},
                             "source": "/proc/thread-self/schedstat, per captured step"})


def host_waited(sched: pl.DataFrame, bd: pl.DataFrame, f: Finding, one_thread: bool = False) -> Finding:
    """The compute-imbalance rule on a rank whose extra compute was its thread waiting, not working, is information.
    - For a CPU (``cpu.compute_wait`` read by ``cpu.is_contention``): the run-queue wait its own extra CPU time does
      not explain is at least half of the extra compute, and its CPU time barely grew. Seen on ``make demo``'s
      healthy 4-rank DDP job on 2 CPUs: "rank 3 computes 1.22x the other ranks' median per step. Balance the work",
      with no straggler and the same work on every rank.
    - Or for anything (``one_thread``: every rank ran torch with one intra-op thread, so an operator's work is its
      calling thread's CPU time): its CPU time grew by less than the rule's own bar, 10 % of the other ranks' median
      compute: by its work it does not compute 1.1x theirs. Seen on seed 2791 run 69 (a healthy 4-rank LM): +5.6 ms
      of compute per step of which +0.7 ms CPU time and +4.1 ms blocked; seed 2822 run 10: +3.2 ms of compute,
      +0.8 ms of CPU time against a bar of 2.7 ms.
    Only where compute is read from the host thread; a device's kernels do not show in it."""
    if f.kind != "advice.dp_imbalance":
        return f
    from rankscope.analysis.diagnosis.advice_path import host_wait
    from rankscope.analysis.diagnosis.cpu import compute_wait, is_contention

    waited = compute_wait(sched, bd, f.ranks[0])
    if waited is None:
        return f
    if is_contention(waited):
        return host_wait(f, waited)
    r, ratio = f.ranks[0], float(f.evidence.get("ratio") or 0.0)
    others = [float(v) for k, v in (f.evidence.get("computing_ns") or {}).items() if int(k) != r]
    bar = (RULES["dp_imbalance"]["ratio"] - 1) * float(np.median(others)) if others else 0.0
    extra, cpu = float(waited.get("own_excess_ns") or 0.0), waited.get("cpu_excess_ns")
    if not one_thread or cpu is None or extra <= 0 or bar <= 0 or float(cpu) >= bar:
        return f
    runq = float(waited.get("excess_ns") or 0.0)
    blocked = float(waited.get("blocked_excess_ns") or 0.0)
    return replace(f, severity=Severity.INFO,
                   title=f"compute differs across ranks: rank {r} computes {ratio:.2f}x the other ranks' median per "
                         f"step, but its training thread (one intra-op thread: an operator's work is its CPU time) "
                         f"used {float(cpu) / 1e6:+.1f} ms of CPU per step against the others, under a tenth of their "
                         f"compute ({bar / 1e6:.1f} ms): the extra {extra / 1e6:.1f} ms were waiting "
                         f"({runq / 1e6:.1f} ms for a CPU, {blocked / 1e6:.1f} ms blocked), not work: nothing to "
                         "balance.",
                   evidence={**f.evidence, "not_work": True, "compute_wait": waited, "cpu_bar_ns": round(bar),
                             "source": "the training thread's CPU time and run-queue wait per step "
                                       "(/proc/thread-self/schedstat), torch.get_num_threads() == 1 on every rank"})


def _device_totals(run: Run) -> dict[int, int]:
    out = {}
    for r, info in run.ranks.items():
        v = info.meta.get("device_memory_bytes") or (info.meta.get("metadata") or {}).get("device_memory_bytes")
        if v:
            out[r] = int(v)
    return out


def run_advice(run: Run, results: dict[str, Result]) -> Result:
    """Registered analysis "advice": every rule that fires, as findings."""
    bd = pl.from_arrow(results["breakdown"].tables["breakdown"])
    assert isinstance(bd, pl.DataFrame)  # a pyarrow Table gives a DataFrame
    from rankscope.analysis.diagnosis.cpu import one_intra_op_thread, sched_frame

    sched, one = sched_frame(run), one_intra_op_thread(run)
    findings = [host_waited(sched, bd, f, one) for f in breakdown_rules(bd)]
    from rankscope.analysis.clock.alignment import alignment_from, matched_collectives
    from rankscope.analysis.comm.links import instances

    inst = instances(matched_collectives(run), alignment_from(results))
    n_steps = int(bd["step"].n_unique())
    findings += [f for f in [small_messages(inst, n_steps), cpu_contention(run, bd)] if f]
    mem = results.get("memory")
    if mem is not None and not mem.skipped and "peaks" in mem.tables:
        f = memory_rule(mem.tables["peaks"].to_pylist(), _device_totals(run))
        findings += [f] if f else []
    from rankscope.analysis.diagnosis.pipeline_advice import shape_advice

    findings = shape_advice(results, findings, RULES)  # a pipeline's waits are its bubble, not DP communication
    from rankscope.analysis.diagnosis.advice_path import path_advice

    findings = path_advice(results, findings)  # who the others wait for, from the critical path, comes first
    return Result("advice", findings=findings, summary={"rules": RULES, "fired": [f.kind for f in findings]})


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_int_list(ranks)}"


ANALYSIS = Analysis(
    name="advice",
    description="rules with thresholds: data loading, exposed comm, host gaps, memory, ...",
    run=run_advice,
    after=("breakdown",),
    uses=("clock", "memory", "pipeline", "straggler", "critical_path"),
    view=View("Advice", place="overview"),
)
