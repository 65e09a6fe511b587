"""Bad input: every damaged or odd trace gives one clear line naming the file, never a traceback,
and the other ranks are still ingested (issue 3, "Bad input")."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from rankscope.cli import main
from rankscope.errors import RankscopeError
from rankscope.model.run import load_run
from tests.helpers import write_trace, x


def _good(d: Path, rank: int, world: int = 2) -> Path:
    evs = [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x("aten::mm", 10, 50),
           x("gloo:all_reduce", 70, 20, cat="user_annotation")]
    return write_trace(d / f"rank{rank}.json", evs, rank=rank, world=world)


def _doc(rank: int = 1, events: list | None = None) -> dict:
    return {"distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2},
            "traceEvents": events if events is not None else
            [x("ProfilerStep#1", 0, 100, cat="user_annotation")] +
            [x(f"aten::op{i}", 1 + i, 1) for i in range(50)]}


def _problems_of(run, rank: int) -> str:  # type: ignore[no-untyped-def]
    return " | ".join(p for p in run.problems if p.startswith(f"rank {rank}:"))


def _bad_rank1(tmp_path: Path, data: bytes, name: str = "rank1.json") -> tuple[Path, Path]:
    _good(tmp_path, 0)
    bad = tmp_path / name
    bad.write_bytes(data)
    return tmp_path, bad


@pytest.mark.parametrize("data,problem", [
    (b"", "empty file"),
    (b"   \n", "empty file"),
    (b"this is not json at all\n", "not valid JSON"),
    (b"\x89PNG\r\n\x1a\n\x00\x00binary", "not valid JSON"),
    (b'{"traceEvents": 3}', "not a Kineto trace"),
])
def test_unreadable_file_is_one_line_and_other_rank_survives(tmp_path, capsys, data, problem):
    d, bad = _bad_rank1(tmp_path, data)
    run = load_run(d, jobs=1, allow_missing_ranks=True)
    assert run.rank_ids == [0] and run.missing == [1]
    lines = [p for p in run.problems if str(bad) in p]
    assert len(lines) == 1 and problem in lines[0] and "\n" not in lines[0]
    # By default the CLI analyzes rank 0 and names the missing rank 1 (with its reason) at the top;
    # --strict stops with one line naming it, no traceback.
    assert main(["analyze", str(d), "-j", "1"]) == 0
    got = capsys.readouterr()
    assert got.out.splitlines()[0].startswith("missing ranks: 1 of 2") and problem in got.out
    assert main(["analyze", str(d), "-j", "1", "--strict"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "missing" in err and "--strict" in err


def test_truncated_gzip_keeps_complete_events_and_marks_partial(tmp_path):
    whole = gzip.compress(json.dumps(_doc()).encode())
    d, bad = _bad_rank1(tmp_path, whole[: len(whole) * 2 // 3], "rank1.json.gz")
    run = load_run(d, jobs=1)
    info = run.ranks[1]
    assert info.partial and 0 < info.counts["events"] < 51
    assert "gzip stream damaged" in _problems_of(run, 1) and str(bad) in _problems_of(run, 1)


def test_truncated_json_keeps_complete_events_and_marks_partial(tmp_path):
    text = json.dumps(_doc(), indent=1).encode()
    d, bad = _bad_rank1(tmp_path, text[: int(len(text) * 0.6)])
    run = load_run(d, jobs=1)
    info = run.ranks[1]
    assert info.partial and 0 < info.counts["events"] < 51
    assert "truncated JSON" in _problems_of(run, 1)
    names = run.table(1, "events").column("name").to_pylist()
    assert names[0] == "ProfilerStep#1"  # events before the damage are all there, in order


def test_metadata_without_events_is_reported(tmp_path):
    d, bad = _bad_rank1(tmp_path, json.dumps(_doc(events=[])).encode())
    run = load_run(d, jobs=1)
    # Nothing usable is left: the rank is dropped, named missing, and the reason is kept and said.
    assert 1 not in run.ranks and run.missing == [1]
    assert "no trace events" in run.absent[1] and any("no trace events" in p for p in run.problems)


def test_events_missing_fields_and_bad_durations(tmp_path):
    evs = [x("ProfilerStep#1", 0, 100, cat="user_annotation"), x("good", 1, 5),
           {"ph": "X", "name": "no_ts", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 3},
           {"ph": "X", "name": "no_dur", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 7},
           {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 8, "dur": 1},
           x("negative", 9, -4), x("nan_str", 10, "nan"),
           x("odd_cat", 11, 2, cat="SomethingNew"),
           {"ph": "B", "name": "begin", "pid": 1, "tid": 1, "ts": 12},
           {"ph": "E", "name": "begin", "pid": 1, "tid": 1, "ts": 13}]
    text = json.dumps(_doc(events=evs)).replace('"dur": "nan"', '"dur": NaN')
    d, bad = _bad_rank1(tmp_path, text.encode())
    run = load_run(d, jobs=1)
    p = _problems_of(run, 1)
    assert "1 events without a valid 'ts' were dropped" in p
    assert "3 events with missing, negative or NaN 'dur'" in p
    assert "1 events without a name" in p
    assert "unknown event categories kept as 'other': somethingnew" in p
    assert "2 begin/end ('B'/'E') events are not supported and were left out" in p  # never a silent drop
    ev = run.table(1, "events").to_pydict()
    assert len(ev["name"]) == 7 and min(ev["dur"]) == 0
    assert ev["kind"][ev["name"].index("odd_cat")] == "other"


def test_two_files_claiming_one_rank(tmp_path, capsys):
    _good(tmp_path, 0)
    _good(tmp_path / "a", 1)
    _good(tmp_path / "b", 1)
    with pytest.raises(RankscopeError, match="duplicate rank 1"):
        load_run(tmp_path, jobs=1, strict=True)
    run = load_run(tmp_path, jobs=1)
    assert run.rank_ids == [0, 1]
    assert any("duplicate rank 1" in p and "a/rank1.json" in p and "b/rank1.json" in p for p in run.problems)
    assert main(["analyze", str(tmp_path), "-j", "1", "--strict"]) == 1
    assert "Traceback" not in capsys.readouterr().err


def _run_dir(root: Path, run_ids: list[str], expected: list[int]) -> Path:
    root.mkdir()
    (root / "run.json").write_text(json.dumps({"format": "rankscope.run/1", "run_id": "A",
                                               "world_size": len(expected), "ranks_expected": expected}))
    for r, rid in enumerate(run_ids):
        d = root / "ranks" / str(r)
        _good(d, r, world=len(expected))
        (d / "meta.json").write_text(json.dumps({"format": "rankscope.meta/1", "run_id": rid, "rank": r}))
    return root


def test_rank_of_another_run_is_left_out(tmp_path):
    root = _run_dir(tmp_path / "run", ["A", "B", "A"], [0, 1, 2])
    with pytest.raises(RankscopeError, match="missing"):
        load_run(root, jobs=1, strict=True)
    run = load_run(root, jobs=1)
    assert run.rank_ids == [0, 2] and run.missing == [1]
    assert any("belongs to run 'B', not 'A'" in p for p in run.problems)


def test_run_json_that_no_rank_agrees_with_is_the_odd_one_out(tmp_path):
    """run.json says run 'A' but every rank says 'B' (run.json copied from another run): the ranks are
    kept and run.json's id is ignored with one line (hypothesis found the old behaviour: no rank read)."""
    root = _run_dir(tmp_path / "run", ["B", "B", "B"], [0, 1, 2])
    run = load_run(root, jobs=1)
    assert run.rank_ids == [0, 1, 2] and run.missing == []
    assert any("run.json names run 'A' but the ranks say 'B'" in p for p in run.problems)


def test_missing_ranks_with_and_without_flag(tmp_path, capsys):
    root = _run_dir(tmp_path / "run", ["A", "A"], [0, 1, 2, 3])
    with pytest.raises(RankscopeError, match=r"ranks 2-3 of 4 are missing.*--strict"):
        load_run(root, jobs=1, strict=True)
    run = load_run(root, jobs=1)
    assert run.missing == [2, 3]
    for flags in ([], ["--allow-missing-ranks"]):  # the old flag is still accepted (a no-op now)
        assert main(["analyze", str(root), "-j", "1", *flags]) == 0
        assert capsys.readouterr().out.startswith("missing ranks: 2-3 of 4")  # ranges, said first


def test_huge_single_array_is_refused_clearly_not_loaded(tmp_path, monkeypatch):
    """Stand-in for "a 2 GB file of one huge array": a bare JSON array (Chrome's array form) larger
    than the memory budget, set small through RANKSCOPE_MAX_JSON_BYTES. The reader refuses it before
    decoding, with one line that says the size and what to do, and the other rank is still read."""
    evs = [x(f"op{i}", i, 1) for i in range(20000)]
    d, bad = _bad_rank1(tmp_path, gzip.compress(json.dumps(evs).encode()), "rank1.json.gz")
    monkeypatch.setenv("RANKSCOPE_MAX_JSON_BYTES", "100000")
    run = load_run(d, jobs=1, allow_missing_ranks=True)
    assert run.rank_ids == [0]
    line = next(p for p in run.problems if str(bad) in p)
    assert "too large" in line and "RANKSCOPE_MAX_JSON_BYTES" in line


def test_bare_array_trace_is_read(tmp_path):
    """Chrome's JSON array format (no traceEvents wrapper) is valid input; its rank comes from the name."""
    evs = [x("ProfilerStep#3", 0, 100, cat="user_annotation"), x("aten::mm", 1, 5)]
    (tmp_path / "rank-5.json").write_text(json.dumps(evs))
    run = load_run(tmp_path / "rank-5.json", jobs=1)
    assert run.rank_ids == [5] and run.ranks[5].rank_source == "file name"
    assert run.ranks[5].counts["events"] == 2
