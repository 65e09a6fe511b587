"""Folded stacks: exact self times from a hand-made nested trace; icicle nodes are consistent."""
from __future__ import annotations

import pytest

from rankscope.model.run import load_run
from rankscope.render.flame import folded, icicle_nodes, write_folded
from tests.helpers import tiny_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return load_run(tiny_run(tmp_path_factory.mktemp("fl") / "tiny"), jobs=1)


def test_folded_self_times(run, tmp_path):
    got = dict(folded(run))
    # 2 ranks × 2 steps; per step: step 1000 µs ⊃ fwd 500 ⊃ (mm 300, relu 50); all_reduce 200 under the step
    assert got == {"ProfilerStep;fwd;aten::mm": 1200, "ProfilerStep": 1200, "ProfilerStep;gloo:all_reduce": 800,
                   "ProfilerStep;fwd": 600, "ProfilerStep;fwd;aten::relu": 200}
    assert dict(folded(run, ranks=[1]))["ProfilerStep;fwd;aten::mm"] == 600
    lines = write_folded(run, tmp_path / "x.folded").read_text().splitlines()
    assert "ProfilerStep;fwd;aten::mm 1200" in lines


def test_icicle_inclusive_values(run):
    n = icicle_nodes(run)
    by_label = dict(zip(n["labels"], n["values"]))
    assert by_label["ProfilerStep"] == 4000 and by_label["fwd"] == 2000
    ids = set(n["ids"])
    assert all(p == "" or p in ids for p in n["parents"])
