"""Straggler rule, cause and time lost on hand-made traces (real files through load_run)."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from rankscope.analysis.registry import run_all
from rankscope.analysis.straggler import consistency, outliers
from rankscope.model.run import load_run
from tests.helpers import write_trace, x

STEP_US = 20_000


def make(root: Path, slow: dict[int, float], dims: dict[int, int] | None = None, world: int = 3,
         steps: int = 6, data: dict[int, float] | None = None) -> Path:
    """Gloo-like traces: per step a data load, 4 mm ops, one all-reduce that ends on every rank together."""
    dims, data = dims or {}, data or {}
    worst = max(4 * 2000 * slow.get(r, 1.0) + 1000 * data.get(r, 1.0) for r in range(world))
    for r in range(world):
        ev = []
        for s in range(steps):
            t0 = 1000.0 + s * STEP_US
            load = 1000 * data.get(r, 1.0)
            ev.append(x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, load, cat="user_annotation"))
            t = t0 + load
            for _ in range(4):
                d, dur = dims.get(r, 256), 2000 * slow.get(r, 1.0)
                ev.append(x("aten::mm", t, dur, **{"Input Dims": [[32, d], [d, 512]]}))
                t += dur
            end = t0 + worst + 500
            ev.append(x("gloo:all_reduce", t, end - t, cat="user_annotation", **{"Input Dims": [[1000]]}))
            ev.append(x(f"ProfilerStep#{s + 1}", t0, STEP_US - 1, cat="user_annotation"))
        write_trace(root / f"rank{r}.json", ev, rank=r, world=world)
    return root


def _diagnose(path: Path) -> dict:
    return run_all(load_run(path, jobs=1), names=["breakdown", "clock", "links", "straggler"])


def test_compute_straggler_named_with_cause_and_time_lost(tmp_path):
    res = _diagnose(make(tmp_path, {2: 1.5}))["straggler"]
    assert res.summary["verdict"].startswith("rank 2 is slow: compute, +")
    f = res.findings[0]
    assert f.evidence["cause"] == "compute" and f.evidence["test"] == "dixon" and f.confidence == 1.0
    assert f.evidence["excess_ns"]["compute"] == 4_000_000
    assert f.evidence["time_lost"]["lost_per_step_ns"] == 4_000_000  # 4 mm × 1 ms slower
    assert f.evidence["time_lost"]["last_arrival_share"] == 1.0
    assert set(pl.from_arrow(res.tables["per_rank"]).columns) >= {"rank", "wall", "own", "computing",
                                                                  "comm_exposed", "data_wait", "free"}


def test_healthy_run_has_no_straggler(tmp_path):
    res = _diagnose(make(tmp_path, {}))["straggler"]
    assert res.summary["verdict"] == "no straggler" and res.findings == []


def test_larger_shapes_are_imbalance(tmp_path):
    res = _diagnose(make(tmp_path, {2: 1.5}, dims={2: 384}))["straggler"]
    assert res.summary["verdict"].startswith("rank 2 is slow: imbalance")
    assert res.findings[0].evidence["work"]["unseen_shape_time_share"] == 1.0


def test_data_straggler(tmp_path):
    res = _diagnose(make(tmp_path, {}, data={1: 4.0}))["straggler"]
    assert res.summary["verdict"].startswith("rank 1 is slow: data")


def test_rule_needs_consistency_over_steps():
    bd = pl.DataFrame({"rank": [0, 1] * 5, "step": [s for s in range(5) for _ in (0, 1)],
                       "wall": [10.0] * 10, "comm_exposed": [0.0, 2.0, 0.0, 2.0, 2.0, 0.0, 2.0, 0.0, 2.0, 0.0]})
    assert consistency(bd, 0) == 0.4 and consistency(bd, 1) == 0.6
    assert outliers([10.0, 10.5]) == [] and [i for i, *_ in outliers([10.0, 13.0])] == [1]


def test_per_step_table_names_the_slowest_rank(tmp_path):
    res = _diagnose(make(tmp_path, {1: 1.5}))["straggler"]
    steps = pl.from_arrow(res.tables["per_step"])
    assert steps.height == 6 and set(steps["slowest"].to_list()) == {1}
    assert all(abs(x - 4.0 / 15.5) < 1e-3 for x in steps["rel_excess"].to_list())  # own 19.5 vs 15.5 ms
