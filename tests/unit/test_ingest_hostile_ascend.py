"""Hostile Ascend (torch_npu profiler) files, on the pool and with --jobs 1. Base: the documented-layout
fixture tests/fixtures/ascend/run2 (2 ranks; rank 1 is the straggler, cause host); rank 1's files are
damaged one at a time. Per case: exactly the expected problem record (kind, file, rank 1, count), said on
one line of its own; rank 1 kept or dropped (missing, with the reason); the verdict equal to the control
run's (the same fixture, undamaged) while rank 1 is read, and no verdict at all once it is dropped (one
rank left), never a traceback."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from rankscope.cli import main
from rankscope.errors import safe
from rankscope.model.info import Kind

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "ascend" / "run2"
R1 = "node0_1001_20250101000000000_ascend_pt"
OUT = "ASCEND_PROFILER_OUTPUT"
COMM = f"{R1}/{OUT}/communication.json"


def _w(rel: str, data: bytes) -> Callable[[Path], None]:
    return lambda root: (root / R1 / rel).write_bytes(data)


# name, damage, (kind, file relative to the run, count), rank 1 still analyzed
CASES: list[tuple[str, Callable[[Path], None], tuple[Kind, str, int], bool]] = [
    ("comm_list", _w(f"{OUT}/communication.json", b"[1, 2]"), (Kind.NOT_AN_OBJECT, COMM, 1), True),
    ("comm_not_json", _w(f"{OUT}/communication.json", b"{"), (Kind.NOT_JSON, COMM, 1), True),
    ("comm_deep", _w(f"{OUT}/communication.json", b"[" * 100_000 + b"]" * 100_000), (Kind.TOO_DEEP, COMM, 1), True),
    ("comm_wrong_types", _w(f"{OUT}/communication.json", json.dumps(
        {"step1": {"collective": {"hcom_allReduce__1_0_1@9": {"Communication Time Info": {
            "Start Timestamp(us)": "soon", "Elapse Time(ms)": "long"}}, "x": [1], "y": "z"}, "p2p": [3]}}).encode()),
     (Kind.BAD_FIELD, COMM, 4), True),
    ("comm_numbers_as_strings", _w(f"{OUT}/communication.json", json.dumps(
        {"step1": {"collective": {"hcom_allReduce__1_0_1@9": {"Communication Time Info": {
            "Start Timestamp(us)": 1.7e15, "Elapse Time(ms)": "5"}, "Communication Bandwidth Info": "HCCS"}}}}).encode()),
     (Kind.BAD_FIELD, COMM, 1), True),
    ("profiler_info_list", _w("profiler_info_1.json", b"[]"), (Kind.BAD_FIELD, f"{R1}/profiler_info_1.json", 1), True),
    ("metadata_dist_list", _w("profiler_metadata.json", b'{"distributed_args": [1, 2]}'),
     (Kind.BAD_FIELD, f"{R1}/profiler_metadata.json", 1), True),
    ("trace_view_empty", _w(f"{OUT}/trace_view.json", b""), (Kind.EMPTY, f"{R1}/{OUT}/trace_view.json", 1), False),
    ("trace_view_not_json", _w(f"{OUT}/trace_view.json", b"<html>"), (Kind.NOT_JSON, f"{R1}/{OUT}/trace_view.json", 1),
     False),
    ("memory_csv_garbage", _w(f"{OUT}/memory_record.csv", b"a,b\n1\n\x00\xff,,,\n"),
     (Kind.BAD_TABLE, f"{R1}/{OUT}/memory_record.csv", 1), True),
    ("step_csv_garbage", _w(f"{OUT}/step_trace_time.csv", b"\x00\xff\n1,2,3\n"),
     (Kind.BAD_TABLE, f"{R1}/{OUT}/step_trace_time.csv", 1), True),
]


def _analyze(tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs: str,
             damage: Callable[[Path], None] | None) -> tuple[Path, dict[str, Any], str]:
    root = tmp_path / "run2"
    shutil.copytree(FIX, root)
    if damage is not None:
        damage(root)
    assert main(["analyze", str(root), "-j", jobs, "--json"]) == 0
    got = capsys.readouterr()
    assert "Traceback" not in got.err and "rankscope: error" not in got.err, got.err
    return root, json.loads(got.out), got.err


def _verdict(doc: dict[str, Any]) -> list[tuple[str, list[int], str | None]]:
    st = doc["analyses"]["straggler"]
    return sorted((f["kind"], f["ranks"], f["evidence"].get("cause")) for f in st["findings"])


@pytest.fixture(scope="module", params=["1", "2"], ids=["serial", "pool"])
def control(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any]:
    """(jobs, the undamaged fixture's verdict) per mode: rank 1 is the straggler, cause host."""
    root = tmp_path_factory.mktemp("ascend-control") / "run2"
    shutil.copytree(FIX, root)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["analyze", str(root), "-j", request.param, "--json"]) == 0
    doc = json.loads(out.getvalue())
    assert _verdict(doc) == [("straggler", [1], "host")] and doc["run"]["issues"] == []
    return request.param, _verdict(doc)


@pytest.mark.parametrize("name,damage,expect,kept", CASES, ids=[c[0] for c in CASES])
def test_hostile_ascend(tmp_path, capsys, control, name, damage, expect, kept):
    jobs, want = control
    root, doc, err = _analyze(tmp_path, capsys, jobs, damage)
    recs = doc["run"]["issues"]
    kind, rel, count = expect
    assert [(r["kind"], os.path.relpath(r["file"], root), r["rank"], r["count"]) for r in recs] == \
        [(kind.value, rel, 1, count)], err
    assert err.splitlines().count(f"warning: {safe(recs[0]['line'])}") == 1, err  # one line, said once
    ranks = [r["rank"] for r in doc["run"]["ranks"]]
    missing = {m["rank"]: m["why"] for m in doc["coverage"]["missing"]}
    if kept:
        assert ranks == [0, 1] and not missing and _verdict(doc) == want
    else:  # dropped, with the reason; one rank left: no verdict, and it says why
        assert ranks == [0] and list(missing) == [1] and recs[0]["line"].endswith(missing[1])
        st = doc["analyses"]["straggler"]
        assert st["findings"] == [] and st["skipped"]
