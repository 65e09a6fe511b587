"""Hostile Ascend (torch_npu profiler) files: one line each, the other rank analyzed, never a
traceback, on the pool and with --jobs 1. Base: the documented-layout fixture tests/fixtures/ascend/run2
(2 ranks); rank 1's files are damaged one at a time."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from rankscope.cli import main

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "ascend" / "run2"
R1 = "node0_1001_20250101000000000_ascend_pt"
OUT = "ASCEND_PROFILER_OUTPUT"


def _w(rel: str, data: bytes) -> Callable[[Path], None]:
    return lambda root: (root / R1 / rel).write_bytes(data)


CASES: list[tuple[str, Callable[[Path], None], str, bool]] = [  # name, damage, line, rank 1 analyzed
    ("comm_list", _w(f"{OUT}/communication.json", b"[1, 2]"), "expected a JSON object, found list", True),
    ("comm_not_json", _w(f"{OUT}/communication.json", b"{"), "communication.json: not readable JSON", True),
    ("comm_deep", _w(f"{OUT}/communication.json", b"[" * 100_000 + b"]" * 100_000), "nested too deeply", True),
    ("comm_wrong_types", _w(f"{OUT}/communication.json", json.dumps(
        {"step1": {"collective": {"hcom_allReduce__1_0_1@9": {"Communication Time Info": {
            "Start Timestamp(us)": "soon", "Elapse Time(ms)": "long"}}, "x": [1], "y": "z"}, "p2p": [3]}}).encode()),
     "communication entries with wrong types were left out", True),
    ("comm_numbers_as_strings", _w(f"{OUT}/communication.json", json.dumps(
        {"step1": {"collective": {"hcom_allReduce__1_0_1@9": {"Communication Time Info": {
            "Start Timestamp(us)": 1.7e15, "Elapse Time(ms)": "5"}, "Communication Bandwidth Info": "HCCS"}}}}).encode()),
     "communication entries with wrong types", True),
    ("profiler_info_list", _w("profiler_info_1.json", b"[]"), "", True),
    ("metadata_dist_list", _w("profiler_metadata.json", b'{"distributed_args": [1, 2]}'), "", True),
    ("trace_view_empty", _w(f"{OUT}/trace_view.json", b""), "empty file", False),
    ("trace_view_not_json", _w(f"{OUT}/trace_view.json", b"<html>"), "not valid JSON", False),
    ("memory_csv_garbage", _w(f"{OUT}/memory_record.csv", b"a,b\n1\n\x00\xff,,,\n"), "memory_record.csv: unreadable", True),
    ("step_csv_garbage", _w(f"{OUT}/step_trace_time.csv", b"\x00\xff\n1,2,3\n"), "", True),
]


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["serial", "pool"])
@pytest.mark.parametrize("name,damage,line,kept", CASES, ids=[c[0] for c in CASES])
def test_hostile_ascend(tmp_path, capsys, jobs, name, damage, line, kept):
    root = tmp_path / "run2"
    shutil.copytree(FIX, root)
    damage(root)
    assert main(["analyze", str(root), "-j", jobs, "--json"]) == 0
    got = capsys.readouterr()
    assert "Traceback" not in got.err
    if line:
        assert any(line in ln for ln in got.err.splitlines()), got.err
    ranks = [r["rank"] for r in json.loads(got.out)["run"]["ranks"]]
    assert 0 in ranks and (1 in ranks) == kept
