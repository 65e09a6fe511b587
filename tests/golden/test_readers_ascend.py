"""Ascend PyTorch Profiler reader on small fixtures (tests/fixtures/ascend).

The fixtures are built by hand from Ascend's public documentation of the torch_npu profiler
output (see tests/fixtures/ascend/make_fixtures.py), not captured on a real NPU. Expected values
below come from that script: 2 ranks, steps 1-2 of 20 ms, MatMul 6 ms (rank 0) / 8 ms (rank 1),
one hcom all-reduce per step moving 16 MB over HCCS (op names and matrix keys as torch_npu writes them).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "ascend" / "run2"
T0_NS = 1_700_000_000_000_000_000


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    dst = tmp_path / "run2"
    shutil.copytree(FIX, dst)
    return dst


def test_ascend_ranks_from_profiler_info(run_dir):
    run = load_run(run_dir, jobs=1)
    assert run.rank_ids == [0, 1] and run.missing == [] and run.world_size == 2
    for r in (0, 1):
        info = run.ranks[r]
        assert info.rank_source == "profiler_info.json" and info.backend == "hccl"
        assert any(f.endswith("trace_view.json") for f in info.files)


def test_ascend_events_kinds_and_steps(run_dir):
    run = load_run(run_dir, jobs=1)
    ev = run.table(1, "events").to_pydict()
    kinds = dict(zip(ev["name"], ev["kind"]))
    assert kinds["MatMul"] == "kernel" and kinds["AscendCL@aclnnMm"] == "runtime"
    assert kinds["aten::mm"] == "cpu_op" and kinds["hcom_allReduce__378_0_1@1378"] == "kernel"
    assert "Computing" not in kinds  # Overlap Analysis is derived data, left out
    mm = [d for n, d in zip(ev["name"], ev["dur"]) if n == "MatMul"]
    assert mm == [8_000_000, 8_000_000]
    assert ev["ts"][ev["name"].index("ProfilerStep#1")] == T0_NS  # decimal-string ts read exactly here
    steps = run.table(0, "steps").to_pydict()
    assert steps["step"] == [1, 2] and steps["ts"][0] == T0_NS
    comm = [c for n, c in zip(ev["name"], ev["is_comm"]) if n.startswith("hcom_")]
    assert comm == [True, True]


def test_ascend_collectives_and_memory(run_dir):
    run = load_run(run_dir, jobs=1)
    c = run.table(0, "collectives").to_pydict()
    # hcom_allReduce__378_<counter>_1@1378: 378 is the end of the group hash, the counter the sequence
    assert c["op"] == ["all_reduce", "all_reduce"] and c["seq"] == [0, 1]
    assert c["pg_name"] == ["1378", "1378"] and c["bytes_in"] == [16_000_000, 16_000_000]
    assert c["dur"] == [5_000_000, 5_000_000] and c["ts"][0] == T0_NS + 8_200_000
    m = run.table(1, "memory").to_pydict()
    assert len(m["ts"]) == 3 and m["device"] == [1, 1, 1]  # PTA rows only, GE left out
    assert m["total_allocated"] == [64 << 20, 96 << 20, 80 << 20]
    assert m["bytes_delta"] == [0, 32 << 20, -16 << 20]


def test_analyses_run_on_ascend(run_dir):
    run = load_run(run_dir, jobs=1)
    results = run_all(run)
    assert results, "no analysis ran"
    ran = [n for n, r in results.items() if not r.skipped]
    assert "breakdown" in ran


def test_ascend_without_trace_view_is_one_clear_line(run_dir):
    (next(run_dir.glob("node0_1001*")) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    run = load_run(run_dir, jobs=1, allow_missing_ranks=True)
    assert run.rank_ids == [0] and run.missing == [1]
    assert any("no ASCEND_PROFILER_OUTPUT/trace_view.json" in p for p in run.problems)
