"""The registry of analyses (data, not if/elif chains) and the runner over it."""
from __future__ import annotations

from typing import Any, Callable

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


def _shared() -> dict[str, tuple[Callable[[Any], Any], Callable[..., Result]]]:
    """Analyses with a per-rank step over one shared read of a rank's events: name ->
    (step(RankData) -> per-rank part, combine(run, [(rank, part)], results) -> Result)."""
    from rankscope.analysis import breakdown, hta_compat, kernels, memory, opstats

    return {"breakdown": (breakdown.rank_part, breakdown.combine),
            "hta_temporal": (hta_compat.rank_part, hta_compat.combine),
            "opstats": (opstats.rank_part, opstats.combine),
            "kernels": (kernels.rank_part, kernels.combine),
            "memory": (memory.rank_part, memory.combine)}


def per_rank_pass(run: Run, names: list[str]) -> dict[str, list[tuple[int, Any]]]:
    """One walk over the ranks: each rank's events are read once (``RankData``) and given to the
    per-rank step of every analysis in ``names``; only one rank's events are in memory at a time."""
    from rankscope.analysis.rankdata import RankData

    steps = {n: _shared()[n][0] for n in names}
    parts: dict[str, list[tuple[int, Any]]] = {n: [] for n in names}
    for r in run.rank_ids:
        data = RankData(run, r)
        for n, step in steps.items():
            parts[n].append((r, step(data)))
        del data
    return parts


def run_all(run: Run, names: list[str] | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Result]:
    """Run the analyses in registry order; one whose inputs are missing is skipped with a reason.

    The per-rank work of the analyses in ``_shared()`` runs first, in one pass over the ranks
    (progress is told "per-rank pass"); each of them then only combines its per-rank parts."""
    if not REGISTRY:
        _builtin()
    results: dict[str, Result] = {}
    shared = _shared()
    todo = [n for n in REGISTRY if n in shared and (not names or n in names)]
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
        results[name] = shared[name][1](run, parts.pop(name), results) if name in parts else a.run(run, results)
    return results
