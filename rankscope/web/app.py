"""The web UI: list the runs under a directory, show each run's report views, compare two runs.

Read-only: only GET routes, and nothing under the directory is written: the Parquet cache of every
run goes to a private cache directory (``cache_dir``, default a temporary one). ``/runs/NAME/timeline?
format=perfetto|json&steps=3-4&ranks=0-7`` serves the run's merged multi-rank timeline, made on
demand (clock offsets refined with matched collectives, as ``rankscope timeline`` does) in a child
process (its memory goes back to the system when it is done) and kept as files in a private
temporary directory; a response holds its file open, so evicting it from the cache never cuts a
download short. A run is named by its directory name; names are checked against a strict pattern
and against the listing itself, so ``../`` and names that are not runs under the directory are
refused (400 / 404) before any path is built, and a run with a link leading outside the served
directory is refused (403). Responses never show the server's absolute paths.

Example::

    import uvicorn
    from rankscope.web.app import create_app
    uvicorn.run(create_app("rankscope-runs"), host="127.0.0.1", port=8765)
"""
from __future__ import annotations

import contextlib
import hashlib
import html
import json
import multiprocessing
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
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


def list_runs(root: Path | str) -> list[str]:
    """Names of the runs directly under ``root`` (a directory, or an fsspec URL prefix)."""
    if isinstance(root, str):
        return _remote_runs(root)
    return sorted(d.name for d in root.iterdir() if NAME.match(d.name) and is_run(d))


def _remote_runs(url: str) -> list[str]:
    """Runs under a URL prefix: sub-prefixes holding run.json or ranks/ (listings only, no reads)."""
    from rankscope.store import source

    fs, root = source.filesystem(url)
    out = []
    for d in fs.ls(root, detail=False):
        name = d.rstrip("/").rsplit("/", 1)[-1]
        if NAME.match(name) and (fs.exists(f"{d}/run.json") or fs.exists(f"{d}/ranks")):
            out.append(name)
    return sorted(out)


class Runs:
    """Resolves run names safely and caches rendered pages per (names, modification times)."""

    def __init__(self, root: str | Path, cache_dir: str | Path | None = None, pages: int = 16) -> None:
        from rankscope.store import source

        # a directory, or an fsspec URL prefix of runs (s3://bucket/runs): read through listings
        self.root: Path | str = str(root).rstrip("/") if source.is_url(str(root)) else Path(root).resolve()
        self.name = str(self.root).rstrip("/").rsplit("/", 1)[-1]
        self._own_cache = cache_dir is None
        self.cache_dir = Path(cache_dir) if cache_dir else Path(tempfile.mkdtemp(prefix="rankscope-serve-cache-"))
        self._cache: OrderedDict[tuple[Any, ...], str] = OrderedDict()
        self._pages = pages  # rendered pages kept (a few MB each): memory bounded
        self._lock = threading.Lock()

    def path(self, name: str) -> Any:
        """The run directory (or URL) of ``name``, or None when it is not a run under the root."""
        if not NAME.match(name) or name not in list_runs(self.root):
            return None
        if isinstance(self.root, str):
            return f"{self.root}/{name}"
        p = (self.root / name).resolve()
        return p if p.parent == self.root else None

    def close(self) -> None:
        """Remove the private cache when this server made it."""
        if self._own_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)

    def escapes(self, run: Any) -> str | None:
        """The first link inside ``run`` that leads outside the served directory (relative), or None."""
        if isinstance(self.root, str):
            return None  # object stores have no links
        for dirpath, dirnames, filenames in os.walk(run, followlinks=False):
            for n in dirnames + filenames:
                p = Path(dirpath) / n
                if p.is_symlink() and not p.resolve().is_relative_to(self.root):
                    return str(p.relative_to(self.root))
        return None

    def public(self, text: str) -> str:
        """``text`` without the server's absolute paths (the served root becomes relative)."""
        text = text.replace(str(self.root) + os.sep, "").replace(str(self.root), ".")
        return re.sub(r"(?<![\w.])/(?:[\w.\-]+/)+", "", text.replace(str(self.cache_dir), "<cache>"))

    def page(self, name: str, baseline: str | None = None) -> str:
        """The report page of ``name`` (with a diff view against ``baseline``), rendered once."""
        a = self.path(name)
        b = self.path(baseline) if baseline else None
        assert a is not None and (baseline is None or b is not None)
        key = (name, _stamp(a), baseline, _stamp(b) if b else None)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._render(a, b)
                while len(self._cache) > self._pages:
                    self._cache.popitem(last=False)
            self._cache.move_to_end(key)
            return self._cache[key]

    def summary(self, name: str) -> dict[str, Any]:
        """The run table's row of ``name`` (analyzed once per version of the run)."""
        from rankscope.analysis.registry import run_all
        from rankscope.model.run import load_run
        from rankscope.web.runtable import summarize

        a = self.path(name)
        assert a is not None
        stamp = _stamp(a)
        key = ("summary", name, stamp)
        with self._lock:
            if key in self._cache:
                return json.loads(self._cache[key])
        run = load_run(a, jobs=1, allow_missing_ranks=True, cache_dir=self.cache_dir)
        row = summarize(run, run_all(run, names=["breakdown", "clock", "links", "straggler"]), _size(a))
        with self._lock:
            self._cache[key] = json.dumps(row)
            while len(self._cache) > self._pages * 8:
                self._cache.popitem(last=False)
        return row

    def rank_page(self, name: str, rank: int) -> str | None:
        """The page of one rank of ``name`` (None when the run has no such rank)."""
        from rankscope.analysis.registry import run_all
        from rankscope.model.run import load_run
        from rankscope.web.rankpage import device_analyses, page

        a = self.path(name)
        assert a is not None
        key = ("rank", name, rank, _stamp(a))
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        run = load_run(a, jobs=1, allow_missing_ranks=True, cache_dir=self.cache_dir)
        if rank not in run.ranks:
            return None
        results = run_all(run, names=["breakdown", "clock", "links", "straggler"])
        results.update(run_all(run.only(rank), names=device_analyses()))  # per-rank analyses: this rank's data only
        html_ = page(run, results, rank, name)
        with self._lock:
            self._cache[key] = html_
            while len(self._cache) > self._pages * 8:
                self._cache.popitem(last=False)
        return html_

    def _render(self, a: Path, b: Path | None) -> str:
        from rankscope.analysis.registry import run_all
        from rankscope.model.run import load_run
        from rankscope.render.html import build

        run = load_run(a, jobs=1, allow_missing_ranks=True, cache_dir=self.cache_dir)
        results = run_all(run)
        diff = None
        if b is not None:
            from rankscope.analysis.compare.diff import run_diff

            base = load_run(b, jobs=1, allow_missing_ranks=True, cache_dir=self.cache_dir)
            diff = run_diff(run, results, base, run_all(base))
        name, base_name = _leaf(a), _leaf(b) if b is not None else None
        ranks = run.rank_ids
        links = " ".join(f'<a class="rank-link" style="color:#9cc3ff" href="/runs/{name}/rank/{r}">{r}</a>'
                         for r in ranks[:64])
        rank_nav = (f'<div class="sub">rank pages: {links}' + (f" … (or /runs/{name}/rank/N, N up to {ranks[-1]})"
                                                              if len(ranks) > 64 else "") + "</div>") if ranks else ""
        return build(run, results, diff=diff, nav_extra=self.switcher(name, base_name) + rank_nav,
                     timeline_html=timeline_form(name),
                     timeline_url=f"/runs/{name}/timeline")  # NAME: a plain file name

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

    def get(self, name: str, fmt: str, steps: list[int] | None, ranks: list[int] | None) -> Any:
        """The timeline of run ``name`` (a run under the root) for these filters, as an open binary
        file: the caller streams and closes it. Unlinking a file evicted from the cache does not
        affect a response still reading it."""
        a = self.runs.path(name)
        assert a is not None
        key = (name, _stamp(a), fmt, tuple(steps or ()), tuple(ranks or ()))
        with self._lock:
            if key not in self._made or not self._made[key].exists():
                if self.dir is None:
                    self.dir = Path(tempfile.mkdtemp(prefix="rankscope-timelines-"))
                out = self.dir / (hashlib.sha256(repr(key).encode()).hexdigest()[:32] + FORMATS[fmt][0])
                # A child process: reading the run and building the timeline takes memory in proportion
                # to the run, which a long-lived server would otherwise keep (~1.8 GB seen per request).
                with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as ex:
                    ex.submit(_build_timeline, str(a), str(out), fmt, steps, ranks, str(self.runs.cache_dir)).result()
                self._made[key] = out
                while len(self._made) > self.keep:
                    self._made.popitem(last=False)[1].unlink(missing_ok=True)
            self._made.move_to_end(key)
            return open(self._made[key], "rb")  # noqa: SIM115 - closed by the response

    def close(self) -> None:
        """Remove the cached files."""
        with self._lock:
            if self.dir is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
            self.dir, self._made = None, OrderedDict()


def _build_timeline(run: str, out: str, fmt: str, steps: list[int] | None, ranks: list[int] | None,
                    cache_dir: str) -> None:
    """Write one merged timeline (runs in a child process of the server)."""
    from rankscope.model.run import load_run
    from rankscope.render.timeline import aligned_offsets, write_timeline

    r = load_run(run, jobs=1, allow_missing_ranks=True, cache_dir=cache_dir)
    tmp = write_timeline(r, Path(out + ".part"), fmt=fmt, steps=steps, ranks=ranks, offsets=aligned_offsets(r))
    os.replace(tmp, out)


def _leaf(p: Any) -> str:
    """The last component of a run's path or URL: its name in the UI."""
    return str(p).rstrip("/").rsplit("/", 1)[-1]


def _size(p: Any) -> int:
    """Bytes of a run's files (its traces, dumps and metadata; not rankscope's own analysis/ cache)."""
    if isinstance(p, str):
        from rankscope.store import source

        fs, root = source.filesystem(p)
        return sum(int(v.get("size") or 0) for k, v in fs.find(root, detail=True).items() if "/analysis/" not in k)
    total = 0
    for dirpath, dirnames, filenames in os.walk(p, followlinks=False):
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) == Path(p) and d == "analysis")]
        for f in filenames:
            with contextlib.suppress(OSError):
                total += (Path(dirpath) / f).lstat().st_size
    return total


def _stamp(p: Any) -> tuple[tuple[str, Any, Any], ...]:
    """A cheap change marker: name, size and mtime of each entry of the run and of its ranks/ folder.

    Our own ``analysis/`` folder (the Parquet cache, reports) is left out: analyzing a run must not make
    it look changed. The run directory's own mtime is left out for the same reason (creating
    ``analysis/`` touches it); added or removed entries show up as names instead.
    """
    if isinstance(p, str):  # a run on object storage: names, sizes and ETags from one listing
        from rankscope.store import source

        fs, root = source.filesystem(p)
        return tuple(sorted((k[len(root):], v.get("size"), v.get("ETag") or v.get("mtime"))
                            for k, v in fs.find(root, detail=True).items() if "/analysis/" not in k))
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
    from rankscope.web.runtable import page

    names = list_runs(runs.root)
    return page(runs.name, names, runs.switcher(names[0], None) if names else "")


def create_app(root: str | Path, cache_dir: str | Path | None = None) -> Starlette:
    """The ASGI app serving the runs under ``root`` read-only (caches in ``cache_dir``, default a
    private temporary directory)."""
    runs = Runs(root, cache_dir)
    timelines = Timelines(runs)

    async def index(request: Request) -> Response:
        return HTMLResponse(_index(runs))

    async def api_runs(request: Request) -> Response:
        return JSONResponse({"root": runs.name, "runs": list_runs(runs.root)})

    async def api_summary(request: Request) -> Response:
        name = request.path_params["name"]
        refused = _refusal(runs, name)
        if refused is not None:
            return JSONResponse({"error": bytes(refused.body).decode()}, status_code=refused.status_code)
        try:
            return JSONResponse(await run_in_threadpool(runs.summary, name))
        except Exception as exc:  # noqa: BLE001 - one broken run gets an error row, the server stays up
            return JSONResponse({"error": runs.public(f"{type(exc).__name__}: {exc}")}, status_code=500)

    async def rank(request: Request) -> Response:
        name, r = request.path_params["name"], request.path_params["rank"]
        refused = _refusal(runs, name)
        if refused is not None:
            return refused
        if not r.isdigit() or len(r) > 7:
            return HTMLResponse("refused: a rank is a number", status_code=400)
        try:
            got = await run_in_threadpool(runs.rank_page, name, int(r))
        except Exception as exc:  # noqa: BLE001 - a broken run gets an error page, the server stays up
            return HTMLResponse(f"cannot show rank {int(r)} of {html.escape(name)}: "
                                f"{html.escape(runs.public(str(exc)))}", status_code=500)
        if got is None:
            return HTMLResponse(f"not found: {html.escape(name)} has no rank {int(r)}", status_code=404)
        return HTMLResponse(got)

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
        runs.close()

    return Starlette(routes=[Route("/", index), Route("/api/runs", api_runs),
                             Route("/api/runs/{name}/summary", api_summary), Route("/runs/{name}", show),
                             Route("/runs/{name}/rank/{rank}", rank),
                             Route("/runs/{name}/timeline", timeline), Route("/compare", compare)],
                     lifespan=lifespan)


def _refusal(runs: Runs, name: str) -> Response | None:
    """400 for what is not a run name, 404 for a name that is not a run under the root; None when fine."""
    if not NAME.match(name):
        return HTMLResponse(f"refused: {html.escape(name)!s} is not a run name", status_code=400)
    p = runs.path(name)
    if p is None:
        return HTMLResponse(f"not found: no run named {html.escape(name)} here", status_code=404)
    link = runs.escapes(p)
    if link is not None:
        return HTMLResponse(f"refused: {html.escape(link)} is a link to outside the served directory",
                            status_code=403)
    return None


async def _timeline(timelines: Timelines, name: str, q: Any) -> Response:
    refused = _refusal(timelines.runs, name)
    if refused is not None:
        return refused
    fmt, steps, ranks = q.get("format") or "perfetto", q.get("steps", ""), q.get("ranks", "")
    if fmt not in FORMATS or not SPEC.match(steps) or not SPEC.match(ranks):
        return PlainTextResponse("refused: format is perfetto or json; steps and ranks look like 3-4 or 0,2,5-7",
                                 status_code=400)
    runs = timelines.runs
    try:
        from rankscope.render.timeline import parse_ints

        fh = await run_in_threadpool(timelines.get, name, fmt, parse_ints(steps, "steps"),
                                     parse_ints(ranks, "ranks"))
    except RankscopeError as exc:
        return PlainTextResponse(runs.public(f"cannot make the timeline of {name}: {exc}"), status_code=400)
    except Exception as exc:  # noqa: BLE001 - a broken run gets an error, the server stays up
        return PlainTextResponse(runs.public(f"cannot make the timeline of {name}: {type(exc).__name__}: {exc}"),
                                 status_code=500)

    def chunks() -> Any:
        with fh:
            while piece := fh.read(1 << 20):
                yield piece

    size = os.fstat(fh.fileno()).st_size
    return StreamingResponse(chunks(), media_type=FORMATS[fmt][1], headers={
        "content-disposition": f'attachment; filename="{name}-timeline{FORMATS[fmt][0]}"',
        "content-length": str(size)})


async def _page(runs: Runs, name: str, baseline: str | None) -> Response:
    for n in [name] + ([baseline] if baseline else []):
        refused = _refusal(runs, n)
        if refused is not None:
            return refused
    try:
        page = await run_in_threadpool(runs.page, name, baseline)
    except Exception as exc:  # noqa: BLE001 - a broken run gets an error page, the server stays up
        return HTMLResponse(f"cannot show {html.escape(name)}: {html.escape(runs.public(str(exc)))}", status_code=500)
    return HTMLResponse(page)
