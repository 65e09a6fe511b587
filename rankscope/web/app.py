"""The web UI: list the runs under a directory, show each run's report views, compare two runs.

Read-only: only GET routes; nothing under the directory is written except the ingest cache that
``load_run`` keeps in each run. A run is named by its directory name; names are checked against
a strict pattern and against the listing itself, so ``../`` and names that are not runs under the
directory are refused (400 / 404) before any path is built.

Example::

    import uvicorn
    from rankscope.web.app import create_app
    uvicorn.run(create_app("rankscope-runs"), host="127.0.0.1", port=8765)
"""
from __future__ import annotations

import html
import re
import threading
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
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
        return build(run, results, diff=diff, nav_extra=self.switcher(a.name, b.name if b else None))

    def switcher(self, current: str, baseline: str | None) -> str:
        """Header links: back to the list, and a form to switch run or compare with another."""
        opts = lambda sel: "".join(  # noqa: E731
            f'<option value="{html.escape(n)}"{" selected" if n == sel else ""}>{html.escape(n)}</option>'
            for n in list_runs(self.root))
        return (f'<form class="sub" action="/compare" method="get" id="switcher"><a href="/" style="color:#9cc3ff">'
                f'all runs</a> · run <select name="run" id="pick-run">{opts(current)}</select> vs baseline '
                f'<select name="baseline" id="pick-baseline"><option value="">(none)</option>{opts(baseline)}'
                f'</select> <button type="submit" id="go">show</button></form>')


def _stamp(p: Path) -> float:
    """A cheap change marker: newest mtime of the run's manifest, rank directories and the run itself."""
    items = [p, p / "run.json", *((p / "ranks").iterdir() if (p / "ranks").is_dir() else ())]
    return max((x.stat().st_mtime for x in items if x.exists()), default=0.0)


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

    async def index(request: Request) -> Response:
        return HTMLResponse(_index(runs))

    async def api_runs(request: Request) -> Response:
        return JSONResponse({"root": str(runs.root), "runs": list_runs(runs.root)})

    async def show(request: Request) -> Response:
        return await _page(runs, request.path_params["name"], None)

    async def compare(request: Request) -> Response:
        q = request.query_params
        return await _page(runs, q.get("run", ""), q.get("baseline") or None)

    return Starlette(routes=[Route("/", index), Route("/api/runs", api_runs), Route("/runs/{name}", show),
                             Route("/compare", compare)])


async def _page(runs: Runs, name: str, baseline: str | None) -> Response:
    for n in [name] + ([baseline] if baseline else []):
        if not NAME.match(n):
            return HTMLResponse(f"refused: {html.escape(n)!s} is not a run name", status_code=400)
        if runs.path(n) is None:
            return HTMLResponse(f"not found: no run named {html.escape(n)} here", status_code=404)
    try:
        page = await run_in_threadpool(runs.page, name, baseline)
    except Exception as exc:  # noqa: BLE001 - a broken run gets an error page, the server stays up
        return HTMLResponse(f"cannot show {html.escape(name)}: {html.escape(str(exc))}", status_code=500)
    return HTMLResponse(page)
