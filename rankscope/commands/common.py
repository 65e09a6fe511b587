"""Shared CLI pieces: loading a run with a progress bar, running analyses, printing the verdict."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:  # the CLI imports the model and analyses only when a verb runs
    from rankscope.analysis.base import Result
    from rankscope.model.run import Run

console = Console(stderr=True)
out = Console()


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run directory, a directory of Kineto traces, or one trace file")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                   help="worker processes for ingest (default: all cores)")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="ingest the ranks on Dask: 'local' (a LocalCluster of --jobs workers) or a "
                        "scheduler address like tcp://host:8786 (workers must see RUN at the same path; "
                        "pip install 'rankscope[dask]')")
    p.add_argument("--allow-missing-ranks", action="store_true",
                   help="analyze the ranks that are there when some are missing or duplicated")
    p.add_argument("--no-clock-align", dest="clock_align", action="store_false",
                   help="trust every rank's own clock (no offsets from anchors or matched collectives)")


def default_output(run: str, name: str) -> Path:
    """Where an output goes without -o: inside a local run directory, beside a run file, and in the
    current directory (``<run name>.<name>``) for a run on remote storage."""
    from rankscope.store import source

    if source.is_url(run):
        return Path(f"{run.rstrip('/').rsplit('/', 1)[-1]}.{name}")
    p = Path(source.local_path(run))
    return p / name if p.is_dir() else p.with_suffix(f".{name}")


def progress() -> Progress:
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console, transient=True)


def load_and_analyze(path: str, jobs: int, allow_missing: bool, clock_align: bool = True
                     ) -> tuple[Run, dict[str, Result]]:
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    if not clock_align:  # read by rankscope.analysis.clock.align; the CLI process owns its environment
        os.environ["RANKSCOPE_CLOCK_ALIGN"] = "0"

    with progress() as prog:
        task = prog.add_task("reading ranks", total=None)
        run = load_run(path, jobs=jobs, allow_missing_ranks=allow_missing,
                       progress=lambda done, total: prog.update(task, completed=done, total=total))
        names = {"n": 0}
        atask = prog.add_task("analyzing", total=None)

        def step(name: str) -> None:
            names["n"] += 1
            prog.update(atask, description=f"analyzing: {name}", completed=names["n"])

        results = run_all(run, progress=step)
    for p in run.problems:
        console.print(f"[yellow]warning:[/] {p}", highlight=False)
    return run, results


def print_summary(run: Run, results: dict[str, Result], report: str | None = None) -> None:
    from rankscope.render.terminal import findings_lines, rank_table

    st = results.get("straggler")
    if st is None or st.skipped:
        out.print(f"straggler analysis skipped: {st.skipped if st else 'not run'}")
    else:
        stragglers = {r for f in st.findings for r in f.ranks}
        out.print(rank_table(st.tables["per_rank"], st.summary["verdict"], stragglers))
        out.print(f"[bold]{'⚠ ' if stragglers else '✓ '}{st.summary['verdict']}[/]")
    for line in findings_lines(results):
        out.print(line, highlight=False, markup=False)
    if run.missing:
        from rankscope.intlist import format_int_list

        out.print(f"[yellow]missing ranks: {format_int_list(run.missing)} (results cover the other ranks)[/]")
    if report:
        out.print(f"report: {report}")
