"""Slow-link rule on hand-made matched collectives, and on a synthetic cluster with a slow pair."""
from __future__ import annotations

import json

import numpy as np
import polars as pl

from rankscope.analysis.comm.links import comm_stragglers, instances, slow_groups


def _matched(slow: dict[str, float], n: int = 10, seed: int = 0) -> pl.DataFrame:
    """4 tp pairs + 2 dp groups; all ranks arrive within 20 µs; transfer 200 µs × factor of the group."""
    groups = {"1": [0, 1], "2": [2, 3], "3": [4, 5], "4": [6, 7], "5": [0, 2, 4, 6], "6": [1, 3, 5, 7]}
    rng = np.random.default_rng(seed)
    rows = []
    for name, ranks in groups.items():
        for k in range(n):
            t = 1_000_000 * k + int(name) * 10_000_000
            fin = t + 20_000 + int(200_000 * slow.get(name, 1.0) * (1 + 0.03 * rng.standard_normal()))
            for r in ranks:
                a = t + int(rng.integers(0, 20_000))
                rows.append({"pg_name": name, "pg_ranks": ",".join(map(str, ranks)), "instance": k,
                             "op": "all_reduce", "rank": r, "ts": a, "end": fin, "dur": fin - a,
                             "dev_ts": -1, "dev_end": -1, "bytes": (1 << 25) if len(ranks) == 2 else (1 << 23)})
    return pl.DataFrame(rows)


def test_no_slow_group_when_healthy():
    assert slow_groups(instances(_matched({}), {})) == []


def test_slow_pair_found_with_ratio():
    found = slow_groups(instances(_matched({"3": 2.0}), {}))
    assert [(g["pg_name"], g["ranks"]) for g in found] == [("3", [4, 5])]
    assert 1.8 < found[0]["ratio"] < 2.2 and found[0]["peers"] == 4 and found[0]["arrival_skew_ns"] < 20_000
    assert comm_stragglers(found) == []


def test_rank_in_every_slow_group_is_a_comm_straggler():
    found = slow_groups(instances(_matched({"2": 1.5, "6": 1.5}), {}))
    assert sorted(g["pg_name"] for g in found) == ["2", "6"]
    assert comm_stragglers(found) == [3]


def test_synthetic_slow_link(tmp_path):
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run
    from rankscope.synth import generate

    path = generate(tmp_path / "run", ranks=8, steps=4, ops_per_step=40, slow_links=["4-5:3.0"],
                    clock_skew_s=0.5, seed=3)
    res = run_all(load_run(path, jobs=1), names=["breakdown", "clock", "links", "straggler"])
    slow = {f.evidence["pg_name"] for f in res["links"].findings}
    truth = json.loads((path / "synth_truth.json").read_text())["slow_links"][0]["affected_groups"]
    assert slow and slow <= set(truth)
    assert res["straggler"].summary["verdict"] == "no straggler"


def test_group_members_come_from_observed_ranks_not_truncated_strings():
    m = _matched({"2": 1.5, "6": 1.5}).with_columns(pl.lit("[0, 1, ...]").alias("pg_ranks"))
    found = slow_groups(instances(m, {}))
    assert {g["pg_name"]: g["ranks"] for g in found} == {"2": [2, 3], "6": [1, 3, 5, 7]}
    assert comm_stragglers(found) == [3]


def test_no_ratio_over_peers_that_took_no_time():
    """Issue 25: "all_gather of 0.2 MiB takes 2337792.0x its 1 peer(s)": gloo transfers clipped at 0 are
    no baseline. Groups whose peers' median transfer is zero are not compared; a real baseline still is."""
    def inst(transfers: dict[str, int]) -> pl.DataFrame:
        return pl.DataFrame([{"op": "all_gather", "bytes": 200_000, "n": 2, "pg_name": g, "transfer": t, "skew": 0,
                              "members": [2 * i, 2 * i + 1]} for i, (g, t) in enumerate(transfers.items())
                             for _ in range(5)])
    assert slow_groups(inst({"1": 2_337_792, "2": 0})) == []
    found = slow_groups(inst({"1": 2_337_792, "2": 1_000_000}))
    assert [g["pg_name"] for g in found] == ["1"] and abs(found[0]["ratio"] - 2.337792) < 1e-6
