"""Run-vs-run diff: X / XBase / XDiff per rank and step, operator deltas, CLI JSON and report view."""
from __future__ import annotations

import json

import pytest

from rankscope.analysis.diff import run_diff
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from rankscope.render.html import build
from tests.helpers import tiny_run


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("df")
    a = load_run(tiny_run(root / "slow", mm_us=450), jobs=1)
    b = load_run(tiny_run(root / "base", mm_us=300), jobs=1)
    return a, run_all(a), b, run_all(b)


def test_operator_and_step_deltas(pair):
    d = run_diff(*pair)
    ops = {r["name"]: r for r in d.tables["operators"].to_dicts()}
    assert ops["aten::mm"]["mean"] == pytest.approx(450) and ops["aten::mm"]["meanBase"] == pytest.approx(300)
    assert ops["aten::mm"]["meanDiff"] == pytest.approx(150) and ops["aten::mm"]["spread"] == pytest.approx(0)
    top = d.tables["operators"].head(3).to_dicts()  # largest |meanDiff| first: mm and what encloses it
    assert [r["name"] for r in top[:2]] == ["aten::mm", "fwd"] and abs(top[2]["meanDiff"]) < 150
    steps = d.tables["steps"]
    assert steps.height == 4 and {"wall", "wallBase", "wallDiff", "computingDiff"} <= set(steps.columns)
    # mm (and the fwd and step around it) is 150 µs longer per step on both ranks
    assert steps["computingDiff"].to_list() == [150_000] * 4 and steps["wallDiff"].to_list() == [150_000] * 4
    coll = d.tables["collectives"].to_dicts()
    assert coll[0]["op"] == "all_reduce" and coll[0]["callsDiff"] == 0
    assert d.summary["baseline"] == "base" and any(f.kind == "largest_operator_change" for f in d.findings)


def test_diff_view_in_report(pair):
    a, ra, _, _ = pair
    page = build(a, ra, diff=run_diff(*pair))
    assert 'id="view-diff"' in page and 'id="diff-ranks-chart"' in page and "meanDiff" in page


def test_cli_diff_json(pair, capsys):
    from rankscope.cli import main

    a, _, b, _ = pair
    assert main(["diff", a.path, b.path, "--json", "-j", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["run"] == "slow" and doc["tables"]["operators"][0]["name"] == "aten::mm"
    assert main(["diff", a.path, b.path, "-j", "1"]) == 0
    assert "aten::mm" in capsys.readouterr().out
