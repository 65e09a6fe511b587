"""The registry of analyses and the runner over it.

Each analysis declares itself where it lives (``ANALYSIS = Analysis(...)`` at the end of its module: name,
needs, what it runs after, its view); the registry finds those modules under ``rankscope.analysis`` and
orders them by their dependencies. Adding an analysis touches its own module only."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from rankscope.analysis.base import Analysis, Result
from rankscope.model.run import Run

REGISTRY: dict[str, Analysis] = {}
_LOADED: list[bool] = []


def register(a: Analysis) -> Analysis:
    """Add an analysis that lives outside ``rankscope.analysis`` (a plugin); it runs in dependency order
    with the built-in ones."""
    REGISTRY[a.name] = a
    if _LOADED:
        _reorder(list(REGISTRY.values()))
    return a


def analyses() -> dict[str, Analysis]:
    """Every analysis by name, in the order they run (the built-in ones found on first use)."""
    if not _LOADED:
        _builtin()
    return REGISTRY


def _declaring_modules() -> list[str]:
    """Modules under ``rankscope.analysis`` that declare ``ANALYSIS = Analysis(...)``, found by reading the
    package's files (cheap: only those modules are imported), in a stable order."""
    root = Path(__file__).parent
    out = []
    for p in sorted(root.rglob("*.py")):
        if "\nANALYSIS = Analysis(" in p.read_text(encoding="utf-8"):
            parts = p.relative_to(root).with_suffix("").parts
            out.append(".".join(("rankscope.analysis",) + (parts[:-1] if parts[-1] == "__init__" else parts)))
    return out


def ordered(analyses: list[Analysis]) -> list[Analysis]:
    """Dependency order: each after the analyses it names in ``after`` and ``uses``; among those free to
    run, the order of the report's groups (``GROUPS``), then the module's name."""
    names = {a.name for a in analyses}
    left = sorted(analyses, key=lambda a: (_group_rank(a), a.name))
    done: set[str] = set()
    out: list[Analysis] = []
    while left:
        ready = next((a for a in left if all(d in done or d not in names for d in a.after + a.uses)), None)
        if ready is None:
            raise RuntimeError("analyses wait for each other: " + ", ".join(a.name for a in left))
        out.append(ready)
        done.add(ready.name)
        left.remove(ready)
    return out


# The order of the analyses' groups (sub-packages) when nothing else decides: the steps first, the
# cross-rank edges and the diagnosis that reads them next, the device and compatibility outputs last.
GROUPS = ("steps", "clock", "comm", "diagnosis", "deps", "gpu", "compat", "hang", "compare")


def _group_rank(a: Analysis) -> int:
    mod = getattr(a.run, "__module__", "") or ""
    group = mod.split(".")[2] if mod.count(".") >= 2 else ""
    return GROUPS.index(group) if group in GROUPS else len(GROUPS)


def _builtin() -> None:
    import importlib

    found = [getattr(importlib.import_module(m), "ANALYSIS") for m in _declaring_modules()]
    plugins = [a for a in REGISTRY.values() if a.name not in {f.name for f in found}]
    _reorder([a for a in found if isinstance(a, Analysis)] + plugins)
    _LOADED.append(True)


def _reorder(every: list[Analysis]) -> None:
    REGISTRY.clear()
    REGISTRY.update((a.name, a) for a in ordered(every))


def per_rank_pass(run: Run, analyses: list[Analysis]) -> dict[str, list[tuple[int, Any]]]:
    """One walk over the ranks: each rank's events are read once (``RankData``) and given to the
    ``rank_part`` of every analysis listed; only one rank's events are in memory at a time, and only
    while the parts that read them (``Analysis.rank_reads``) run (``rank_parts``).

    With a Dask cluster configured (``$RANKSCOPE_DASK``, the CLI's ``--dask``) the walk runs on the
    workers, one task per rank; each task gets only its own rank's summary and sends back only the
    small per-rank parts."""
    parts: dict[str, list[tuple[int, Any]]] = {a.name: [] for a in analyses}
    dask = os.environ.get("RANKSCOPE_DASK")
    late = [a for a in analyses if "events" not in a.rank_reads]
    both = [a for a in analyses if a not in late and len(a.rank_reads) > 1]
    first = [a for a in analyses if a not in late and a not in both]
    fns = (tuple((a.name, a.rank_part) for a in first), tuple((a.name, a.rank_part) for a in both),
           tuple((a.name, a.rank_part) for a in late),
           tuple(sorted({k for a in late + both for k in a.rank_reads if k != "events"})))
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


Parts = tuple[tuple[str, Any], ...]


def rank_parts(task: tuple[Run, tuple[Parts, Parts, Parts, tuple[str, ...]]],
               rank: int | None = None) -> dict[str, Any]:
    """Every listed ``rank_part`` on one rank's ``RankData`` (a module-level function: it runs on
    Dask workers). ``task`` is (run, (parts that read only the events, parts that read the events and
    memoized tables, parts that read only memoized tables, the names of those tables)); ``rank``
    defaults to the run's only rank (``Run.only``).

    In that order, so that a rank's events and the tables made from them are held together only as long
    as needed (issue 26): the events-only parts (and the events side of those that return a ``Later``),
    then the memoized tables are made (the HTA view), the parts that read both, then the events are freed,
    and the parts that read only the memoized tables run, then the ``Later``s."""
    from rankscope.analysis.rankdata import Later, RankData

    run, (first, both, late, keep) = task
    data = RankData(run, run.rank_ids[0] if rank is None else rank)
    out = {name: fn(data) for name, fn in first}
    later = {name: p for name, p in out.items() if isinstance(p, Later)}
    keep = tuple(sorted({*keep, *(k for p in later.values() for k in p.reads)}))
    data.prepare(keep, narrow=not both)
    out.update((name, fn(data)) for name, fn in both)
    if late or later:
        data.release(keep)  # the events table and its derived arrays: ~20 MB on a large rank (bench/RESULTS.md)
        # the Laters last: the view sides of gpu_idle, kernel_breakdown and memory_bw fault in much library code
        # that the largest transients (aten_kernels, kernel_sequences) need not sit on (-2 MB peak, bench/RESULTS.md)
        out.update((name, fn(data)) for name, fn in late)
        out.update((name, p.fn(data)) for name, p in later.items())
    return out


def run_all(run: Run, names: list[str] | None = None,
            progress: Callable[[str], None] | None = None) -> dict[str, Result]:
    """Run the analyses in registry order; one whose inputs are missing is skipped with a reason.

    The per-rank work of the analyses with a ``rank_part`` runs first, in one pass over the ranks
    (progress is told "per-rank pass"); each of them then only combines its per-rank parts."""
    analyses()
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
