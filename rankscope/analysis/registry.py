"""The registry of analyses (data, not if/elif chains) and the runner over it."""
from __future__ import annotations

from typing import Callable

from rankscope.analysis.base import Analysis, Result
from rankscope.model.run import Run

REGISTRY: dict[str, Analysis] = {}


def register(a: Analysis) -> Analysis:
    REGISTRY[a.name] = a
    return a


def _builtin() -> None:
    from rankscope.analysis import breakdown, hta_compat, straggler

    register(Analysis("breakdown", "per-rank × per-step time breakdown (compute, exposed comm, data, idle)",
                      breakdown.run_breakdown, needs=("steps",)))
    register(Analysis("hta_temporal", "HTA-compatible temporal breakdown (idle / compute / non-compute)",
                      hta_compat.run_hta_temporal, needs=("kernels",)))
    from rankscope.analysis import clock, links

    register(Analysis("clock", "per-rank clock offsets to rank 0 (anchors + matched collectives)", clock.run_clock))
    register(Analysis("links", "slow links / groups: transfer-time outliers among peer groups", links.run_links,
                      after=("clock",)))
    register(Analysis("straggler", "which rank the others wait for, and why",
                      straggler.run_straggler, after=("breakdown",)))
    from rankscope.analysis import collectives, comm_matrix, kernels, memory, opstats, trajectory

    register(Analysis("trajectory", "iteration gap, forward+backward and iteration tail per step",
                      trajectory.run_trajectory, after=("breakdown",)))
    register(Analysis("collectives", "collectives matched across ranks: arrival skew, wait, bandwidth",
                      collectives.run_collectives, needs=("collectives",)))
    register(Analysis("comm_matrix", "rank × rank bytes, time and bandwidth; process-group map",
                      comm_matrix.run_comm_matrix, needs=("collectives",), after=("collectives",)))
    register(Analysis("opstats", "cross-rank operator and kernel statistics (top-N)", opstats.run_opstats))
    register(Analysis("kernels", "kernel classes, launch statistics, idle-time breakdown (HTA parity)",
                      kernels.run_kernels, needs=("kernels",)))
    register(Analysis("memory", "allocated / reserved memory over time, peak and operator at peak",
                      memory.run_memory, needs=("memory",)))
    from rankscope.analysis import advice

    register(Analysis("advice", "rules with thresholds: data loading, exposed comm, host gaps, memory, ...",
                      advice.run_advice, after=("breakdown",)))
    from rankscope.analysis import capture

    register(Analysis("capture", "captured steps per rank: window mismatch, idle ranks, dropped windows",
                      capture.run_capture))


def run_all(run: Run, names: list[str] | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Result]:
    """Run the analyses in registry order; one whose inputs are missing is skipped with a reason."""
    if not REGISTRY:
        _builtin()
    results: dict[str, Result] = {}
    for name, a in REGISTRY.items():
        if names and name not in names:
            continue
        if progress:
            progress(name)
        missing = [d for d in a.after if d not in results or results[d].skipped]
        if missing:
            results[name] = Result(name, skipped=f"needs {', '.join(missing)}, which did not run")
            continue
        results[name] = a.run(run, results)
    return results
