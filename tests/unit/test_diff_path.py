"""Issue 25: ``rankscope diff`` names the rank whose part of the critical path changed, not a rank that waits."""
from __future__ import annotations

import polars as pl
import pytest

from rankscope.analysis.compare.cause import headline
from rankscope.analysis.compare.diff import run_diff
from rankscope.analysis.compare.pathcause import PathCause, cause
from rankscope.analysis.registry import run_all
from tests.unit.test_render_diff import _sync_run

MS = 1e6


def _path(rows: list[tuple[int, float, float, int, int]]) -> pl.DataFrame:
    """(rank, saving ms, baseline saving ms, steps bounded, baseline steps bounded) of 5 steps each."""
    return pl.DataFrame([{"rank": r, "saving": s * MS, "savingBase": sb * MS, "savingDiff": (s - sb) * MS,
                          "bounds": k, "of_steps": 5, "boundsBase": kb, "of_stepsBase": 5} for r, s, sb, k, kb in rows])


def _segs(rows: dict[tuple[int, str], float]) -> pl.DataFrame:
    return pl.DataFrame([{"rank": r, "part": p, "on_path": 0.0, "on_pathBase": 0.0, "on_pathDiff": d * MS}
                         for (r, p), d in rows.items()])


def test_path_cause_rules():
    """The rank whose what-if saving grew most is named (with the class of its path segments that grew); a
    change no rank's saving holds a quarter of is shared (none named, and why); a faster run names the rank
    whose saving fell most, or one whose saving grew more than that."""
    segs = _segs({(0, "compute"): -18.0, (1, "data"): 77.0, (1, "compute"): 15.0, (2, "compute"): 1.0})
    p, why = cause(_path([(0, 21.0, 24.0, 1, 3), (1, 108.0, 14.0, 4, 2), (2, 3.0, 2.0, 0, 0)]), segs, 141 * MS, 211 * MS)
    assert why == "" and p is not None and (p.rank, p.part, p.steps, p.steps_base) == (1, "data", 4, 2)
    assert p.diff_ns == pytest.approx(94 * MS)
    # the step grew 40 ms, no saving by more than 10 ms (a quarter): shared, nobody named from the path
    p, why = cause(_path([(0, 5.0, 1.0, 2, 3), (1, 3.0, 1.0, 3, 2)]), segs, 40 * MS, 200 * MS)
    assert p is None and "shared" in why
    # faster by 90 ms: rank 1's saving fell by 94 ms
    p, why = cause(_path([(0, 24.0, 21.0, 3, 1), (1, 14.0, 108.0, 2, 4)]), _segs({(1, "data"): -77.0}), -90 * MS, 300 * MS)
    assert p is not None and (p.rank, p.part) == (1, "data")
    # measured on a real 4-rank FSDP2 pair under load: the baseline's host was slower (step -104 ms), yet rank 2's
    # saving grew by 40 ms (its data wait): named, with the class that grew
    p, why = cause(_path([(1, 0.0, 2.0, 1, 2), (2, 50.1, 10.1, 2, 2), (3, 14.2, 4.6, 1, 1)]),
                   _segs({(2, "data"): 30.0, (2, "compute"): 2.4, (3, "compute"): 42.9}), -104.5 * MS, 455 * MS)
    assert p is not None and (p.rank, p.part) == (2, "data") and p.diff_ns == pytest.approx(40 * MS)


def test_headline_names_the_path_rank_not_the_waiting_one():
    """The issue's shape: rank 0's own time grew most (its waits inside FSDP's spans booked as compute), rank 2's
    data wait grew and it bounds the steps on the path. The headline names rank 2 with its data wait, and the
    share it explains is its what-if saving's change (20 of 25 ms), not rank 0's own time."""
    own = pl.DataFrame({"rank": [0, 1, 2], "own": [1.0] * 3, "ownBase": [1.0] * 3,
                        "ownDiffNorm": [47.6 * MS, 40.0 * MS, 21.0 * MS], "computingDiffNorm": [35.2 * MS, 30 * MS, 1.0 * MS],
                        "data_waitDiffNorm": [0.0, 0.0, 19.6 * MS], "freeDiffNorm": [0.0, 0.0, 0.4 * MS]})
    ops = pl.DataFrame(schema={"rank": pl.Int64, "name": pl.Utf8, "input_dims": pl.Utf8, "us": pl.Float64,
                               "usBase": pl.Float64, "usDiffNorm": pl.Float64})
    old = headline(own, ops, 25 * MS, 1.0, 0)
    assert old is not None and old.ranks == (0,)  # today's rule: the waiting rank
    pc = PathCause(rank=2, saving_ns=21 * MS, saving_base_ns=1 * MS, steps=5, of_steps=5, steps_base=1,
                   of_steps_base=5, part="data", part_diff_ns=19 * MS)
    f = headline(own, ops, 25 * MS, 1.0, 0, pc)
    assert f is not None and f.ranks == (2,) and f.evidence["component"] == "data wait"
    assert f.evidence["method"] == "critical_path" and f.evidence["explained_share"] == pytest.approx(0.8)
    assert f.evidence["critical_path"]["steps"] == 5 and f.evidence["critical_path"]["saving_diff_ns"] == 20 * MS


def test_diff_path_tables_on_a_synchronous_run(tmp_path):
    """The issue-12 pair (3 ranks; rank 2's 4 matmuls take 3 ms instead of 2, the others wait at the all-reduce;
    baseline on a 7 % slower host): rank 2 bounds 6 of 6 steps, at the others' median the step would be 4 ms
    shorter (4 x 1 ms), 0 in the balanced baseline; the waiting ranks save nothing. Named from the path."""
    a, b = _sync_run(tmp_path / "a", 1.0, {2: 384}), _sync_run(tmp_path / "b", 1.07, {})
    d = run_diff(a, run_all(a), b, run_all(b))
    path = {r["rank"]: r for r in d.tables["path"].to_dicts()}
    assert path[2]["saving"] == pytest.approx(4 * MS, abs=0.05 * MS) and path[2]["savingBase"] == pytest.approx(0, abs=0.05 * MS)
    assert (path[2]["bounds"], path[2]["of_steps"]) == (6, 6)
    assert all(abs(path[r]["saving"]) < 0.05 * MS for r in (0, 1))
    head = d.findings[0]
    assert head.kind == "cause_of_change" and head.ranks == (2,) and head.evidence["method"] == "critical_path"
    assert head.evidence["component"] == "compute" and "path_why" not in d.summary


def test_no_critical_path_keeps_own_time_and_says_why(tmp_path):
    """One rank per run: no critical path across ranks. The headline stays today's own-time rule (rank 0's 4
    matmuls +1 ms each) and says why the path did not decide."""
    a, b = _sync_run(tmp_path / "a", 1.0, {0: 384}, world=1), _sync_run(tmp_path / "b", 1.0, {}, world=1)
    d = run_diff(a, run_all(a), b, run_all(b))
    assert "path" not in d.tables and d.summary["path_why"].startswith("no critical path")
    assert d.summary["path_why"].endswith("in both runs")
    head = d.findings[0]
    assert head.kind == "cause_of_change" and head.ranks == (0,) and head.evidence["method"] == "own_time"
    assert head.evidence["own_diff_norm_ns"] == pytest.approx(4 * MS, abs=2_000)
    assert "not from the critical path: no critical path" in head.title
