"""The critical path across ranks on synthetic runs whose truth is known: the same run (same seed)
generated with and without an injected delay. The what-if of the rank that bounds the step must
predict the twin's step time within 5 %; a small but steady cost (rank 3's data loading 3x: about
+3 ms of a 51 ms step, below the straggler bar) is named with its cost; a healthy twin gets no
finding."""
from __future__ import annotations

import json

import numpy as np
import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from rankscope.synth import generate

KINDS = {"compute", "launch", "kernel", "sync", "collective", "p2p", "wait"}
CASES = {  # name: (ranks, straggler or None)
    "data": (8, "3:data:3"), "data_twin": (8, None),
    "compute": (4, "2:compute:1.15"), "compute_twin": (4, None),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory, monkeypatch_module):
    out = {}
    for name, (ranks, strag) in CASES.items():
        root = tmp_path_factory.mktemp(name) / "run"
        generate(root, ranks=ranks, steps=5, seed=7, stragglers=[strag] if strag else [])
        out[name] = run_all(load_run(root, jobs=1), ["critical_path"])["critical_path"]
    return out


@pytest.fixture(scope="module")
def monkeypatch_module(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("RANKSCOPE_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield mp
    mp.undo()


def _twin_steps(res) -> dict[int, float]:
    return {s["step"]: s["step_ms"] for s in res.summary["per_step"]}


def test_small_steady_data_cost_is_said(results):
    res = results["data"]
    b = res.summary["bounding"]
    assert b["rank"] == 3 and b["steady"] and b["steps"] == b["of_steps"] == 5
    extra = np.median([s["step_ms"] for s in res.summary["per_step"]]) - np.median(list(_twin_steps(results["data_twin"]).values()))
    assert 0 < extra < 0.1 * b["step_ms"]  # small: under the 10 % straggler bar
    assert 0.7 * extra <= b["cost_ms"] <= 1.3 * extra
    f = [f for f in res.findings if f.kind == "critical_path"]
    assert len(f) == 1 and f[0].ranks == (3,) and f[0].evidence["cost_ms"] == b["cost_ms"]
    assert "DataLoader" in res.summary["description"]


@pytest.mark.parametrize("case,rank", [("data", 3), ("compute", 2)])
def test_what_if_predicts_the_twin_within_5_percent(results, case, rank):
    res, twin = results[case], _twin_steps(results[f"{case}_twin"])
    b = res.summary["bounding"]
    assert b["rank"] == rank
    assert abs(b["step_ms_if_median"] - np.median(list(twin.values()))) <= 0.05 * np.median(list(twin.values()))
    wi = {w["rank"]: w for w in res.summary["what_if"]}
    assert abs(wi[rank]["step_ms_if_median"] - np.median(list(twin.values()))) <= 0.05 * np.median(list(twin.values()))
    for s in res.summary["per_step"]:  # each step on its own too
        assert abs(s["step_ms_if_median"] - twin[s["step"]]) <= 0.05 * twin[s["step"]], s["step"]


@pytest.mark.parametrize("case", ["data_twin", "compute_twin"])
def test_healthy_twin_has_no_finding(results, case):
    res = results[case]
    assert not [f for f in res.findings if f.kind == "critical_path"]
    assert not res.summary["bounding"] or not res.summary["bounding"]["steady"]


def test_path_is_the_step_and_its_segments_read(results):
    res = results["data"]
    for s in res.summary["per_step"]:
        assert abs(s["path_ms"] - s["step_ms"]) <= 0.02 * s["step_ms"]  # the path covers the step
        kinds = {c["kind"] for c in s["chain"]}
        assert kinds <= KINDS and "collective" in kinds
        for c in s["chain"]:
            if c["kind"] == "collective":
                assert c["group"] is not None and c["seq"] >= 0
    seg = res.tables["segments"]
    assert set(seg.column("kind").to_pylist()) <= KINDS


def test_json_what_if_lists_every_rank(results):
    for name, (ranks, _) in CASES.items():
        s = results[name].summary
        json.dumps(s)  # plain data for ``rankscope analyze --json``
        assert [w["rank"] for w in s["what_if"]] == list(range(ranks))
        assert all(set(w) == {"rank", "step_ms", "step_ms_if_median"} for w in s["what_if"])
