"""The GPU analyses' views (issue 26) in the report, in a real browser (Debian's chromium, headless, via
Playwright, as tests/e2e/test_browser_report.py): a report of a real 2-rank GPU trace (HTA's trace_filter)
opens with no console error, every view renders, and each GPU analysis shows its declared tables with
rows and human units."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.e2e.test_browser_report import ARTIFACTS, Page, browser  # noqa: F401 (the fixture)

pytestmark = pytest.mark.slow

TITLES = ("Kernel breakdown (classes, overlap, per kernel)", "GPU idle time per stream (host wait, kernel wait, other)",
          "Kernel launch delay and slow runtime calls", "Launch queue length per stream",
          "Memory copy / set bandwidth", "User annotations (record_function) on GPU and CPU",
          "ATen operators and the kernels they launch", "Frequent kernel sequences per operator")


def test_gpu_views_render_without_errors(browser, shared_data, tmp_path):  # noqa: F811
    ARTIFACTS.mkdir(exist_ok=True)
    run = tmp_path / "trace_filter"
    shutil.copytree(shared_data / "hta" / "trace_filter", run)
    out = tmp_path / "report.html"
    done = subprocess.run([sys.executable, "-m", "rankscope.cli", "report", str(run), "-o", str(out), "-j", "1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    p = Page(browser)
    p.page.goto(out.as_uri())
    p.check_all_views("gpu")
    for title in TITLES:
        block = p.page.locator("section", has=p.page.locator("h3", has_text=title)).first
        assert block.count() == 1, title
        assert "nothing to show" not in block.inner_text(), title
        rows = block.evaluate("s => [...s.querySelectorAll('details')].map(d => (d.open = true, "
                              "d.querySelectorAll('tbody tr').length))")
        assert rows and max(rows) > 0, (title, rows)
    idle = p.page.locator("section", has=p.page.locator("h3", has_text=TITLES[1])).first.inner_text()
    assert " ms" in idle or " µs" in idle  # durations in human units, not raw ns
    assert not p.errors, p.errors


def test_rank_page_shows_the_gpu_analyses_of_that_rank(browser, shared_data, tmp_path):  # noqa: F811
    """The web UI's rank page (``rankscope serve``, a real uvicorn) of a real GPU trace: below its operators,
    each GPU analysis (kernel breakdown, idle time per stream, idle gaps explained, launch delay, queue length,
    bandwidth, annotations, ATen kernels, sequences) with this rank's rows only, in human units, no console
    error. The rows are checked against the analyses' own tables cut to the rank."""
    import polars as pl

    from rankscope.analysis.base import frame
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run
    from rankscope.render.blocks import MAX_ROWS
    from rankscope.render.declare import view_of
    from rankscope.web.rankpage import device_analyses
    from tests.e2e.test_web_serve import Served

    root = tmp_path / "served"
    shutil.copytree(shared_data / "hta" / "trace_filter", root / "tf")
    run = load_run(root / "tf", jobs=1)
    rank = run.rank_ids[-1]
    want = {}  # title -> rows of this rank in each declared table (a table shows at most MAX_ROWS)
    for name, res in run_all(run.only(rank), names=device_analyses()).items():
        if res.skipped:
            continue
        view = view_of(name, res.summary, res.tables)
        tabs = [frame(res.tables[tv.table]) for tv in view.tables if tv.table in res.tables]
        n = [min(MAX_ROWS, t.filter(pl.col("rank") == rank).height) for t in tabs if "rank" in t.columns]
        if sum(n):
            want[view.title] = [x for x in n if x]
    assert {TITLES[0], TITLES[1], "GPU idle gaps, explained"} <= set(want), sorted(want)
    shutil.rmtree(root / "tf" / "analysis", ignore_errors=True)  # the server builds its own cache
    with Served(root) as s:
        p = Page(browser)
        p.page.goto(f"{s.url}/runs/tf/rank/{rank}", timeout=180_000)
        got = p.page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('section.rank-device')].map(s =>
            [s.querySelector('h3').textContent, [...s.querySelectorAll('table')].map(t => t.querySelectorAll('tbody tr').length)]))""")
        text = p.page.inner_text("body")
        p.page.screenshot(path=str(ARTIFACTS / "served-gpu-rank.png"), full_page=True)
    assert got == want
    assert " ms" in text or " µs" in text
    assert not p.errors, p.errors
