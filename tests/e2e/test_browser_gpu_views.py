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
