"""The Python API for notebooks: a run's analyses as polars (or pandas) DataFrames.

Example (see docs/notebook.ipynb, which the tests run)::

    import rankscope
    a = rankscope.analyze("runs/exp1")        # reads the run (cached tables), runs every analysis
    a.verdict                                 # "rank 2 is slow: input imbalance, ..."
    a.breakdown()                             # per rank x step: step time, compute, exposed communication, ...
    a.per_rank()                              # medians per rank, own time
    a.table("opstats", "operators")           # any analysis table, as a polars DataFrame
    a.table("collectives", "instances", pandas=True)
    a.findings()                              # every finding: analysis, kind, title, ranks, confidence
    a.diff("runs/exp0").findings()            # what changed against a baseline, and why
    a.report("exp1.html")                     # the HTML report
    a.timeline("steps.pftrace", steps=[8, 9]) # the merged trace of a few steps

Tables keep the analyses' units: durations in ns, sizes in bytes. ``tables()`` lists what there is.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rankscope.analysis.base import Result


class Analysis:
    """A loaded run with its analysis results."""

    def __init__(self, run: Any, results: dict[str, Result]) -> None:
        self.run, self.results = run, results

    def __repr__(self) -> str:
        return f"<rankscope.Analysis {self.run.run_id}: {len(self.run.ranks)} ranks; {self.verdict}>"

    @property
    def verdict(self) -> str:
        st = self.results.get("straggler")
        return (st.summary.get("verdict", "") if st and not st.skipped else f"no verdict: {st.skipped if st else 'not run'}")

    def tables(self) -> dict[str, list[str]]:
        """Analysis name -> its table names (skipped analyses have none)."""
        return {n: list(r.tables) for n, r in self.results.items() if not r.skipped}

    def table(self, analysis: str, name: str, pandas: bool = False) -> Any:
        """One analysis table as a polars DataFrame (``pandas=True``: a pandas one)."""
        from rankscope.analysis.base import frame

        res = self.results.get(analysis)
        if res is None:
            raise KeyError(f"no analysis {analysis!r}; there are: {', '.join(self.results)}")
        if res.skipped:
            raise KeyError(f"analysis {analysis!r} was skipped: {res.skipped}")
        if name not in res.tables:
            raise KeyError(f"{analysis} has no table {name!r}; it has: {', '.join(res.tables)}")
        df = frame(res.tables[name])
        return df.to_pandas() if pandas else df

    def breakdown(self, pandas: bool = False) -> Any:
        """Per rank and step: wall (step time), computing, comm_exposed, data_wait, free (idle), ... (ns)."""
        return self.table("breakdown", "breakdown", pandas)

    def per_rank(self, pandas: bool = False) -> Any:
        """Per rank, medians over complete steps, with own time (step time minus exposed communication)."""
        return self.table("straggler", "per_rank", pandas)

    def findings(self, pandas: bool = False) -> Any:
        """Every finding of every analysis: analysis, kind, severity, title, ranks, confidence."""
        import polars as pl

        rows = [{"analysis": n, "kind": f.kind, "severity": f.severity.value, "title": f.title,
                 "ranks": list(f.ranks), "confidence": f.confidence}
                for n, r in self.results.items() for f in r.findings]
        df = pl.DataFrame(rows, schema={"analysis": pl.Utf8, "kind": pl.Utf8, "severity": pl.Utf8, "title": pl.Utf8,
                                        "ranks": pl.List(pl.Int64), "confidence": pl.Float64})
        return df.to_pandas() if pandas else df

    def diff(self, baseline: str | Path | Analysis) -> Analysis:
        """The comparison with ``baseline`` (a path or another Analysis); its tables via ``.table("diff", ...)``."""
        from rankscope.analysis.compare.diff import run_diff

        base = baseline if isinstance(baseline, Analysis) else analyze(baseline)
        d = run_diff(self.run, self.results, base.run, base.results)
        return Analysis(self.run, {"diff": d})

    def report(self, out: str | Path) -> Path:
        """Write the HTML report (self-contained) and return its path."""
        from rankscope.render.html import render

        return render(self.run, self.results, out)

    def timeline(self, out: str | Path, *, steps: list[int] | None = None, ranks: list[int] | None = None) -> Path:
        """Write the merged timeline (.pftrace, or Chrome JSON for .json / .json.gz), clocks aligned."""
        from rankscope.analysis.clock.alignment import alignment_from
        from rankscope.render.timeline import write_timeline

        return write_timeline(self.run, out, ranks=ranks, steps=steps, offsets=alignment_from(self.results))


def analyze(path: str | Path, *, analyses: list[str] | None = None, jobs: int | None = None) -> Analysis:
    """Read the run at ``path`` (a directory or an fsspec URL) and run its analyses (all by default)."""
    import os

    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    run = load_run(path, jobs=jobs or min(4, os.cpu_count() or 1), allow_missing_ranks=True)
    return Analysis(run, run_all(run, analyses))
