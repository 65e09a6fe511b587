"""CPU scheduling per rank and step: time the training thread spent waiting for a CPU.

Source: the ``sched`` block of each window in a rank's meta.json (written by ``rankscope.profile``
from ``/proc/thread-self/schedstat``, see :mod:`rankscope.collect.sched`). Traces collected
without rankscope's profile have none: every function here then returns an empty answer and
the analyses that use it say nothing about contention.
"""
from __future__ import annotations

from typing import Any

import polars as pl

from rankscope.analysis.diagnosis.rules import complete_steps
from rankscope.analysis.stats import as_float
from rankscope.model.run import Run

SCHEMA = {"rank": pl.Int64, "step": pl.Int64, "cpu_ns": pl.Int64, "runq_wait_ns": pl.Int64}
# the straggler's extra own time is "contention" when at least this share of it was run-queue wait
CONTENTION_SHARE = 0.5
# ...unless its own CPU time grew by at least this share of its extra own time and this share of the others'
# CPU time (the live signal's 10 %): a rank whose extra work is on its own thread waits for a CPU in
# proportion on a loaded host, and its cause is that work, not the host
OWN_CPU_SHARE = 0.25
OWN_CPU_GROWTH = 0.10


def sched_frame(run: Run) -> pl.DataFrame:
    """rank, step, cpu_ns, runq_wait_ns for every captured step that has scheduler data."""
    rows: list[tuple[int, int, int | None, int | None]] = []
    for rank, info in run.ranks.items():
        for w in info.meta.get("windows") or []:
            s = w.get("sched") if isinstance(w, dict) else None
            if not isinstance(s, dict):
                continue
            steps, cpu, wait = s.get("step") or [], s.get("cpu_ns") or [], s.get("runq_wait_ns") or []
            rows += [(rank, int(st), c, q) for st, c, q in zip(steps, cpu, wait)]
    frame = pl.DataFrame(rows, schema=SCHEMA, orient="row")
    return frame.unique(["rank", "step"], keep="last")


def one_intra_op_thread(run: Run) -> bool:
    """Every rank's every window with scheduler samples says torch ran one intra-op thread (``intra_op_threads``,
    written by ``rankscope.profile`` since 2026-11-29); False where any says more, or none says."""
    seen = [s.get("intra_op_threads") for info in run.ranks.values() for w in info.meta.get("windows") or []
            if isinstance(w, dict) and isinstance(s := w.get("sched"), dict)]
    return bool(seen) and all(t == 1 for t in seen)


def _mean_excess(j: pl.DataFrame, rank: int, col: str) -> tuple[float, float, float, int] | None:
    """Mean per step of ``col`` on ``rank`` minus the median of the other ranks' means: (excess,
    rank's mean, others' median mean, steps of ``rank``). Means, not medians: own time is the sum
    of CPU time, run-queue wait and blocked time step by step, and only means add up that way."""
    j = j.filter(pl.col(col).is_not_null())
    means = j.group_by("rank").agg(m=pl.col(col).cast(pl.Float64).mean(), n=pl.len())
    mine, others = means.filter(pl.col("rank") == rank), means.filter(pl.col("rank") != rank)
    if mine.height == 0 or others.height == 0:
        return None
    m, ref = float(mine["m"][0]), as_float(others["m"].median(), 0.0)
    return m - ref, m, ref, int(mine["n"][0])


def wait_excess(sched: pl.DataFrame, rank: int, own: pl.DataFrame, peers: list[int] | None = None
                ) -> dict[str, Any] | None:
    """How much of ``rank``'s extra own time per step was spent waiting for a CPU.

    ``own``: rank, step, own (ns) of the steps the verdict looked at. Over the steps that have
    scheduler samples on every side, the mean own time of ``rank`` minus the other ranks' (median of
    their means) is split into the training thread's CPU time and its run-queue wait (the rest is
    time blocked: sleeps, locks, I/O). ``share_of_excess`` = the run-queue wait excess that its own
    extra CPU time does not explain, over the own-time excess. Why "not explained": where ranks share
    cores, every CPU second a rank uses comes with the run-queue wait of sharing (the others' wait per
    CPU second, ``others_wait_per_cpu``). Measured at 4 ranks on 2 cores: 5.2 ms of extra host work per
    step came with 6.1 ms more wait, the others waited 0.96 s per CPU second; the raw share, 52 %, called
    the rank's own extra work "contention", the unexplained share is 9 %. Beside a CPU hog the others
    barely wait and the whole wait excess stays unexplained.
    Why means: a contended rank waits in bursts (one step +25 ms, the next +1 ms); the median of the
    per-step differences explained 38-46 % of the excess in healthy runs beside a CPU hog where the
    mean split (CPU time within +1.3 ms of the peer's) put 62-96 % of it on the run queue.
    ``peers``: the ranks it is compared with (default every other rank; a pipeline stage's rank: its replicas, as
    ``work.work_peers``, since the other stages run other layers).
    Returns None without run-queue data for ``rank`` and at least one other rank."""
    if peers is not None:
        own = own.filter(pl.col("rank").is_in([rank, *peers]))
    q = sched.filter(pl.col("runq_wait_ns").is_not_null())
    j = own.select("rank", "step", pl.col("own").cast(pl.Float64)).join(q, on=["rank", "step"], how="inner")
    wait = _mean_excess(j, rank, "runq_wait_ns")
    ex_own = _mean_excess(j, rank, "own")
    if wait is None or ex_own is None:
        return None
    cpu = _mean_excess(j, rank, "cpu_ns")
    per_cpu = wait[2] / cpu[2] if cpu and cpu[2] > 0 else 0.0
    expected = per_cpu * max(cpu[0], 0.0) if cpu else 0.0
    out: dict[str, Any] = {"runq_wait_ns": round(wait[1]), "others_median_ns": round(wait[2]),
                           "excess_ns": round(wait[0]), "own_excess_ns": round(ex_own[0]),
                           "others_wait_per_cpu": round(per_cpu, 3),
                           # the wait its own extra CPU time brings at the others' rate, and the rest
                           "expected_from_cpu_ns": round(expected), "unexplained_ns": round(wait[0] - expected),
                           "cpu_excess_ns": round(cpu[0]) if cpu else None,
                           "others_cpu_ns": round(cpu[2]) if cpu else None,
                           # the rest of the extra own time: neither running nor waiting for a CPU
                           "blocked_excess_ns": round(ex_own[0] - wait[0] - cpu[0]) if cpu else None,
                           "steps": wait[3],
                           "statistic": "mean per step, others: median of their means",
                           "source": "/proc/thread-self/schedstat (run-queue wait of the training thread)"}
    out["share_of_excess"] = round((wait[0] - expected) / ex_own[0], 3) if ex_own[0] > 0 else 0.0
    return out


def is_contention(waited: dict[str, Any]) -> bool:
    """The extra own time was the host's doing: mostly run-queue wait its own extra CPU time does not
    explain (``share_of_excess``), unless its CPU time grew by a quarter of the extra own time and by a
    tenth of the others' CPU time (both, so that a healthy rank's CPU noise on a small excess stays
    contention).
    Why the second test: tests/e2e/test_demo.py's host straggler spins 20 ms of its thread's CPU time per
    step. Beside another pytest worker's jobs (2 cores, a24facb's fresh run 7, bench/RESULTS.md) rank 1's
    run-queue wait came to at least half of its extra own time (+103 %) beyond what the other rank's wait
    per CPU second predicts, and the share alone said "contention" for a rank that did 20 ms more work.
    """
    if float(waited.get("share_of_excess") or 0.0) < CONTENTION_SHARE:
        return False
    cpu, own = waited.get("cpu_excess_ns"), float(waited.get("own_excess_ns") or 0.0)
    ref = float(waited.get("others_cpu_ns") or 0.0)
    if cpu is None or own <= 0:
        return True
    return not (float(cpu) >= OWN_CPU_SHARE * own and float(cpu) >= OWN_CPU_GROWTH * ref)


def wait_share(sched: pl.DataFrame, bd: pl.DataFrame) -> pl.DataFrame:
    """Per rank: median run-queue wait per step and its share of the median step wall time."""
    q = sched.filter(pl.col("runq_wait_ns").is_not_null())
    if q.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "runq_wait_ns": pl.Float64, "share": pl.Float64})
    walls = bd.group_by("rank").agg(wall=pl.col("wall").median().cast(pl.Float64))
    return (q.group_by("rank").agg(runq_wait_ns=pl.col("runq_wait_ns").median().cast(pl.Float64))
            .join(walls, on="rank").with_columns(share=pl.col("runq_wait_ns") / pl.col("wall"))
            .select("rank", "runq_wait_ns", "share").sort("rank"))


def compute_wait(sched: pl.DataFrame, bd: pl.DataFrame, rank: int) -> dict[str, Any] | None:
    """``wait_excess`` of ``rank``'s compute time (the breakdown's ``computing``) instead of its own time: how much
    of its extra compute per step was its training thread waiting for a CPU. Only where compute is read from the
    host thread (``source`` "host"): a device's kernels do not slow down while the thread that launched them waits
    for a CPU. None without scheduler samples (``wait_excess``) or host-side compute."""
    done = complete_steps(bd)
    host = done.filter(pl.col("source") == "host") if "source" in done.columns else done.clear()
    if host.filter(pl.col("rank") == rank).height == 0:
        return None
    return wait_excess(sched, rank, host.select("rank", "step", own=pl.col("computing")))


def work_rel(run: Run, rel: float, waited: dict[str, Any] | None) -> float:
    """The relative excess a rank's extra input work must explain (``work.is_input_imbalance``): its own time's, or on
    a CPU run whose training threads' CPU time was sampled, its CPU time's where smaller. Own time also holds the
    wait for a CPU, which grows faster than the work on a crowded host: measured, tests/e2e/test_workloads.py's LM
    job (2 ranks, 1.47x input work) beside two busy loops and two other jobs: own time +260 %, CPU time +87 %, and
    the 1.47x work "explained" too little of +260 % (called compute)."""
    if waited is None or not cpu_run(run):
        return rel
    cpu, ref = waited.get("cpu_excess_ns"), float(waited.get("others_cpu_ns") or 0.0)
    return min(rel, float(cpu) / ref) if cpu is not None and ref > 0 else rel


def cpu_run(run: Run) -> bool:
    """Every rank's training thread's CPU time is its work: every rank ran on the CPU (a device rank's thread is not
    its work), with one intra-op thread as far as the windows say (``many_intra_op_threads``)."""
    return all(str(i.meta.get("device") or "cpu") == "cpu" for i in run.ranks.values()) and \
        not many_intra_op_threads(run)


def many_intra_op_threads(run: Run) -> int | None:
    """The most intra-op threads any window says torch ran (``intra_op_threads``, written by ``rankscope.profile``
    since 2026-11-29), where more than one: then the operators' work runs on the pool's threads as well, and the
    training thread's CPU time is a part of it. None where every window that says says one (older runs say nothing:
    the demo jobs and tests/fixtures/runs ran one)."""
    seen = [s.get("intra_op_threads") for info in run.ranks.values() for w in info.meta.get("windows") or []
            if isinstance(w, dict) and isinstance(s := w.get("sched"), dict)]
    most = max((t for t in seen if isinstance(t, int)), default=1)
    return most if most > 1 else None
