"""HTML report: escaping of trace names, views, generic rendering of any analysis, size at 64 ranks."""
from __future__ import annotations

import re

import polars as pl
import pyarrow as pa
import pytest

from rankscope.analysis.base import Finding, Result, Severity
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from rankscope.render.html import VIEWS, build, render, result_html
from tests.helpers import EVIL, tiny_run


@pytest.fixture(scope="module")
def evil(tmp_path_factory):
    run = load_run(tiny_run(tmp_path_factory.mktemp("ev") / "evil", evil=True), jobs=1)
    return run, run_all(run)


def test_operator_name_with_html_is_escaped(evil, tmp_path):
    run, results = evil
    page = render(run, results, tmp_path / "r.html").read_text()
    assert EVIL not in page
    # in HTML tables it is entity-escaped; inside plotly's JSON "<" is \u003c
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page or "\\u003cscript\\u003ealert(1)" in page
    benign = load_run(tiny_run(tmp_path / "benign", evil=False), jobs=1)
    ref = render(benign, run_all(benign), tmp_path / "b.html").read_text()
    # the same page with a harmless name has exactly as many script tags: nothing was injected
    assert len(re.findall(r"<script", page)) == len(re.findall(r"<script", ref))


def test_every_view_and_skipped_reasons(evil):
    run, results = evil
    results = dict(results, hang=Result("hang", skipped="no hang dump in this run"))
    page = build(run, results)
    for v in ("overview", "trajectory", "communication", "operators", "memory", "flame", "problems"):
        assert f'id="view-{v}"' in page, v
    problems = page.split('id="view-problems"')[1]
    assert "Collectives / hang (collective recorder dumps): nothing to show: no hang dump in this run" in problems
    assert 'id="breakdown-chart"' in page and 'id="steps-chart"' in page and 'id="flame-chart"' in page
    assert 'id="view-diff"' not in page  # no baseline, no diff view


def test_timeline_hint(evil):
    run, results = evil
    page = build(run, results)
    hint = page.split('id="timeline-hint"')[1].split("</section>")[0]
    assert f"rankscope timeline {run.path} -o merged.pftrace" in hint and "--steps" in hint
    served = build(run, results, timeline_html='<a id="timeline-link" href="/x">get it</a>')
    hint = served.split('id="timeline-hint"')[1].split("</section>")[0]
    assert 'id="timeline-link"' in hint and "rankscope timeline" not in hint


def test_generic_result_polars_and_arrow_tables():
    res = Result("newthing", tables={"a": pl.DataFrame({"name": ["<b>x</b>", "y"], "v": [1.5, 2.0]}),
                                     "b": pa.table({"rank": [0, 1], "n": [3, 4]})},
                 findings=[Finding("k", "something <odd>", Severity.WARNING, (1,), {"x": 1})],
                 summary={"total": 12345})
    out = result_html("newthing", res)
    assert "&lt;b&gt;x&lt;/b&gt;" in out and "<b>x</b>" not in out
    assert "something &lt;odd&gt;" in out and "12345" in out
    assert out.count('class="sortable"') == 2 and "<h3>Newthing</h3>" in out  # two tables, a plain title
    assert "nothing to show: why" in result_html("z", Result("z", skipped="why"))
    # a declared analysis shows its declared facts and columns, never its internal names
    bd = result_html("straggler", Result("straggler", summary={"time_lost_per_step_ns": 2_500_000, "fired": [1]},
                                         tables={"per_step": pl.DataFrame({"step": [1], "slowest": [2], "own": [3e6],
                                                                           "others_median": [2e6],
                                                                           "rel_excess": [0.5]})}))
    assert "time lost per step" in bd and "2.50 ms" in bd and "3.00 ms" in bd and "50%" in bd
    assert not any(k in bd for k in ("time_lost_per_step_ns", "fired", "rel_excess", "others_median"))


def test_unknown_analysis_goes_to_more_view(evil):
    run, results = evil
    page = build(run, dict(results, zzz=Result("zzz", summary={"answer": 42})))
    more = page.split('id="view-more"')[1].split('class="view"')[0]
    assert "Zzz" in more and "42" in more
    assert list(VIEWS)[0] == "overview"


def test_report_of_64_ranks_stays_small(tmp_path):
    from rankscope.synth import generate

    root = generate(tmp_path / "s64", ranks=64, steps=10, ops_per_step=60, seed=3)
    run = load_run(root, jobs=2)
    page = render(run, run_all(run), tmp_path / "r.html")
    size = page.stat().st_size
    assert size < 10 * 2**20, size
    assert page.read_text().count('class="view"') >= 8


def test_cluster_timeline_shows_who_waits_for_whom(tmp_path):
    """Issue 17: one lane per rank over the worst step and its neighbours, blocks that add up to each
    rank's steps, each collective's arrivals joined across ranks with the last one marked; the way to
    the exact events (a command offline, a link when served)."""
    from rankscope.analysis.diagnosis.waits import cluster_timeline
    from tests.unit.test_diag_straggler import make

    run = load_run(make(tmp_path / "s", {2: 1.5}, world=3, steps=6), jobs=1)
    res = run_all(run)
    tl = cluster_timeline(run, res)
    assert tl["lanes"] == ["rank 0", "rank 1", "rank 2"] and len(tl["steps"]) in (2, 3)
    for lane in range(3):  # per lane, blocks are ordered, contiguous and cover the chosen steps
        bl = [b for b in tl["blocks"] if b[0] == lane]
        assert all(a[2] == pytest.approx(b[1]) for a, b in zip(bl, bl[1:]))
    names = tl["classes"]
    comp = {lane: sum(b[2] - b[1] for b in tl["blocks"] if b[0] == lane and names[b[3]] == "compute") for lane in range(3)}
    assert comp[2] == pytest.approx(1.5 * comp[0], rel=0.01)  # 4 mm of 3 ms vs 2 ms per step
    assert tl["arrivals"] and all(max(p, key=lambda x: x[1])[0] == 2 for p in tl["arrivals"])  # rank 2 last
    page = build(run, res)
    sec = page.split('id="cluster"')[1].split("</section>")[0]
    assert 'id="cluster-chart"' in sec and "rankscope timeline" in sec and "--steps" in sec
    served = build(run, res, timeline_url="/runs/s/timeline")
    assert 'id="cluster-timeline-link" href="/runs/s/timeline?steps=' in served and 'data-href="/runs/s/timeline?steps=' in served
