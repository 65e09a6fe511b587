"""The hostile-input corpus (tests/hostile.py): every case gives its one line, the other ranks are
analyzed, and no verdict comes from broken data, with the process pool, with --jobs 1, and with every
file forced through the streaming reader (issue 11)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rankscope.cli import main
from tests.hostile import CASES, Case, healthy_run, write_manifest

ROOT = os.geteuid() == 0  # root reads files whatever their mode: the permission cases then check that


def _build(tmp_path: Path, case: Case) -> Path:
    root = healthy_run(tmp_path / "run")
    case.make(root)
    if case.remanifest and "unreadable" not in case.name:
        write_manifest(root / "ranks" / "1", 1)
    return root


def _expect(case: Case) -> tuple[str, str]:
    if case.name in ("dir_unreadable", "file_unreadable") and ROOT:
        return "kept", ""  # honest: as root the "unreadable" rank is readable and must be read normally
    return case.rank1, case.line


def _analyze(root: Path, jobs: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    rc = main(["analyze", str(root), "-j", jobs, "--json"])
    got = capsys.readouterr()
    return rc, (json.loads(got.out) if rc == 0 else {}), got.err


@pytest.mark.parametrize("jobs", ["1", "2", "stream"], ids=["serial", "pool", "stream"])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_input(tmp_path, capsys, monkeypatch, case, jobs):
    if jobs == "stream":  # every file through the streaming reader (model/stream.py), serially
        monkeypatch.setenv("RANKSCOPE_STREAM_BYTES", "0")
        jobs = "1"
    root = _build(tmp_path, case)
    try:
        rc, doc, err = _analyze(root, jobs, capsys)
    finally:
        os.chmod(root / "ranks" / "1", 0o755)
        if (root / "ranks" / "1" / "rank1.pt.trace.json.gz").exists():
            os.chmod(root / "ranks" / "1" / "rank1.pt.trace.json.gz", 0o644)
    rank1, line = _expect(case)
    assert rc == 0 and "Traceback" not in err, err
    if line:  # the problem is said, on one line of its own (never wrapped, escapes escaped)
        lines = err.splitlines()
        assert any(line in ln for ln in lines), f"{line!r} not in:\n{err}"
        assert "\x1b[2J" not in err and "FAKE LINE" not in [ln.strip() for ln in lines]
    cov, ranks = doc["coverage"], [r["rank"] for r in doc["run"]["ranks"]]
    assert {0, 2} <= set(ranks), "the healthy ranks are always analyzed"
    damaged = {d["rank"] for d in cov["damaged"]}
    missing = {m["rank"]: m["why"] for m in cov["missing"]}
    if rank1 == "dropped":
        assert 1 not in ranks and 1 in missing and missing[1]
    elif rank1 == "damaged":
        assert 1 in ranks and 1 in damaged
    elif rank1 == "kept":
        assert 1 in ranks and 1 not in damaged and not missing
    st = doc["analyses"]["straggler"]
    named = {r for f in st["findings"] for r in f["ranks"]}
    assert not named & (damaged | set(missing)), "no verdict from broken data"
    if rank1 in ("dropped", "damaged"):
        assert "left out of the verdict" in st["summary"].get("verdict", "") or rank1 == "dropped" or st["skipped"]


def test_corpus_is_large_enough():
    assert len(CASES) >= 60 and len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", ["truncated_gzip", "manifest_sha_mismatch", "empty"])
def test_strict_exits_1_with_the_reason(tmp_path, capsys, name):
    case = next(c for c in CASES if c.name == name)
    root = _build(tmp_path, case)
    assert main(["analyze", str(root), "-j", "1", "--strict"]) == 1
    err = capsys.readouterr().err
    assert "--strict" in err and "Traceback" not in err and len(err.strip().splitlines()) >= 1
    assert "rankscope: error:" in err and ("damaged" in err or "missing" in err)
