"""The registry of analyses (data, not if/elif chains) and the runner over it."""
from __future__ import annotations

import os
from typing import Any, Callable

from rankscope.analysis.base import Analysis, Result
from rankscope.model.run import Run

REGISTRY: dict[str, Analysis] = {}


def register(a: Analysis) -> Analysis:
    REGISTRY[a.name] = a
    return a


# The built-in analyses, in the order they run: (name, module, run function, description,
# needs, after, shared). "shared" ones also expose rank_part/combine for the one-pass walk.
BUILTIN: tuple[tuple[str, str, str, str, tuple[str, ...], tuple[str, ...], bool], ...] = (
    ("breakdown", "steps.breakdown", "run_breakdown",
     "per-rank × per-step time breakdown (compute, exposed comm, data, idle)", ("steps",), (), True),
    ("hta_temporal", "compat.hta", "run_hta_temporal",
     "HTA-compatible temporal breakdown (idle / compute / non-compute)", ("kernels",), (), True),
    ("clock", "clock.alignment", "run_clock", "per-rank clock offsets to rank 0 (anchors + matched collectives)",
     (), (), False),
    ("links", "comm.links", "run_links", "slow links / groups: transfer-time outliers among peer groups",
     (), ("clock",), False),
    ("straggler", "diagnosis.straggler", "run_straggler", "which rank the others wait for, and why",
     (), ("breakdown",), False),
    ("trajectory", "steps.trajectory", "run_trajectory", "iteration gap, forward+backward and iteration tail per step",
     (), ("breakdown",), False),
    ("collectives", "comm.collectives", "run_collectives",
     "collectives matched across ranks: arrival skew, wait, bandwidth", ("collectives",), (), False),
    ("comm_matrix", "comm.matrix", "run_comm_matrix", "rank × rank bytes, time and bandwidth; process-group map",
     ("collectives",), ("collectives",), False),
    ("opstats", "steps.opstats", "run_opstats", "cross-rank operator and kernel statistics (top-N)", (), (), True),
    ("kernels", "gpu.kernels", "run_kernels", "kernel classes, launch statistics, idle-time breakdown (HTA parity)",
     ("kernels",), (), True),
    ("memory", "steps.memory", "run_memory", "allocated / reserved memory over time, peak and operator at peak",
     ("memory",), (), True),
    ("advice", "diagnosis.advice", "run_advice",
     "rules with thresholds: data loading, exposed comm, host gaps, memory, ...", (), ("breakdown",), False),
    ("ascend_cluster", "compat.ascend_cluster", "run_ascend_cluster",
     "msprof-analyze cluster files (step trace, communication, matrix, groups) from torch_npu summaries",
     (), (), False),
    ("hang", "hang", "run_hang", "collective recorder dumps matched across ranks: hangs and desyncs", (), (), False),
    ("rpc", "comm.rpc", "run_rpc", "RPC calls: per destination, remote time vs network + queueing, slowest functions",
     (), (), False),
    ("capture", "steps.capture", "run_capture", "captured steps per rank: window mismatch, idle ranks, dropped windows",
     (), (), False),
    ("kernel_breakdown", "gpu.kernel_breakdown", "run_kernel_breakdown",
     "kernel time per class with overlap labels; per-rank per-kernel sum / min / max / mean / std (HTA parity)",
     ("kernels",), (), True),
    ("gpu_idle", "gpu.idle_time", "run_gpu_idle", "GPU idle time per stream: host wait, kernel wait, other (HTA parity)",
     ("kernels",), (), True),
    ("launch_delay", "gpu.launch_delay", "run_launch_delay",
     "kernel launch delay after the runtime call ends; slow runtime calls (HTA parity)", ("kernels",), (), True),
    ("queue_length", "gpu.queue_length", "run_queue_length",
     "launch queue length per stream: series, summary, time at a full queue (HTA parity)", ("kernels",), (), True),
    ("memory_bw", "gpu.memory_bw", "run_memory_bw", "memcpy / memset bandwidth per copy kind (HTA parity)",
     ("kernels",), (), True),
    ("annotations", "gpu.annotations", "run_annotations",
     "user annotations on GPU and CPU; each kernel with its annotation (HTA parity)", (), (), True),
    ("aten_kernels", "gpu.aten_kernels", "run_aten_kernels",
     "aten operator -> kernels launched, operator and runtime launch delays (HTA parity)", ("kernels",), (), True),
    ("kernel_sequences", "gpu.kernel_sequences", "run_kernel_sequences",
     "frequent kernel sequences launched per operator (HTA parity)", ("kernels",), (), True),
    ("cupti_counters", "gpu.cupti_counters", "run_cupti_counters",
     "CUPTI range-profiler counters per kernel with its operator stack (HTA parity)", (), (), True),
    ("critical_path", "deps.analysis", "run_critical_path",
     "per step, the chain of dependencies across ranks that bounds it; what each rank costs (what-if)", (), (), True),
)


def _builtin() -> None:
    import importlib

    for name, module, fn, description, needs, after, shared in BUILTIN:
        m = importlib.import_module(f"rankscope.analysis.{module}")
        register(Analysis(name, description, getattr(m, fn), needs=needs, after=after,
                          rank_part=m.rank_part if shared else None, combine=m.combine if shared else None))


def per_rank_pass(run: Run, analyses: list[Analysis]) -> dict[str, list[tuple[int, Any]]]:
    """One walk over the ranks: each rank's events are read once (``RankData``) and given to the
    ``rank_part`` of every analysis listed; only one rank's events are in memory at a time.

    With a Dask cluster configured (``$RANKSCOPE_DASK``, the CLI's ``--dask``) the walk runs on the
    workers, one task per rank; each task gets only its own rank's summary and sends back only the
    small per-rank parts."""
    parts: dict[str, list[tuple[int, Any]]] = {a.name: [] for a in analyses}
    dask = os.environ.get("RANKSCOPE_DASK")
    fns = tuple((a.name, a.rank_part) for a in analyses)
    if dask and len(run.ranks) > 1:
        from rankscope.engine.executors import run_tasks

        got = run_tasks(rank_parts, [(run.only(r), fns) for r in run.rank_ids], jobs=os.cpu_count() or 1,
                        dask=dask)
    else:
        got = [rank_parts((run, fns), r) for r in run.rank_ids]
    for r, per in zip(run.rank_ids, got):
        for name, part in per.items():
            parts[name].append((r, part))
    return parts


def rank_parts(task: tuple[Run, tuple[tuple[str, Any], ...]], rank: int | None = None) -> dict[str, Any]:
    """Every listed ``rank_part`` on one rank's ``RankData`` (a module-level function: it runs on
    Dask workers). ``rank`` defaults to the run's only rank (``Run.only``)."""
    from rankscope.analysis.rankdata import RankData

    run, fns = task
    data = RankData(run, run.rank_ids[0] if rank is None else rank)
    return {name: fn(data) for name, fn in fns}


def run_all(run: Run, names: list[str] | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Result]:
    """Run the analyses in registry order; one whose inputs are missing is skipped with a reason.

    The per-rank work of the analyses with a ``rank_part`` runs first, in one pass over the ranks
    (progress is told "per-rank pass"); each of them then only combines its per-rank parts."""
    if not REGISTRY:
        _builtin()
    results: dict[str, Result] = {}
    todo = [a for n, a in REGISTRY.items() if a.rank_part is not None and (not names or n in names)]
    parts: dict[str, list[tuple[int, Any]]] = {}
    if todo:
        if progress:
            progress("per-rank pass")
        parts = per_rank_pass(run, todo)
    for name, a in REGISTRY.items():
        if names and name not in names:
            continue
        if progress:
            progress(name)
        missing = [d for d in a.after if d not in results or results[d].skipped]
        if missing:
            results[name] = Result(name, skipped=f"needs {', '.join(missing)}, which did not run")
            continue
        results[name] = a.combine(run, parts.pop(name), results) if a.combine and name in parts \
            else a.run(run, results)
    return results
