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
