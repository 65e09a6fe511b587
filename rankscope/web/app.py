"""The web UI: list the runs under a directory, show each run's report views, compare two runs.

Read-only: only GET routes; nothing under the directory is written except the ingest cache that
``load_run`` keeps in each run. ``/runs/NAME/timeline?format=perfetto|json&steps=3-4&ranks=0-7``
serves the run's merged multi-rank timeline, made on demand (clock offsets refined with matched
collectives, as ``rankscope timeline`` does) and cached as files in a private temporary directory.
A run is named by its directory name; names are checked against a strict pattern and against the
listing itself, so ``../`` and names that are not runs under the directory are refused (400 / 404)
before any path is built; the timeline's filters must look like ``3-4`` or ``0,2,5-7``.

Example::

    import uvicorn
    from rankscope.web.app import create_app
    uvicorn.run(create_app("rankscope-runs"), host="127.0.0.1", port=8765)
"""
from __future__ import annotations

import contextlib
import hashlib
import html
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from rankscope.errors import RankscopeError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
SPEC = re.compile(r"^[0-9,\- ]{0,200}$")  # a --steps / --ranks filter: "3-4", "0,2,5-7"
FORMATS = {"perfetto": (".pftrace", "application/octet-stream"), "json": (".json", "application/json")}
_TRACE = (".json", ".json.gz")


def is_run(d: Path) -> bool:
    """A rankscope run directory, or a directory holding Kineto traces."""
    if not d.is_dir() or d.is_symlink():
        return False
    if (d / "run.json").is_file() or (d / "ranks").is_dir():
        return True
    return any(p.name.endswith(_TRACE) and p.is_file() for p in d.iterdir())


def list_runs(root: Path) -> list[str]:
    """Names of the runs directly under ``root``."""
    return sorted(d.name for d in root.iterdir() if NAME.match(d.name) and is_run(d))


class Runs:
    """Resolves run names safely and caches rendered pages per (names, modification times)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self._cache: dict[tuple[Any, ...], str] = {}
        self._lock = threading.Lock()

    def path(self, name: str) -> Path | None:
        """The run directory of ``name``, or None when it is not a run under the root."""
        if not NAME.match(name) or name not in list_runs(self.root):
            return None
        p = (self.root / name).resolve()
        return p if p.parent == self.root else None

    def page(self, name: str, baseline: str | None = None) -> str:
        """The report page of ``name`` (with a diff view against ``baseline``), rendered once."""
        a = self.path(name)
        b = self.path(baseline) if baseline else None
        assert a is not None and (baseline is None or b is not None)
        key = (name, _stamp(a), baseline, _stamp(b) if b else None)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._render(a, b)
            return self._cache[key]

    def _render(self, a: Path, b: Path | None) -> str:
        from rankscope.analysis.registry import run_all
        from rankscope.model.run import load_run
        from rankscope.render.html import build

        run = load_run(a, jobs=1, allow_missing_ranks=True)
        results = run_all(run)
        diff = None
        if b is not None:
            from rankscope.analysis.diff import run_diff

            base = load_run(b, jobs=1, allow_missing_ranks=True)
            diff = run_diff(run, results, base, run_all(base))
        return build(run, results, diff=diff, nav_extra=self.switcher(a.name, b.name if b else None),
                     timeline_html=timeline_form(a.name))

    def switcher(self, current: str, baseline: str | None) -> str:
        """Header links: back to the list, and a form to switch run or compare with another."""
        opts = lambda sel: "".join(  # noqa: E731
            f'<option value="{html.escape(n)}"{" selected" if n == sel else ""}>{html.escape(n)}</option>'
            for n in list_runs(self.root))
        return (f'<form class="sub" action="/compare" method="get" id="switcher"><a href="/" style="color:#9cc3ff">'
                f'all runs</a> · run <select name="run" id="pick-run">{opts(current)}</select> vs baseline '
                f'<select name="baseline" id="pick-baseline"><option value="">(none)</option>{opts(baseline)}'
                f'</select> <button type="submit" id="go">show</button></form>')


def timeline_form(name: str) -> str:
    """The report's timeline hint in the web UI: a form that downloads the run's merged timeline."""
    n = html.escape(name)
    return (f'<form action="/runs/{n}/timeline" method="get" id="timeline-form"><a id="timeline-link" '
            f'href="/runs/{n}/timeline">download the merged timeline</a> of all ranks, or only steps '
            '<input name="steps" size="8" placeholder="e.g. 3-4"> ranks <input name="ranks" size="8" '
            'placeholder="e.g. 0-7"> as <select name="format"><option value="perfetto">Perfetto (.pftrace)</option>'
            '<option value="json">Chrome JSON</option></select> <button type="submit">download</button>'
            '<p class="muted">open it in ui.perfetto.dev (it loads locally in your browser; nothing is '
            "uploaded); keep it small with steps and ranks</p></form>")


class Timelines:
    """Merged timelines of the runs, made on demand and kept as files (the ``keep`` most recent)."""

    def __init__(self, runs: Runs, keep: int = 8) -> None:
        self.runs = runs
        self.keep = keep
        self.dir: Path | None = None
        self._made: OrderedDict[tuple[Any, ...], Path] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str, fmt: str, steps: list[int] | None, ranks: list[int] | None) -> Path:
        """The timeline file of run ``name`` (a run under the root) for these filters."""
        from rankscope.model.run import load_run
        from rankscope.render.timeline import aligned_offsets, write_timeline

        a = self.runs.path(name)
        assert a is not None
        key = (name, _stamp(a), fmt, tuple(steps or ()), tuple(ranks or ()))
        with self._lock:
            if key in self._made and self._made[key].exists():
                self._made.move_to_end(key)
                return self._made[key]
            if self.dir is None:
                self.dir = Path(tempfile.mkdtemp(prefix="rankscope-timelines-"))
            out = self.dir / (hashlib.sha256(repr(key).encode()).hexdigest()[:32] + FORMATS[fmt][0])
            run = load_run(a, jobs=1, allow_missing_ranks=True)
            tmp = write_timeline(run, out.with_name(out.name + ".part"), fmt=fmt, steps=steps, ranks=ranks,
                                 offsets=aligned_offsets(run))
            os.replace(tmp, out)
            self._made[key] = out
            while len(self._made) > self.keep:
                self._made.popitem(last=False)[1].unlink(missing_ok=True)
            return out

    def close(self) -> None:
        """Remove the cached files."""
        with self._lock:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
            self.dir, self._made = None, OrderedDict()


def _stamp(p: Path) -> tuple[tuple[str, int, int], ...]:
    """A cheap change marker: name, size and mtime of each entry of the run and of its ranks/ folder.

    Our own ``analysis/`` folder (the Parquet cache, reports) is left out: analyzing a run must not make
    it look changed. The run directory's own mtime is left out for the same reason (creating
    ``analysis/`` touches it); added or removed entries show up as names instead.
    """
    if not p.is_dir():
        st = p.stat()
        return ((p.name, st.st_size, st.st_mtime_ns),)
    items = [x for x in p.iterdir() if x.name != "analysis"]
    if (p / "ranks").is_dir():
        items += list((p / "ranks").iterdir())
    out = []
    for x in items:
        try:
            st = x.stat()
        except OSError:
            continue
        out.append((str(x.relative_to(p)), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def _index(runs: Runs) -> str:
    names = list_runs(runs.root)
    items = "".join(f'<li><a class="run" href="/runs/{html.escape(n)}">{html.escape(n)}</a></li>' for n in names)
    body = f"<ul>{items}</ul>" if names else f"<p>no runs under {html.escape(str(runs.root))}</p>"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
            f'<title>rankscope runs</title>'
            f'<style>body{{font-family:system-ui,sans-serif;margin:24px;color:#1d2330}}</style></head><body>'
            f"<h1>rankscope · runs under {html.escape(str(runs.root))}</h1>{body}"
            f"{runs.switcher(names[0], None) if names else ''}</body></html>")


def create_app(root: str | Path) -> Starlette:
    """The ASGI app serving the runs under ``root`` read-only."""
    runs = Runs(root)
    timelines = Timelines(runs)

    async def index(request: Request) -> Response:
        return HTMLResponse(_index(runs))

    async def api_runs(request: Request) -> Response:
        return JSONResponse({"root": str(runs.root), "runs": list_runs(runs.root)})

    async def show(request: Request) -> Response:
        return await _page(runs, request.path_params["name"], None)

    async def compare(request: Request) -> Response:
        q = request.query_params
        return await _page(runs, q.get("run", ""), q.get("baseline") or None)

    async def timeline(request: Request) -> Response:
        return await _timeline(timelines, request.path_params["name"], request.query_params)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        timelines.close()

    return Starlette(routes=[Route("/", index), Route("/api/runs", api_runs), Route("/runs/{name}", show),
                             Route("/runs/{name}/timeline", timeline), Route("/compare", compare)],
                     lifespan=lifespan)


def _refusal(runs: Runs, name: str) -> Response | None:
    """400 for what is not a run name, 404 for a name that is not a run under the root; None when fine."""
    if not NAME.match(name):
        return HTMLResponse(f"refused: {html.escape(name)!s} is not a run name", status_code=400)
    if runs.path(name) is None:
        return HTMLResponse(f"not found: no run named {html.escape(name)} here", status_code=404)
    return None


async def _timeline(timelines: Timelines, name: str, q: Any) -> Response:
    refused = _refusal(timelines.runs, name)
    if refused is not None:
        return refused
    fmt, steps, ranks = q.get("format") or "perfetto", q.get("steps", ""), q.get("ranks", "")
    if fmt not in FORMATS or not SPEC.match(steps) or not SPEC.match(ranks):
        return PlainTextResponse("refused: format is perfetto or json; steps and ranks look like 3-4 or 0,2,5-7",
                                 status_code=400)
    try:
        from rankscope.render.timeline import parse_ints

        path = await run_in_threadpool(timelines.get, name, fmt, parse_ints(steps, "steps"),
                                       parse_ints(ranks, "ranks"))
    except RankscopeError as exc:
        return PlainTextResponse(f"cannot make the timeline of {name}: {exc}", status_code=400)
    except Exception as exc:  # noqa: BLE001 - a broken run gets an error, the server stays up
        return PlainTextResponse(f"cannot make the timeline of {name}: {type(exc).__name__}: {exc}", status_code=500)
    return FileResponse(path, media_type=FORMATS[fmt][1], filename=f"{name}-timeline{FORMATS[fmt][0]}")


async def _page(runs: Runs, name: str, baseline: str | None) -> Response:
    for n in [name] + ([baseline] if baseline else []):
        refused = _refusal(runs, n)
        if refused is not None:
            return refused
    try:
        page = await run_in_threadpool(runs.page, name, baseline)
    except Exception as exc:  # noqa: BLE001 - a broken run gets an error page, the server stays up
        return HTMLResponse(f"cannot show {html.escape(name)}: {html.escape(str(exc))}", status_code=500)
    return HTMLResponse(page)
