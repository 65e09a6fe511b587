"""The report's Pipeline view in a real browser (Debian's chromium, headless, Playwright; the pattern of
test_browser_report.py): on a 3-stage GPipe run built event by event (tests/unit/test_pipeline.py's
``gpipe_run``, stage 1 twice as heavy), every view opens with its charts drawn and no console error, and
the Pipeline view shows its stages table, one row per stage, with no internal name in what a person reads."""
from __future__ import annotations

import pytest

from tests.e2e.test_browser_report import ARTIFACTS, INTERNAL, Page, browser  # noqa: F401  (browser: a fixture)
from tests.unit.test_pipeline import gpipe_run

pytestmark = pytest.mark.slow


def test_pipeline_view_renders_and_reads_right(browser, tmp_path):  # noqa: F811
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run
    from rankscope.render.html import render

    ARTIFACTS.mkdir(exist_ok=True)
    root, _ = gpipe_run(tmp_path / "run", [(1000.0, 2000.0), (2000.0, 4000.0), (1000.0, 2000.0)], 8, [2, 0, 1])
    run = load_run(root, jobs=1)
    out = render(run, run_all(run), tmp_path / "r.html")
    p = Page(browser)
    p.page.goto(out.as_uri())
    assert "pipeline" in p.views()
    p.check_all_views("pipeline")
    p.page.click('nav a[data-view="pipeline"]')
    p.page.eval_on_selector_all("#view-pipeline details", "ds => ds.forEach(d => d.open = true)")
    text = p.page.inner_text("#view-pipeline")
    assert not [k for k in INTERNAL if k in text], [k for k in INTERNAL if k in text]
    assert "natural bubble" in text and "bottleneck stage" in text
    rows = p.page.eval_on_selector_all("#view-pipeline table", "ts => ts.map(t => t.tBodies[0] ? t.tBodies[0].rows.length : 0)")
    assert 3 in rows, rows  # the stages table (the per-step table has 3 stages x 3 steps)
    assert not p.errors, p.errors
