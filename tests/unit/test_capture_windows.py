"""capture analysis on hand-made run directories (meta.json windows, MANIFEST dropped, ProfilerStep#)."""
from __future__ import annotations

import json
from pathlib import Path

from rankscope.analysis.steps.capture import ranges, run_capture
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import write_trace, x


def _steps_trace(path: Path, rank: int, steps: list[int], world: int) -> None:
    evs = []
    for s in steps:
        t = 1000.0 * s
        evs += [x(f"ProfilerStep#{s}", t, 900, cat="user_annotation"), x("aten::mm", t + 10, 500)]
    write_trace(path, evs, rank=rank, world=world, gz=True)


def make_run(root: Path, per_rank: dict[int, list[list[int]]], *, idle: dict[int, dict] | None = None,
             dropped: dict[int, list[int]] | None = None, meta: bool = True, expected: list[int] | None = None) -> Path:
    """Run dir: windows per rank (list of step lists); ``dropped`` = window indices gone from the spool."""
    world = len(expected) if expected is not None else len(per_rank)
    if meta:
        (root / "run.json").parent.mkdir(parents=True, exist_ok=True)
        (root / "run.json").write_text(json.dumps({"format": "rankscope.run/1", "run_id": "cap", "world_size": world,
                                                   "ranks_expected": expected or sorted(per_rank)}))
    for r, wins in per_rank.items():
        d = root / "ranks" / str(r) if meta else root
        d.mkdir(parents=True, exist_ok=True)
        gone = set((dropped or {}).get(r, []))
        windows = []
        for i, steps in enumerate(wins):
            name = f"window-{i:04d}.pt.trace.json.gz"
            windows.append({"index": i, "steps": steps, "file": name})
            if i not in gone:
                _steps_trace(d / (name if meta else f"rank{r}.{i}.pt.trace.json.gz"), r, steps, world)
        if meta:
            doc = {"format": "rankscope.meta/1", "run_id": "cap", "rank": r, "world_size": world, "windows": windows}
            if idle and r in idle:
                doc["idle"] = idle[r]
            (d / "meta.json").write_text(json.dumps(doc))
            (d / "MANIFEST.json").write_text(json.dumps({"format": "rankscope.manifest/1", "rank": r, "files": [],
                                                         "dropped": [f"window-{i:04d}.pt.trace.json.gz"
                                                                     for i in sorted(gone)]}))
    return root


def _kinds(res) -> dict[str, object]:
    return {f.kind: f for f in res.findings}


def test_ranges():
    assert ranges([7, 1, 2, 3]) == "1-3,7" and ranges([]) == "" and ranges([5]) == "5"


def test_aligned_run_has_no_warning(tmp_path):
    run = load_run(make_run(tmp_path / "r", {0: [[2, 3], [6, 7]], 1: [[2, 3], [6, 7]]}), jobs=1)
    res = run_capture(run, {})
    assert res.findings == [] and res.summary == {"aligned": True, "ranks": 2, "reference_steps": "2-3,6-7"}
    t = res.tables["capture"].to_pydict()
    assert t["steps"] == ["2-3,6-7"] * 2 and t["trace_steps"] == ["2-3,6-7"] * 2 and t["source"] == ["meta"] * 2


def test_mismatch_names_rank_and_steps(tmp_path):
    run = load_run(make_run(tmp_path / "r", {0: [[2, 3]], 1: [[2, 3]], 2: [[3, 4]]}), jobs=1)
    res = run_all(run, ["capture"])["capture"]
    (f,) = res.findings
    assert f.kind == "capture_mismatch" and f.severity.value == "warning" and f.ranks == (2,)
    assert f.evidence["reference_steps"] == [2, 3] and f.evidence["common_steps"] == [3]
    assert f.evidence["per_rank"]["2"] == {"missing": [2], "extra": [4], "captured": [3, 4]}
    assert "rank 2 lacks step 2 and has extra step 4" in f.title
    assert res.summary["aligned"] is False
    assert res.tables["capture"].to_pydict()["missing"] == ["", "", "2"]


def test_idle_rank_and_dropped_window(tmp_path):
    root = make_run(tmp_path / "r", {0: [[2, 3], [6, 7]], 1: [[2, 3], [6]]},
                    idle={1: {"since_step": 6, "idle_s": 31.0}}, dropped={0: [0]})
    run = load_run(root, jobs=1)
    k = _kinds(run_capture(run, {}))
    assert k["idle_rank"].ranks == (1,) and "after step 6" in k["idle_rank"].title
    assert k["dropped_windows"].ranks == (0,)
    assert k["dropped_windows"].evidence["per_rank"]["0"] == {"files": ["window-0000.pt.trace.json.gz"],
                                                             "steps": [2, 3]}
    # rank 0 lost 2-3 (dropped), rank 1 lost 7 (idle): no majority, the larger set is the reference
    mm = k["capture_mismatch"]
    assert mm.evidence["common_steps"] == [6] and mm.evidence["reference_steps"] == [2, 3, 6]
    assert mm.ranks == (0,) and mm.evidence["per_rank"]["0"]["missing"] == [2, 3]


def test_rank_with_meta_but_no_trace_is_a_mismatch(tmp_path):
    root = make_run(tmp_path / "r", {0: [[2, 3]], 1: [[2, 3]]}, dropped={1: [0]})
    run = load_run(root, jobs=1, allow_missing_ranks=True)
    assert run.missing == [1]
    k = _kinds(run_capture(run, {}))
    assert k["capture_mismatch"].ranks == (1,) and k["capture_mismatch"].evidence["per_rank"]["1"]["missing"] == [2, 3]
    assert k["dropped_windows"].ranks == (1,)


def test_plain_traces_use_profiler_steps(tmp_path):
    root = make_run(tmp_path / "plain", {0: [[5, 6, 7]], 1: [[5, 6]]}, meta=False)
    res = run_capture(load_run(root, jobs=1), {})
    (f,) = res.findings
    assert f.kind == "capture_mismatch" and f.ranks == (1,) and f.evidence["per_rank"]["1"]["missing"] == [7]
    assert res.tables["capture"].to_pydict()["source"] == ["trace", "trace"]


def test_ranks_left_out_by_profile_are_not_flagged(tmp_path):
    root = make_run(tmp_path / "r", {0: [[2, 3]]}, expected=[0])
    (root / "ranks" / "1").mkdir()
    (root / "ranks/1/meta.json").write_text(json.dumps({"rank": 1, "windows": []}))
    res = run_capture(load_run(root, jobs=1), {})
    assert res.findings == [] and res.summary["ranks"] == 1


def test_registered():
    from rankscope.analysis import registry

    assert "capture" in registry.analyses()


def test_window_with_export_error_counts_as_lost():
    from rankscope.analysis.steps.capture import rank_capture

    meta = {"windows": [{"index": 0, "steps": [2, 3], "file": "window-0000.pt.trace.json.gz"},
                        {"index": 1, "steps": [6, 7], "file": "window-0001.pt.trace.json.gz",
                         "error": "export not finished within 30 s at close"}]}
    c = rank_capture(0, meta, [], [2, 3])
    assert c["steps"] == [2, 3] and c["dropped"] == ["window-0001.pt.trace.json.gz"] and c["dropped_steps"] == [6, 7]


def test_a_rank_late_to_a_trigger_is_said_to_be(tmp_path):
    """A rank whose trigger thread saw the plan late records its tail and lists the steps it missed in its
    meta.json (collect/profiler._adopt); the mismatch names that cause, and only for that rank."""
    root = make_run(tmp_path / "r", {0: [[5, 6, 7]], 1: [[6, 7]], 2: [[6, 7]]})
    meta = json.loads((root / "ranks/1/meta.json").read_text())
    meta["triggers"] = [{"id": "t1", "start_step": 4, "missed_steps": [5], "late": "its trigger thread was late"}]
    (root / "ranks/1/meta.json").write_text(json.dumps(meta))
    (f,) = run_all(load_run(root, jobs=1), ["capture"])["capture"].findings
    assert f.kind == "capture_mismatch"
    # ranks 1 and 2 agree, so rank 0 is the odd one out by count; rank 1's and 2's steps are the reference
    assert "late" not in f.title
    meta["windows"][0]["steps"] = [6, 7]
    root2 = make_run(tmp_path / "r2", {0: [[5, 6, 7]], 1: [[6, 7]], 2: [[5, 6, 7]]})
    (root2 / "ranks/1/meta.json").write_text(json.dumps(meta))
    (f,) = run_all(load_run(root2, jobs=1), ["capture"])["capture"].findings
    assert f.ranks == (1,) and "rank 1 lacks step 5 (its trigger thread saw the capture late)" in f.title
    assert f.evidence["per_rank"]["1"]["late_trigger_steps"] == [5]
