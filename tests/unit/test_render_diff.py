"""Run-vs-run diff: X / XBase / XDiff per rank and step, operator deltas, CLI JSON and report view."""
from __future__ import annotations

import json
import re

import pytest

from rankscope.analysis.compare.diff import run_diff
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
    """Issue 23: the diff view shows declared labels and human units, never the X / XBase / XDiff columns."""
    a, ra, _, _ = pair
    d = run_diff(*pair)
    page = build(a, ra, diff=d)
    view = page.split('id="view-diff"')[1].split('<div class="view"')[0]
    assert 'id="diff-ranks-chart"' in view and "<th>Δ compute</th>" in view and "<th>baseline</th>" in view
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", view)
    assert heads and not [h for h in heads if re.search(r"[a-z][A-Z]|_", h)], heads
    # mm is 150 µs longer per step on both ranks: a signed duration in the step table
    steps = view.split('id="diff-steps"')[1].split("</section>")[0]
    assert "<td data-v=\"150000\">+0.15 ms</td>" in steps, steps[:600]
    big = d.tables["operators"].with_columns(meanDiff=d.tables["operators"]["meanDiff"] * 1000)
    from rankscope.analysis.compare.diff import _findings

    title = next(f.title for f in _findings({"operators": big}, {}) if f.kind == "largest_operator_change")
    assert title == "operator aten::mm: +150.0 ms per step", title  # µs above 1 ms said in ms


def test_cli_diff_json(pair, capsys):
    from rankscope.cli import main

    a, _, b, _ = pair
    assert main(["diff", a.path, b.path, "--json", "-j", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["run"] == "slow" and doc["tables"]["operators"][0]["name"] == "aten::mm"
    assert main(["diff", a.path, b.path, "-j", "1"]) == 0
    assert "aten::mm" in capsys.readouterr().out


def _sync_run(root, speed: float, dims: dict[int, int], world: int = 3, steps: int = 6):
    """Synchronous data-parallel steps: per rank 1 ms data load, 4 matmuls (2 ms x speed on inputs
    [32, 256], longer in proportion to ``dims``), then an all-reduce that ends 0.5 ms after the last rank
    arrives; the step ends with it (so the waiting ranks' exposed communication grows with the slow one)."""
    from tests.helpers import write_trace, x

    mm = {r: 2000 * speed * dims.get(r, 256) / 256 for r in range(world)}
    step = 1000 * speed + 4 * max(mm.values()) + 500
    for r in range(world):
        ev = []
        for k in range(steps):
            t0 = 1000.0 + k * step
            ev.append(x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 1000 * speed,
                        cat="user_annotation"))
            t = t0 + 1000 * speed
            for _ in range(4):
                ev.append(x("aten::mm", t, mm[r], **{"Input Dims": [[32, dims.get(r, 256)], [dims.get(r, 256), 512]]}))
                t += mm[r]
            ev.append(x("gloo:all_reduce", t, t0 + step - t, cat="user_annotation", **{"Input Dims": [[1000]]}))
            ev.append(x(f"ProfilerStep#{k + 1}", t0, step, cat="user_annotation"))
        write_trace(root / f"rank{r}.json", ev, rank=r, world=world)
    return load_run(root, jobs=1)


def test_diff_headline_names_the_cause_not_a_waiting_rank(tmp_path, capsys):
    """Issue 12: the run's rank 2 runs its matmuls on 1.5x larger inputs (3 ranks, the others wait for it
    at the all-reduce); the baseline ran on a host 7 % slower throughout. The headline is rank 2's own
    time with compute and the operator and shapes, host speed taken out (speed factor 1/1.07); not the
    waiting ranks' exposed communication, and not a compute change shrunk by the slower baseline."""
    from rankscope.cli import main
    a = _sync_run(tmp_path / "a", 1.0, {2: 384})
    b = _sync_run(tmp_path / "b", 1.07, {})
    d = run_diff(a, run_all(a), b, run_all(b))
    assert d.summary["speed_factor"] == pytest.approx(1 / 1.07, rel=1e-3)
    head = d.findings[0]
    assert head.kind == "cause_of_change" and head.ranks == (2,)
    # own time 1 + 4 x 3 = 13 ms vs 1.07 x (1 + 4 x 2) ms on the slower host = 9 ms here: +4 ms, all compute;
    # the step went from 1.07 + 8.56 + 0.5 = 10.13 ms to 13.5 ms: +3.37 ms (rank 2 explains more than all of it)
    assert head.evidence["own_diff_norm_ns"] == pytest.approx(4_000_000, abs=2_000)
    assert head.title.startswith("rank 2's own time +4.0 ms per step (compute +4.0 ms; aten::mm +4.0 ms "
                                 "(inputs [32, 384] vs [32, 256])), more than the step-time change (+3.4 ms)")
    # raw, the waiting ranks' exposed communication grew most: it must not be the headline
    ranks = {r["rank"]: r for r in d.tables["ranks"].to_dicts()}
    assert ranks[0]["comm_exposedDiff"] > 3_000_000
    # the terminal output fits 80 columns when piped
    capsys.readouterr()
    assert main(["diff", str(a.path), str(b.path), "-j", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(len(x) for x in lines) <= 80
    assert any(x.startswith("│2") and "aten::mm" in x and "+4.0" in x for x in lines), "\n".join(lines)
