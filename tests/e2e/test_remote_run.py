"""Analyzing a run where it is: on a real S3 server (moto's standalone server on 127.0.0.1).

The same synthetic run is stored on local disk and in a bucket; `analyze`, `report` and
`timeline` of the bucket must give what they give for the local copy, and a second analysis of
the unchanged bucket must read no trace (only listings, sizes and ETags, and the local cache).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from rankscope.analysis.registry import run_all
from rankscope.cli import main
from rankscope.model.run import load_run
from rankscope.store import source
from rankscope.synth import generate
from tests.fixtures_s3 import moto_server, s3_env  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.fixture()
def stored(tmp_path: Path, s3_env: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    import s3fs

    monkeypatch.setenv("RANKSCOPE_CACHE", str(tmp_path / "cache"))
    source._FS.clear()  # filesystems of an earlier test's endpoint
    local = generate(tmp_path / "local", ranks=4, steps=3, ops_per_step=40, seed=5,
                     stragglers=["2:compute:1.5"], clock_skew_s=0.1)
    bucket = s3_env.bucket()
    fs = s3fs.S3FileSystem(endpoint_url=s3_env.endpoint, key="test", secret="test")
    fs.put(str(local), f"{bucket}/runs/exp1", recursive=True)
    assert fs.exists(f"{bucket}/runs/exp1/ranks/0/meta.json")
    return local, f"s3://{bucket}/runs/exp1"


def _frames(results: dict[str, Any]) -> dict[str, Any]:
    import polars as pl

    return {f"{n}.{t}": (v if isinstance(v, pl.DataFrame) else pl.from_arrow(v))
            for n, r in results.items() for t, v in r.tables.items()}


def test_remote_run_same_tables_and_second_read_only_cache(stored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    from polars.testing import assert_frame_equal

    local, url = stored
    opened: list[str] = []
    real = source.open_binary

    def counting(path: str) -> Any:  # a spy: counts, then calls the real reader
        opened.append(path)
        return real(path)

    monkeypatch.setattr(source, "open_binary", counting)
    remote = load_run(url, jobs=1)
    assert remote.rank_ids == [0, 1, 2, 3] and remote.path == url
    assert any(p.endswith(".pt.trace.json.gz") for p in opened)  # streamed from the bucket
    res_r, res_l = run_all(remote), run_all(load_run(local, jobs=1))
    fr, fl = _frames(res_r), _frames(res_l)
    assert fr.keys() == fl.keys()
    for k in fr:
        assert_frame_equal(fr[k], fl[k], check_row_order=False, rel_tol=1e-12, abs_tol=0.0)
    assert res_r["straggler"].summary["verdict"] == res_l["straggler"].summary["verdict"]
    opened.clear()
    again = load_run(url, jobs=1)
    traces = [p for p in opened if ".pt.trace.json" in p]
    assert traces == [], f"second analysis re-read {traces}"
    assert {r: i.cache for r, i in again.ranks.items()} == {r: i.cache for r, i in remote.ranks.items()}
    # The bucket was writable: the cache went next to the run, so another machine (an empty local
    # cache) reads only the cache too.
    assert all(i.cache.startswith(url + "/analysis/cache/") for i in again.ranks.values())
    # another machine: an empty local cache (a fresh folder; not a path made from the s3:// URL, which
    # pathlib folds into a relative "s3:/..." folder in the working directory)
    monkeypatch.setenv("RANKSCOPE_CACHE", str(tmp_path / "another-machine-cache"))
    opened.clear()
    elsewhere = load_run(url, jobs=1)
    assert [p for p in opened if ".pt.trace.json" in p] == [] and elsewhere.rank_ids == [0, 1, 2, 3]
    assert run_all(elsewhere)["straggler"].summary["verdict"] == res_l["straggler"].summary["verdict"]


def test_read_only_storage_keeps_the_cache_here(stored: tuple[Path, str], monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """RANKSCOPE_REMOTE_CACHE=0 (what a read-only bucket falls back to): the cache is on this machine."""
    _, url = stored
    monkeypatch.setenv("RANKSCOPE_REMOTE_CACHE", "0")
    run = load_run(url, jobs=1)
    assert all(Path(i.cache).is_relative_to(tmp_path / "cache") for i in run.ranks.values())


def test_cli_verbs_on_s3_url(stored: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    local, url = stored
    assert main(["analyze", url, "--json", "--jobs", "2"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert main(["analyze", str(local), "--json", "--jobs", "1"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert got["analyses"]["straggler"]["summary"]["verdict"] == want["analyses"]["straggler"]["summary"]["verdict"]
    assert got["run"]["path"] == url
    out = tmp_path / "r.html"
    assert main(["report", url, "-o", str(out), "--jobs", "1"]) == 0
    assert out.stat().st_size > 10_000
    tl = tmp_path / "t.json"
    assert main(["timeline", url, "-o", str(tl), "--jobs", "1"]) == 0
    tl_local = tmp_path / "t_local.json"
    assert main(["timeline", str(local), "-o", str(tl_local), "--jobs", "1"]) == 0
    a, b = json.loads(tl.read_text()), json.loads(tl_local.read_text())
    assert len(a["traceEvents"]) == len(b["traceEvents"]) > 100


def test_missing_prefix_is_one_line(stored: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, url = stored
    assert main(["analyze", url + "-nope"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such run" in err[0] and "-nope" in err[0]


def test_serve_runs_under_an_s3_prefix(stored: tuple[Path, str]) -> None:
    """`rankscope serve s3://bucket/runs`: the run list, a run's page and its timeline, read through
    the bucket's listings and ranged reads; nothing is written into the bucket."""
    import s3fs

    from tests.e2e.test_web_serve import Served

    _, url = stored
    prefix = url.rsplit("/", 1)[0]
    fs = s3fs.S3FileSystem()
    before = sorted(fs.find(prefix.removeprefix("s3://")))
    with Served(prefix) as srv:  # type: ignore[arg-type]
        status, body = srv.get("/api/runs")
        assert status == 200, body
        assert json.loads(body)["runs"] == ["exp1"]
        status, body = srv.get("/runs/exp1")
        assert status == 200, body[-600:]
        assert 'class="verdict' in body and "rank 2" in body
        status, headers, tl = srv.fetch("/runs/exp1/timeline?format=json")
        assert status == 200 and len(json.loads(tl)["traceEvents"]) > 100
        assert srv.get("/runs/nope")[0] == 404
    fs.invalidate_cache()
    assert sorted(fs.find(prefix.removeprefix("s3://"))) == before


def test_hang_reads_flight_recorder_dumps_from_s3(s3_env: Any, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The dumps of a real 3-rank gloo job (tests/e2e/test_hang.py), put in a bucket: the same verdict
    from the bucket as from the local copy."""
    import s3fs

    from tests.e2e.test_hang import _job

    source._FS.clear()
    local = _job(tmp_path, "skip")
    bucket = s3_env.bucket()
    fs = s3fs.S3FileSystem(endpoint_url=s3_env.endpoint, key="test", secret="test")
    fs.put(str(local), f"{bucket}/job7/fr", recursive=True)
    assert main(["hang", str(local), "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    assert main(["hang", f"s3://{bucket}/job7/fr", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["problems"] == want["problems"] and got["problems"][0]["seq"] == 4
    assert got["headline"] == want["headline"]
