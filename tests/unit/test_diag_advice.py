"""Advice rules on hand-made breakdown numbers: each fires above its threshold, none on a healthy run."""
from __future__ import annotations

import polars as pl

from rankscope.analysis.diagnosis.advice import breakdown_rules, memory_rule, small_messages


def _bd(**per_rank: dict[str, float]) -> pl.DataFrame:
    rows = []
    for rank, parts in per_rank.items():
        for step in range(4):
            wall = 100.0
            comp = parts.get("computing", 90.0)
            row = {"rank": int(rank[1:]), "step": step, "wall": wall, "computing": comp,
                   "communication": parts.get("communication", 8.0), "overlapped": parts.get("overlapped", 7.0),
                   "comm_exposed": parts.get("comm_exposed", 1.0), "data_wait": parts.get("data_wait", 2.0),
                   "complete": True}
            row["free"] = wall - comp - row["comm_exposed"] - row["data_wait"]
            rows.append(row)
    return pl.DataFrame(rows)


def test_healthy_run_gets_no_advice():
    assert breakdown_rules(_bd(r0={}, r1={}, r2={})) == []


def test_each_rule_fires_with_evidence():
    bd = _bd(r0={"computing": 60.0, "data_wait": 12.0, "comm_exposed": 20.0, "communication": 22.0,
                 "overlapped": 2.0}, r1={"computing": 80.0}, r2={})
    kinds = {f.kind: f for f in breakdown_rules(bd)}
    assert set(kinds) == {"advice.data_loading", "advice.exposed_comm", "advice.dp_imbalance",
                          "advice.missing_overlap", "advice.host_bound"}
    assert kinds["advice.host_bound"].ranks == (1,)  # 17 % of its step outside compute, comm and data
    assert kinds["advice.data_loading"].ranks == (0,) and kinds["advice.data_loading"].evidence["share"]["0"] == 0.12
    assert kinds["advice.dp_imbalance"].ranks == (2,)


def test_host_bound_gaps():
    kinds = [f.kind for f in breakdown_rules(_bd(r0={"computing": 70.0}, r1={"computing": 70.0}))]
    assert kinds == ["advice.host_bound"]


def test_small_messages_and_memory():
    inst = pl.DataFrame({"bytes": [4096] * 90 + [1 << 24] * 10})
    f = small_messages(inst, n_steps=3)
    assert f is not None and f.evidence["share"] == 0.9 and f.evidence["per_step"] == 30.0
    assert small_messages(inst, n_steps=10) is None  # 9 per step: not enough to matter
    peaks = [{"rank": 0, "peak_allocated": 95}, {"rank": 1, "peak_allocated": 50}]
    m = memory_rule(peaks, {0: 100, 1: 100})
    assert m is not None and m.ranks == (0,)
    assert memory_rule(peaks, {}) is None
