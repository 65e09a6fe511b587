"""End-to-end: the real demo (torchrun, gloo, 2 ranks) through the CLI, in a temp directory."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rankscope.model.run import load_run

pytestmark = pytest.mark.slow


def _demo(tmp_path, *extra):
    cmd = [sys.executable, "-m", "rankscope.cli", "demo", "--ranks", "2", "--steps", "6", "--warmup", "2",
           "--out", str(tmp_path), "--run-id", "r", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout, tmp_path / "r"


def test_demo_healthy(tmp_path):
    stdout, run_dir = _demo(tmp_path)
    run = load_run(run_dir, jobs=1)
    assert run.rank_ids == [0, 1] and run.missing == []
    for r in (0, 1):
        assert [s["step"] for s in run.table(r, "steps").to_pylist()] == [2, 3, 4, 5, 6, 7]
    report = (run_dir / "report.html").read_text()
    assert "rank 0" in report and "rank 1" in report
    assert "no straggler" in stdout
    meta = json.loads((run_dir / "ranks" / "1" / "meta.json").read_text())
    assert meta["rank"] == 1 and meta["world_size"] == 2


def test_demo_breakdown_sums_to_step_time(tmp_path):
    from rankscope.analysis.registry import run_all

    _, run_dir = _demo(tmp_path)
    bd = run_all(load_run(run_dir, jobs=1))["breakdown"].tables["breakdown"].to_pylist()
    assert len(bd) == 12
    for r in bd:
        parts = r["computing"] + r["comm_exposed"] + r["data_wait"] + r["free"]
        assert abs(parts - r["wall"]) <= 0.01 * r["wall"]


@pytest.mark.parametrize("kind", ["compute", "data", "comm"])
def test_demo_slow_rank_named_with_cause(tmp_path, kind):
    stdout, _ = _demo(tmp_path, "--slow-rank", "1", "--slow-kind", kind)
    assert f"rank 1 is slow: {kind}" in stdout
