"""Streaming ingest: large files are decoded a piece at a time, with results identical to the
whole-file reader; a file larger than the whole-file memory limit is streamed, not refused."""
from __future__ import annotations

import gzip
import json
import shutil

import pytest

from rankscope.model import stream
from rankscope.model.run import load_run
from tests.helpers import x


def _tables(run, r):  # type: ignore[no-untyped-def]
    return {n: run.table(r, n).to_pydict() for n in ("events", "collectives", "memory", "steps")}


@pytest.mark.parametrize("name", ["nccl_parser_config", "ns_resolution_trace"])
def test_streamed_equals_whole(shared_data, tmp_path, monkeypatch, name):
    for mode, threshold in (("whole", str(1 << 40)), ("stream", "0")):
        shutil.copytree(shared_data / "hta" / name, tmp_path / mode, ignore=shutil.ignore_patterns("analysis"))
    monkeypatch.setattr(stream, "PIECE", 1 << 16)  # many pieces even for these small files
    monkeypatch.setenv("RANKSCOPE_STREAM_BYTES", str(1 << 40))
    whole = load_run(tmp_path / "whole", jobs=1, allow_missing_ranks=True)
    monkeypatch.setenv("RANKSCOPE_STREAM_BYTES", "0")
    streamed = load_run(tmp_path / "stream", jobs=1, allow_missing_ranks=True)
    assert streamed.rank_ids == whole.rank_ids
    r = whole.rank_ids[0]
    assert streamed.ranks[r].world_size == whole.ranks[r].world_size
    assert streamed.ranks[r].base_time_ns == whole.ranks[r].base_time_ns
    assert _tables(streamed, r) == _tables(whole, r)


def test_huge_file_is_streamed_not_refused(tmp_path, monkeypatch):
    """Stand-in for a 2 GB trace: 60k events (~9 MB of JSON) against a 1 MB whole-file limit and
    64 KiB pieces. Streaming reads every event; the whole-file path would have refused it."""
    evs = [x("ProfilerStep#1", 0, 10**6, cat="user_annotation")] + [x(f"op{i % 50}", i, 1) for i in range(60000)]
    doc = {"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": evs, "baseTimeNanoseconds": 5000}
    (tmp_path / "big.json.gz").write_bytes(gzip.compress(json.dumps(doc, indent=1).encode()))
    monkeypatch.setenv("RANKSCOPE_MAX_JSON_BYTES", str(1 << 20))
    monkeypatch.setenv("RANKSCOPE_STREAM_BYTES", "0")
    monkeypatch.setattr(stream, "PIECE", 1 << 16)
    run = load_run(tmp_path, jobs=1)
    assert run.ranks[0].counts["events"] == 60001 and not run.problems
    assert run.table(0, "events").column("ts").to_pylist()[:2] == [5000, 5000]  # base added after the fact


def test_truncated_large_file_falls_back_to_salvage(tmp_path, monkeypatch):
    evs = [x(f"op{i}", i, 1) for i in range(3000)]
    text = json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": evs}, indent=1).encode()
    (tmp_path / "t.json").write_bytes(text[: len(text) // 2])
    monkeypatch.setenv("RANKSCOPE_STREAM_BYTES", "0")
    monkeypatch.setattr(stream, "PIECE", 1 << 14)
    run = load_run(tmp_path, jobs=1)
    info = run.ranks[0]
    assert info.partial and 1000 < info.counts["events"] < 3000
    assert any("truncated JSON" in p for p in run.problems)


def test_compact_json_is_streamed_in_pieces(tmp_path, monkeypatch):
    """Compact JSON (no newlines, as `rankscope synth` and some exporters write) is cut between
    events too, so it streams in many pieces instead of one."""
    evs = [x(f"op{i}", i, 1, note='a "},{" string') for i in range(5000)]
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"traceEvents": evs, "baseTimeNanoseconds": 7}, separators=(",", ":")))
    monkeypatch.setattr(stream, "PIECE", 1 << 15)
    raw = stream.StreamTrace(str(path))
    sizes = [len(c) for c in raw.chunks()]
    assert len(sizes) > 10 and sum(sizes) == 5000 and raw.trace.baseTimeNanoseconds == 7


def test_unknown_phase_falls_back_to_generic_decode(tmp_path, monkeypatch):
    """Events decode through a union tagged on "ph" (fast path); a phase outside it ("Z") or an event
    without "ph" makes the chunk decode with the generic struct instead: same tables either way."""
    from rankscope.model.readers import kineto

    evs = [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x("aten::mm", 1, 5),
           {"ph": "i", "name": "[memory]", "ts": 2, "pid": 1, "tid": 1,
            "args": {"Total Allocated": 64, "Total Reserved": 128, "Bytes": 64, "Device Id": 0}},
           {"ph": "s", "id": 1, "name": "ac2g", "cat": "ac2g", "ts": 1, "pid": 1, "tid": 1}]
    odd = evs + [{"ph": "Z", "name": "mystery", "ts": 3}, {"name": "no phase", "ts": 4}]
    for name, doc in (("plain", evs), ("odd", odd)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "r0.json").write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1},
                                                             "traceEvents": doc}))
    typed = kineto._TYPED.decode(json.dumps(evs).encode())
    assert [type(e).__name__ for e in typed][:3] == ["XEvent", "XEvent", "Instant"] and typed[3].ph == "s"
    with pytest.raises(kineto.msgspec.ValidationError):
        kineto._TYPED.decode(json.dumps(odd).encode())
    for threshold in (str(1 << 40), "0"):  # whole-file reader, then the streaming reader
        monkeypatch.setenv("RANKSCOPE_STREAM_BYTES", threshold)
        for name in ("plain", "odd"):
            shutil.rmtree(tmp_path / name / "analysis", ignore_errors=True)
        plain, weird = (load_run(tmp_path / n, jobs=1) for n in ("plain", "odd"))
        assert _tables(weird, 0) == _tables(plain, 0)
        assert _tables(plain, 0)["memory"]["total_reserved"] == [128]
        assert _tables(plain, 0)["events"]["name"] == ["ProfilerStep#1", "aten::mm"]
