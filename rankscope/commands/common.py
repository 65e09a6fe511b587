"""Shared CLI pieces: loading a run with a progress bar, running analyses, printing the verdict."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rankscope.engine.memory import ALLOCATOR_ENV, lean_allocators  # noqa: F401 - the CLI's, re-exported

if TYPE_CHECKING:  # the CLI imports the model and analyses only when a verb runs
    from rich.console import Console
    from rich.progress import Progress

    from rankscope.analysis.base import Result
    from rankscope.model.run import Run

    console: Console  # stderr
    out: Console  # stdout


def _console(name: str) -> Console:
    """``console`` (stderr) or ``out`` (stdout): rich consoles made on first use, so that a run that draws no
    progress bar loads rich only to print its results, after the analyses (peak RSS, issue 26)."""
    if name not in globals():
        from rich.console import Console

        globals()[name] = Console(stderr=name == "console")
    return globals()[name]  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:
    if name in ("console", "out"):
        return _console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def escape(text: str) -> str:
    """rich's markup escape (rich imported on first use)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help="run directory, a directory of Kineto traces, or one trace file")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                   help="worker processes for ingest (default: all cores)")
    p.add_argument("--dask", metavar="ADDRESS", default=None,
                   help="ingest the ranks on Dask: 'local' (a LocalCluster of --jobs workers) or a "
                        "scheduler address like tcp://host:8786 (workers must see RUN at the same path; "
                        "pip install 'rankscope[dask]')")
    p.add_argument("--allow-missing-ranks", action="store_true",
                   help="accepted for old scripts; the default now (the ranks that are there are analyzed and "
                        "every output names the missing and damaged ones)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any rank is missing, duplicated or damaged (for scripts that want all or nothing)")
    p.add_argument("--max-inflated-size", type=size_arg, default=None, metavar="SIZE",
                   help="largest decompressed trace read, e.g. 16G (default 8G; also lifts the gzip inflation-ratio "
                        "check that stops gzip bombs)")
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


def size_arg(text: str) -> int:
    """'16G', '512M', '1000000' -> bytes (argparse type)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().rstrip("B").rstrip("I")
    try:
        n = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 16G, 512M)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"not a positive size: {text!r}")
    return int(n)


def apply_limits(args: argparse.Namespace) -> None:
    """--max-inflated-size: read by the readers in every worker (the CLI process owns its environment)."""
    if getattr(args, "max_inflated_size", None):
        os.environ["RANKSCOPE_MAX_JSON_BYTES"] = str(args.max_inflated_size)


def ensure_output_dir(path: str | None) -> None:
    """Create the folder of ``-o`` before any work (not a traceback after all of it)."""
    if not path:
        return
    from pathlib import Path

    from rankscope.errors import RankscopeError, safe

    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RankscopeError(f"{safe(path)}: cannot create its folder ({exc.strerror or exc})") from exc
    if Path(path).is_dir():
        raise RankscopeError(f"{safe(path)} is a folder; give a file name, e.g. {safe(Path(path) / 'report.html')}")


def warn(text: str) -> None:
    """One warning line on stderr: file names escaped (no terminal escapes, no rich markup)."""
    from rankscope.errors import safe

    # one line each
    _console("console").print(f"[yellow]warning:[/] {escape(safe(text))}", highlight=False, soft_wrap=True)


def coverage_lines(run: Run) -> list[str]:
    """What the results cover, said first: missing ranks (and why) and damaged ranks (and why)."""
    from rankscope.errors import safe
    from rankscope.intlist import format_int_list

    cov = run.coverage()
    lines = []
    if cov["missing"]:
        whys = {m["why"] for m in cov["missing"]}
        why = whys.pop() if len(whys) == 1 else "; ".join(f"rank {m['rank']}: {m['why']}" for m in cov["missing"][:4])
        lines.append(f"missing ranks: {format_int_list(run.missing)} of {run.world_size} ({safe(why)}); "
                     "results cover the other ranks")
    for d in cov["damaged"]:
        lines.append(f"damaged rank {d['rank']}: {safe(d['why'])}; analyzed, left out of the verdict")
    return lines


class _NoProgress:
    """What ``progress()`` gives where rich would draw nothing: the same calls, no output, rich not loaded."""

    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def add_task(self, description: str, **fields: Any) -> int:
        return 0

    def update(self, task: int, **fields: Any) -> None:
        return None


def _draws_live() -> bool:
    """Whether rich would draw a live progress bar on stderr (``Console.is_terminal``, or Jupyter); in doubt,
    True. A transient bar that is not drawn leaves nothing behind."""
    if "console" in globals():  # made already: ask it
        con = _console("console")
        return bool(con.is_terminal or con.is_jupyter)
    env = os.environ
    if "IPython" in sys.modules or env.get("TTY_COMPATIBLE") == "1" or env.get("FORCE_COLOR"):
        return True
    if env.get("TTY_COMPATIBLE") == "0":
        return False
    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError):  # no stderr, or a closed one: rich sees no terminal either
        return False


def progress() -> Progress:
    """The progress bar on stderr (transient); no-op where rich would draw none (output to a file or pipe)."""
    if not _draws_live():
        return cast("Progress", _NoProgress())  # the same calls, nothing drawn
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=_console("console"), transient=True)


def load_and_analyze(path: str, jobs: int, allow_missing: bool = True, clock_align: bool = True,
                     strict: bool = False) -> tuple[Run, dict[str, Result]]:
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    if not clock_align:  # read by rankscope.analysis.clock.alignment; the CLI process owns its environment
        os.environ["RANKSCOPE_CLOCK_ALIGN"] = "0"

    with progress() as prog:
        task = prog.add_task("reading ranks", total=None)
        run = load_run(path, jobs=jobs, strict=strict,
                       progress=lambda done, total: prog.update(task, completed=done, total=total))
        names = {"n": 0}
        atask = prog.add_task("analyzing", total=None)

        def step(name: str) -> None:
            names["n"] += 1
            prog.update(atask, description=f"analyzing: {name}", completed=names["n"])

        results = run_all(run, progress=step)
    for p in run.problems:
        warn(p)
    return run, results


def print_summary(run: Run, results: dict[str, Result], report: str | None = None) -> None:
    from rankscope.render.terminal import findings_lines, pipeline_lines, rank_table, rpc_lines

    out = _console("out")

    for line in coverage_lines(run):  # first: what the results below do not cover
        out.print(f"[yellow]{escape(line)}[/]", highlight=False, soft_wrap=True)
    st = results.get("straggler")
    if st is None or st.skipped:
        out.print(f"straggler analysis skipped: {st.skipped if st else 'not run'}")
    else:
        stragglers = {r for f in st.findings for r in f.ranks}
        out.print(rank_table(st.tables["per_rank"], stragglers))
        for line in pipeline_lines(results):  # a pipeline's stages, under the per-rank table
            out.print(f"[dim]{escape(line)}[/]", highlight=False, soft_wrap=True)
        mark = "⚠ " if stragglers else "○ " if st.summary.get("below_bar") else "✓ "  # ○: evidence under the bar
        out.print(f"[bold]{mark}{escape(st.summary['verdict'])}[/]")
        for line in st.summary.get("limits", []):
            out.print(f"[dim]  {escape(line)}[/]", highlight=False, soft_wrap=True)
    from rankscope.errors import safe

    for line in findings_lines(results) + rpc_lines(results):  # names come from the traces: escape them
        out.print(safe(line), highlight=False, markup=False)
    if report:
        out.print(f"report: {report}")
