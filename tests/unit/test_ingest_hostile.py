"""The hostile-input corpus (tests/hostile.py), analyzed with the process pool (-j 2), with --jobs 1 and
with every file forced through the streaming reader. Each mode analyzes the whole corpus and a control
run (the same run without damage) in one batch process; then, per case:

(a) the problem records (kind, file, rank) are exactly the expected ones, each said on one line of
    stderr of its own (escaped), and no problem line lacks its record;
(b) the straggler verdict equals the control run's, from structured fields (finding kind, ranks,
    evidence cause): rank 2 named, cause compute; never a rank that is missing or damaged;
(c) each record's count of what was repaired or dropped is the expected one;
and rank 1 is dropped (missing, with the reason said), damaged (analyzed, out of the verdict) or kept.

When the suite runs as root, the batch runs as uid 65534 (setpriv), so that the unreadable-file cases
are unreadable; if that is impossible the tests fail and say why (they are never skipped).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from rankscope.cli import main
from rankscope.errors import safe
from tests.hostile import CASES, CONTROL, Case, build, healthy_run, restore_modes, run_batch, write_manifest

MODES = {"serial": ("1", {}), "pool": ("2", {}), "stream": ("1", {"RANKSCOPE_STREAM_BYTES": "0"})}
VERDICT = [("straggler", [2], "compute")]  # what the control run must say (rank 2's aten::mm is 1.6x)


@pytest.fixture(scope="module", params=list(MODES))
def batch(request: pytest.FixtureRequest) -> Any:
    """(mode, run directories by case, results by case) of one mode; the corpus is built per mode, as
    each analysis caches its tables inside the run (a second mode would only read the cache)."""
    jobs, env = MODES[request.param]
    base = Path(tempfile.mkdtemp(prefix=f"rs-hostile-{request.param}-"))
    os.chmod(base, 0o755)  # the other user must reach it
    try:
        roots = build(base, CASES)
        yield request.param, roots, run_batch(base, [CONTROL] + [c.name for c in CASES], jobs, env)
    finally:
        restore_modes(base)
        shutil.rmtree(base, ignore_errors=True)


def _doc(got: dict[str, Any]) -> dict[str, Any]:
    assert got["rc"] == 0 and "Traceback" not in got["err"] and "rankscope: error" not in got["err"], got["err"][-3000:]
    return json.loads(got["out"])


def verdict(doc: dict[str, Any]) -> list[tuple[str, list[int], str | None]]:
    """The straggler verdict as structured fields: (finding kind, ranks, cause) per finding."""
    st = doc["analyses"]["straggler"]
    assert st["skipped"] is None, st["skipped"]
    return sorted((f["kind"], f["ranks"], f["evidence"].get("cause")) for f in st["findings"])


def _rel(path: str, root: Path) -> str:
    return os.path.relpath(path, root) if os.path.isabs(path) else path


def test_control_run_names_rank_2_and_says_nothing(batch):
    mode, roots, res = batch
    doc = _doc(res[CONTROL])
    assert verdict(doc) == VERDICT, mode
    assert doc["run"]["problems"] == [] and doc["run"]["issues"] == [] and res[CONTROL]["err"].strip() == ""
    assert [r["rank"] for r in doc["run"]["ranks"]] == [0, 1, 2]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(batch, case: Case):
    mode, roots, res = batch
    root, got = roots[case.name], res[case.name]
    doc = _doc(got)
    recs = doc["run"]["issues"]
    # (a) + (c): exactly the expected records (kind, file, rank, count); each one line of its own
    seen = sorted((r["kind"], _rel(r["file"], root), r["rank"], r["count"]) for r in recs)
    assert seen == sorted((e.kind.value, e.file, e.rank, e.count) for e in case.expect), (mode, got["err"])
    assert len(doc["run"]["problems"]) == len(recs), "a problem line without its record"
    lines = got["err"].splitlines()
    for r in recs:
        assert lines.count(f"warning: {safe(r['line'])}") == 1, (r["line"], got["err"])
    assert "\x1b[2J" not in got["err"] and "FAKE LINE.json: empty file" not in lines  # escapes escaped
    # rank 1 as the case says; the healthy ranks always analyzed and whole
    cov, ranks = doc["coverage"], [r["rank"] for r in doc["run"]["ranks"]]
    damaged = {d["rank"] for d in cov["damaged"]}
    missing = {m["rank"]: m["why"] for m in cov["missing"]}
    assert {0, 2} <= set(ranks) and not {0, 2} & (damaged | set(missing))
    if case.rank1 == "dropped":
        assert 1 not in ranks and list(missing) == [1]
        assert any(r["rank"] == 1 and r["line"].endswith(missing[1]) for r in recs), (missing, recs)
    elif case.rank1 == "damaged":
        assert 1 in ranks and damaged == {1} and not missing
    elif case.rank1 == "kept":
        assert 1 in ranks and not damaged and not missing
    # (b): the verdict on the healthy ranks is the control run's: rank 2, compute (never a broken rank)
    assert verdict(doc) == verdict(_doc(res[CONTROL])) == VERDICT
    if case.rank1 == "damaged":
        assert doc["analyses"]["straggler"]["summary"]["excluded_ranks"] == [1]


def test_corpus_is_large_enough_and_every_case_expects_a_line():
    assert len(CASES) >= 100 and len({c.name for c in CASES}) == len(CASES)
    assert all(c.expect for c in CASES), [c.name for c in CASES if not c.expect]
    assert {c.rank1 for c in CASES} == {"dropped", "damaged", "kept", "any"}
    assert sum(c.non_root for c in CASES) >= 3


def _build_one(tmp_path: Path, case: Case) -> Path:
    root = healthy_run(tmp_path / "run")
    case.make(root)
    if case.remanifest:
        write_manifest(root / "ranks" / "1", 1)
    return root


@pytest.mark.parametrize("name", ["truncated_gzip", "manifest_sha_mismatch", "empty"])
def test_strict_exits_1_with_the_reason(tmp_path, capsys, name):
    case = next(c for c in CASES if c.name == name)
    root = _build_one(tmp_path, case)
    assert main(["analyze", str(root), "-j", "1", "--strict"]) == 1
    err = capsys.readouterr().err
    assert "--strict" in err and "Traceback" not in err and len(err.strip().splitlines()) >= 1
    assert "rankscope: error:" in err and ("damaged" in err or "missing" in err)
