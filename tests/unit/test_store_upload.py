"""Spool + uploader against a local directory and a real S3 server (moto on 127.0.0.1)."""
from __future__ import annotations

import gzip
import json
import os
import time
import warnings

import pytest

from rankscope.errors import RankscopeError
from rankscope.store import layout as L
from rankscope.store.fs import open_target, probe
from rankscope.store.spool import RankscopeWarning, Spool
from rankscope.store.uploader import UploadConfig, Uploader, resume, verify_rank
from tests.fixtures_s3 import FaultProxy, MotoServer, free_port, moto_server, s3_env  # noqa: F401

FAST = UploadConfig(jitter_s=0.05, backoff_base_s=0.05, backoff_max_s=0.2, exit_timeout_s=5)
HANG_S = 120  # waits that return as soon as the work is done: a bound only a hang reaches, not a speed limit


def _stage(sp: Spool, index: int, nbytes: int = 2000) -> str:
    rel = L.trace_rel(sp.rank, L.window_name(index))
    path = sp.staging_path(rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"traceEvents": [{"name": "x" * 10, "i": i} for i in range(nbytes // 30)]}, f)
    sp.add_staged(rel)
    return rel


def test_local_publish_manifest_last(tmp_path):
    sp = Spool.create(str(tmp_path / "spool"), str(tmp_path / "run"), 3, "r")
    rels = [_stage(sp, i) for i in range(3)]
    sp.add_bytes(L.meta_rel(3), b'{"rank": 3}')
    target = open_target(str(tmp_path / "run"))
    up = Uploader(sp, target, FAST).start()
    assert up.flush(HANG_S)
    assert up.close(1) == 0
    man = json.loads((tmp_path / "run" / L.manifest_rel(3)).read_text())
    assert [f["path"] for f in man["files"]] == ["meta.json"] + [r.split("/")[-1] for r in rels]
    assert verify_rank(target, 3) == (4, [])
    # the manifest was published after every file it lists
    mtime = os.path.getmtime(tmp_path / "run" / L.manifest_rel(3))
    assert all(os.path.getmtime(tmp_path / "run" / r) <= mtime for r in rels)
    assert json.load(gzip.open(tmp_path / "run" / rels[0]))["traceEvents"][0]["i"] == 0
    assert not any(n.startswith(L.TMP_MARK) for n in os.listdir(tmp_path / "run" / "ranks" / "3"))
    assert sp.waiting() == [] and not os.path.exists(sp.data_path(rels[0]))


def test_file_rewritten_during_its_upload_is_not_a_failure(tmp_path):
    """meta.json is rewritten by the training side while the uploader copies the previous version (seen
    in CI as 'cannot upload ... uploaded size 913 != 817'): no warning, no backoff, the newest version lands."""
    sp = Spool.create(str(tmp_path / "spool"), str(tmp_path / "run"), 0, "r")
    sp.add_bytes(L.meta_rel(0), b'{"rank": 0}')
    target = open_target(str(tmp_path / "run"))
    put, calls = target.fs.put_file, []

    def put_file(lpath, rpath, *a, **kw):  # the rewrite lands between the entry snapshot and the size check
        calls.append(rpath)
        put(lpath, rpath, *a, **kw)
        if len(calls) == 1:
            sp.add_bytes(L.meta_rel(0), b'{"rank": 0, "windows": [1, 2, 3]}')
            put(sp.data_path(L.meta_rel(0)), rpath, *a, **kw)

    target.fs.put_file = put_file
    msgs: list[str] = []
    up = Uploader(sp, target, FAST, on_warning=msgs.append).start()
    assert up.flush(HANG_S)
    assert up.close(1) == 0
    assert msgs == [] and up.last_error in (None, "")
    assert json.loads((tmp_path / "run" / L.meta_rel(0)).read_text())["windows"] == [1, 2, 3]
    assert len(calls) >= 2 and sp.waiting() == []


def test_spool_cap_drops_oldest_with_warning(tmp_path):
    sp = Spool.create(str(tmp_path / "spool"), str(tmp_path / "run"), 0, "r", max_bytes=5000)
    with pytest.warns(RankscopeWarning, match="dropped 1 oldest"):
        for i in range(3):
            _stage(sp, i, 2000)
    states = {e.rel.split("/")[-1]: e.state for e in sp.entries.values()}
    assert states["window-0000.pt.trace.json.gz"] == "dropped"
    assert states["window-0002.pt.trace.json.gz"] == "staged"
    assert sp.waiting_bytes() <= 5000
    assert json.loads(sp.manifest())["dropped"] == ["window-0000.pt.trace.json.gz"]


def test_invalid_url_and_missing_bucket(tmp_path, s3_env):
    with pytest.raises(RankscopeError, match="not installed|not valid"):
        open_target("nosuchproto://x/y")
    with pytest.raises(RankscopeError, match="names no bucket"):
        open_target("s3://")
    with pytest.raises(RankscopeError, match="does not exist"):
        probe(open_target("s3://no-such-bucket-rs/run"), 0)


def test_missing_credentials_is_a_clear_error(monkeypatch, moto_server):
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/rs")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/rs")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    t = open_target("s3://anything/run", {"endpoint_url": moto_server.endpoint})
    with pytest.raises(RankscopeError, match="no valid credentials"):
        probe(t, 0)


def test_s3_unreachable_then_resume(tmp_path, s3_env, monkeypatch):
    bucket = s3_env.bucket()
    url = f"s3://{bucket}/run1"
    dead = {"endpoint_url": f"http://127.0.0.1:{free_port()}"}
    assert probe(open_target(url, dead), 0, timeout_s=5) is not None  # unreachable: a reason, no raise
    sp = Spool.create(str(tmp_path / "spool"), url, 1, "run1")
    _stage(sp, 0)
    sp.add_bytes(L.meta_rel(1), b"{}")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        up = Uploader(sp, open_target(url, dead), FAST).start()
        left = up.close(1.5)
    assert left == 2
    assert len([w for w in got if issubclass(w.category, RankscopeWarning)]) == 1
    assert "upload --resume" in str(got[0].message)
    res = resume(str(tmp_path / "spool"), timeout_s=HANG_S)
    assert (res.left, res.bad, res.verified) == (0, [], 2)
    import s3fs

    fs = s3fs.S3FileSystem()
    assert fs.exists(f"{bucket}/run1/ranks/1/MANIFEST.json")


def test_s3_cut_mid_upload_never_visible_then_retried(tmp_path, s3_env):
    bucket = s3_env.bucket()
    proxy = FaultProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    try:
        proxy.cut_after = 300_000  # every request dies after 300 kB of body
        url = f"s3://{bucket}/run2"
        sp = Spool.create(str(tmp_path / "spool"), url, 0, "run2")
        rel = L.trace_rel(0, "big")
        sp.add_bytes(rel, os.urandom(1_500_000), kind="trace")
        target = open_target(url, {"endpoint_url": proxy.endpoint})
        msgs: list[str] = []
        up = Uploader(sp, target, FAST, on_warning=msgs.append).start()
        import s3fs

        direct = s3fs.S3FileSystem()
        deadline = time.monotonic() + HANG_S
        while (proxy.cuts < 3 or not msgs) and time.monotonic() < deadline:
            time.sleep(0.05)
            direct.invalidate_cache()
            assert not direct.exists(f"{bucket}/run2/{rel}")  # never a partial object
        assert proxy.cuts >= 3 and len(msgs) == 1, (up.last_error, sp.waiting(), up._inflight)
        proxy.cut_after = None  # storage heals
        assert up.flush(HANG_S)
        up.close(1)
        direct.invalidate_cache()
        assert direct.size(f"{bucket}/run2/{rel}") == 1_500_000
        assert verify_rank(target, 0) == (1, [])
    finally:
        proxy.close()


def test_resume_after_kill_between_file_and_journal(tmp_path):
    """Killed after meta.json was replaced but before the journal said so; and after an upload but
    before the journal said so: resume trusts the files, uploads the newest meta, verifies."""
    run = tmp_path / "run"
    sp = Spool.create(str(tmp_path / "spool"), str(run), 2, "r")
    sp.add_bytes(L.meta_rel(2), b'{"v": 1}')
    with open(sp.data_path(L.meta_rel(2)), "wb") as f:  # the new version landed, the journal did not
        f.write(b'{"v": 2, "windows": []}')
    rel = L.trace_rel(2, L.window_name(0))
    sp.add_bytes(rel, b"x" * 100, kind="trace")
    (run / "ranks/2").mkdir(parents=True)
    os.replace(sp.data_path(rel), run / rel)  # uploaded and removed, journal still says pending
    res = resume(str(tmp_path / "spool"), timeout_s=HANG_S)
    assert (res.left, res.bad, res.verified) == (0, [], 2)
    assert json.loads((run / L.meta_rel(2)).read_text()) == {"v": 2, "windows": []}
    assert {f["path"] for f in json.loads((run / L.manifest_rel(2)).read_text())["files"]} == {
        "meta.json", "window-0000.pt.trace.json.gz"}
