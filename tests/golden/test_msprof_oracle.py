"""rankscope's Ascend cluster exports against msprof-analyze (the tool that owns the format).

Input: the realistic 4-rank torch_npu run of rankscope/synth/ascend_run.py (TP 2 x PP 2 on two
nodes, slow rank 3, slow HCCS link 0-1), files built from torch_npu 2.14.0's writer rules. Both
tools read the same folders; every value of cluster_step_trace_time.csv, cluster_communication.json,
cluster_communication_matrix.json and communication_group.json is compared (tests/msprof_oracle.py).
Expected: all 5,151 values agree (before issue 13: the CLI crashed in clock alignment, 0 agreed).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from rankscope.synth.ascend_run import write_run
from tests import msprof_oracle
from tests.helpers import require


@pytest.fixture(scope="module", autouse=True)
def oracle_installed() -> None:
    """msprof-analyze is the oracle of every test here: missing, they fail with its install command (never a skip)."""
    require("msprof_analyze", "msprof-analyze>=26.2")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("oracle")
    write_run(root / "run")
    ref = msprof_oracle.run_msprof(root / "run", root / "msprof")
    got = msprof_oracle.run_rankscope(root / "run", root / "rankscope")
    return ref, got


def test_every_value_agrees_with_msprof_analyze(outputs):
    ref, got = outputs
    res = msprof_oracle.compare(ref, got)
    for name, (ok, n, bad) in res.items():
        assert n > 20, f"{name}: too few values to compare ({n})"
        assert ok == n, f"{name}: {ok} of {n} agree; first differences: {bad}"
    assert sum(n for _, n, _ in res.values()) == 5151


def test_msprof_analyze_shows_the_slow_rank_and_the_slow_link(outputs):
    """The oracle itself sees the injected faults (so the agreement above is about something)."""
    ref, _ = outputs
    with open(ref / "cluster_step_trace_time.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["Type"] == "rank"]
    comp = {}
    for r in rows:
        comp[int(r["Index"])] = comp.get(int(r["Index"]), 0) + float(r["Computing"])
    assert max(comp, key=comp.get) == 3
    assert {r["DP Index"] + r["PP Index"] + r["TP Index"] for r in rows if r["Index"] == "3"} == {"011"}
    m = json.loads((ref / "cluster_communication_matrix.json").read_text())
    tp0 = next(v for k, v in m["(0, 1)"]["step10"].items() if k.startswith("Total Op Info"))
    tp1 = next(v for k, v in m["(2, 3)"]["step10"].items() if k.startswith("Total Op Info"))
    assert tp0["0-1"]["Bandwidth(GB/s)"] < 0.3 * tp1["2-3"]["Bandwidth(GB/s)"]
    stages = {r["Index"] for r in csv.DictReader(open(ref / "cluster_step_trace_time.csv")) if r["Type"] == "stage"}
    assert stages == {"(0, 1)", "(2, 3)"}


def test_cli_synth_ascend_at_8_ranks_agrees_too(tmp_path):
    """`rankscope synth --format ascend` (8 ranks on 2 nodes, TP 2 x PP 4, slow rank 5, slow link 0-1):
    msprof-analyze and rankscope agree on every value, the verdict names the slow rank; and the same
    folders named as MindSpore names them (*_ascend_ms) read the same in both tools."""
    import subprocess
    import sys

    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rankscope.cli", "synth", str(run), "--format", "ascend", "--ranks",
                           "8", "--gpus-per-host", "4", "--straggler", "5:compute:1.4", "--slow-link", "0-1:0.3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    dirs = sorted(run.glob("*_ascend_pt"))
    assert len(dirs) == 8
    ref = msprof_oracle.run_msprof(run, tmp_path / "msprof")
    got = msprof_oracle.run_rankscope(run, tmp_path / "rankscope")
    res = msprof_oracle.compare(ref, got)
    for name, (ok, n, bad) in res.items():
        assert n > 20 and ok == n, f"{name}: {ok} of {n} agree; first differences: {bad}"
    from rankscope.analysis.registry import run_all
    from rankscope.model.run import load_run

    r = load_run(run, jobs=1)
    assert r.rank_ids == list(range(8))
    st = run_all(r, ["breakdown", "clock", "links", "straggler"])["straggler"]
    assert [f.ranks for f in st.findings] == [(5,)], st.summary["verdict"]
    for d in dirs:  # MindSpore's folder names (msprof-analyze takes a cluster of one kind)
        d.rename(d.with_name(d.name.replace("_ascend_pt", "_ascend_ms")))
    ms = load_run(run, jobs=1, cache_dir=tmp_path / "cache-ms")
    assert ms.rank_ids == list(range(8))
    ref = msprof_oracle.run_msprof(run, tmp_path / "msprof-ms")
    got = msprof_oracle.run_rankscope(run, tmp_path / "rankscope-ms")
    assert all(ok == n for ok, n, _ in msprof_oracle.compare(ref, got).values())
