"""The registry of analyses (data, not if/elif chains) and the runner over it."""
from __future__ import annotations

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
    ("breakdown", "breakdown", "run_breakdown",
     "per-rank × per-step time breakdown (compute, exposed comm, data, idle)", ("steps",), (), True),
    ("hta_temporal", "hta_compat", "run_hta_temporal",
     "HTA-compatible temporal breakdown (idle / compute / non-compute)", ("kernels",), (), True),
    ("clock", "clock", "run_clock", "per-rank clock offsets to rank 0 (anchors + matched collectives)",
     (), (), False),
    ("links", "links", "run_links", "slow links / groups: transfer-time outliers among peer groups",
     (), ("clock",), False),
    ("straggler", "straggler", "run_straggler", "which rank the others wait for, and why",
     (), ("breakdown",), False),
    ("trajectory", "trajectory", "run_trajectory", "iteration gap, forward+backward and iteration tail per step",
     (), ("breakdown",), False),
    ("collectives", "collectives", "run_collectives",
     "collectives matched across ranks: arrival skew, wait, bandwidth", ("collectives",), (), False),
    ("comm_matrix", "comm_matrix", "run_comm_matrix", "rank × rank bytes, time and bandwidth; process-group map",
     ("collectives",), ("collectives",), False),
    ("opstats", "opstats", "run_opstats", "cross-rank operator and kernel statistics (top-N)", (), (), True),
    ("kernels", "kernels", "run_kernels", "kernel classes, launch statistics, idle-time breakdown (HTA parity)",
     ("kernels",), (), True),
    ("memory", "memory", "run_memory", "allocated / reserved memory over time, peak and operator at peak",
     ("memory",), (), True),
    ("advice", "advice", "run_advice",
     "rules with thresholds: data loading, exposed comm, host gaps, memory, ...", (), ("breakdown",), False),
    ("capture", "capture", "run_capture", "captured steps per rank: window mismatch, idle ranks, dropped windows",
     (), (), False),
)


def _builtin() -> None:
    import importlib

    for name, module, fn, description, needs, after, shared in BUILTIN:
        m = importlib.import_module(f"rankscope.analysis.{module}")
        register(Analysis(name, description, getattr(m, fn), needs=needs, after=after,
                          rank_part=m.rank_part if shared else None, combine=m.combine if shared else None))


def per_rank_pass(run: Run, analyses: list[Analysis]) -> dict[str, list[tuple[int, Any]]]:
    """One walk over the ranks: each rank's events are read once (``RankData``) and given to the
    ``rank_part`` of every analysis listed; only one rank's events are in memory at a time."""
    from rankscope.analysis.rankdata import RankData

    parts: dict[str, list[tuple[int, Any]]] = {a.name: [] for a in analyses}
    for r in run.rank_ids:
        data = RankData(run, r)
        for a in analyses:
            assert a.rank_part is not None
            parts[a.name].append((r, a.rank_part(data)))
        del data
    return parts


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
