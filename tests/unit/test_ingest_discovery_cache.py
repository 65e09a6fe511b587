"""Rank discovery from content (any JSON spacing), its reported source, and the Parquet cache."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rankscope.model import tables
from rankscope.model.run import load_run
from tests.helpers import write_trace, x


def _events() -> list[dict]:
    return [x("ProfilerStep#4", 0, 100, cat="user_annotation"), x("aten::mm", 10, 50)]


def test_rank_from_content_with_odd_spacing_beats_file_name(tmp_path):
    doc = json.dumps({"traceEvents": _events()})[:-1]
    # Hand-spaced, the way some writers format it: spaces before colons and inside braces.
    text = doc + ',\n  "distributedInfo" :   {  "backend" : "nccl" , "rank" :  3 ,"world_size":4 }\n}'
    (tmp_path / "rank-7.json").write_text(text)
    run = load_run(tmp_path / "rank-7.json", jobs=1, allow_missing_ranks=True)
    assert run.rank_ids == [3]
    info = run.ranks[3]
    assert info.rank_source == "content" and info.world_size == 4 and info.backend == "nccl"
    assert any("file name says rank 7 but the trace content says rank 3" in p for p in run.problems)


def test_rank_from_meta_json_then_directory_name_then_file_name(tmp_path):
    root = tmp_path / "run"
    (root / "ranks" / "0").mkdir(parents=True)
    write_trace(root / "ranks" / "0" / "w.json", _events(), rank=None)
    (root / "ranks" / "0" / "meta.json").write_text(json.dumps({"rank": 0, "run_id": "R"}))
    write_trace(root / "ranks" / "1" / "w.json", _events(), rank=None)  # no meta.json
    run = load_run(root, jobs=1, allow_missing_ranks=True)
    assert {r: i.rank_source for r, i in run.ranks.items()} == {0: "meta.json", 1: "directory name"}

    flat = tmp_path / "flat"
    write_trace(flat / "trace_rank_5.json", _events(), rank=None)
    write_trace(flat / "worker2.pt.trace.json", _events(), rank=None)
    run = load_run(flat, jobs=1, allow_missing_ranks=True)
    assert run.rank_ids == [2, 5] and {i.rank_source for i in run.ranks.values()} == {"file name"}


def test_real_traces_rank_sources(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("RANKSCOPE_CACHE", str(tmp_path / "cache"))
    run = load_run(shared_data / "hta" / "trace_filter", jobs=1, allow_missing_ranks=True)
    assert {r: i.rank_source for r, i in run.ranks.items()} == {0: "content", 1: "content"}
    run = load_run(shared_data / "hta" / "rank_unavailable", jobs=1, allow_missing_ranks=True)
    (info,) = run.ranks.values()
    assert info.rank_source in ("assigned", "file name")
    assert info.rank_source != "assigned" or any("rank unknown" in p for p in run.problems)


def test_second_load_reads_only_the_cache(tmp_path, monkeypatch):
    for r in (0, 1):
        write_trace(tmp_path / f"r{r}.json.gz", _events(), rank=r, gz=True)
    first = load_run(tmp_path, jobs=1)
    calls = {"n": 0}
    real = tables.build

    def counting(raw, *rest):  # type: ignore[no-untyped-def]
        calls["n"] += 1  # every decode (whole or streamed) goes through tables.build
        return real(raw, *rest)

    monkeypatch.setattr(tables, "build", counting)
    again = load_run(tmp_path, jobs=1)
    assert calls["n"] == 0
    assert again.ranks[1].cache == first.ranks[1].cache
    assert again.table(1, "events").num_rows == 2 and again.table(0, "steps").column("step").to_pylist() == [4]
    # A changed source (size/mtime/head) is decoded again; the unchanged one is not.
    write_trace(tmp_path / "r1.json.gz", _events() + [x("aten::add", 70, 5)], rank=1, gz=True)
    third = load_run(tmp_path, jobs=1)
    assert calls["n"] == 1 and third.table(1, "events").num_rows == 3


def test_parallel_workers_return_only_summaries(tmp_path):
    for r in (0, 1):
        write_trace(tmp_path / f"r{r}.json", _events(), rank=r)
    run = load_run(tmp_path, jobs=2)
    for info in run.ranks.values():
        # What crosses the process boundary is a RankInfo: counts and a cache path, no events.
        assert info.counts["events"] == 2 and Path(info.cache, "events.parquet").is_file()
        assert len(json.dumps(info.to_json())) < 4096


def test_read_only_run_directory_gets_its_cache_elsewhere(tmp_path, monkeypatch):
    """Shared reference data is marked read-only: even as root, nothing is written into it."""
    d = tmp_path / "ro"
    write_trace(d / "r0.json", _events(), rank=0, world=1)
    d.chmod(0o555)
    monkeypatch.setenv("RANKSCOPE_CACHE", str(tmp_path / "home-cache"))
    try:
        run = load_run(d, jobs=1)
        assert not (d / "analysis").exists()
        assert run.ranks[0].cache.startswith(str(tmp_path / "home-cache"))
        assert load_run(d, jobs=1).ranks[0].cache == run.ranks[0].cache
    finally:
        d.chmod(0o755)


def test_assigned_rank_never_collides_with_a_real_one(tmp_path):
    from rankscope.model.run import load_run
    from tests.helpers import write_trace, x

    ev = [x("ProfilerStep#1", 0, 10, "user_annotation")]
    write_trace(tmp_path / "a.json", ev, rank=None)  # says nothing of its rank, read first
    write_trace(tmp_path / "b.json", ev, rank=0, world=2)
    run = load_run(tmp_path, jobs=1)
    assert run.rank_ids == [0, 1]
    assert run.ranks[0].rank_source == "content" and run.ranks[1].rank_source == "assigned"
    assert not any(p.startswith("duplicate") for p in run.problems)
    assert any("rank unknown" in p and "a.json" in p for p in run.problems)


def test_concurrent_loads_of_one_run_share_a_whole_cache(tmp_path):
    """The web server loads one run from several threads at once (run table and page). Each load must
    read whole tables: cache entries are published by rename, never written in place."""
    import threading

    events = [x("ProfilerStep#1", 0, 10**6, cat="user_annotation")]
    events += [x(f"aten::op{i % 50}", 10 + i * 20, 15) for i in range(40_000)]
    for r in range(2):
        write_trace(tmp_path / "run" / f"rank{r}.json", events, rank=r)
    cache = tmp_path / "cache"
    for attempt in range(3):
        got: list[object] = []
        barrier = threading.Barrier(6)

        def load() -> None:
            barrier.wait()
            try:
                run = load_run(tmp_path / "run", jobs=1, cache_dir=cache / str(attempt))
                got.append(sum(run.table(r, "events").num_rows for r in run.rank_ids))
            except Exception as exc:  # noqa: BLE001 - reported below
                got.append(exc)

        threads = [threading.Thread(target=load) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert got == [2 * len(events)] * 6, got
    assert not [p for p in cache.rglob(".*tmp*")]  # no private copies left behind
