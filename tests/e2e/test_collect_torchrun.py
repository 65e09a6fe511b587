"""rankscope.profile on 2 real ranks (torchrun, gloo): local dir, S3 (moto), and faults."""
from __future__ import annotations

import gzip
import json
import os
import stat
import subprocess
import sys

import pytest

from tests.fixtures_s3 import FaultProxy, free_env_without_aws, free_port, moto_server  # noqa: F401
from tests.procs import kill_tree

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "e2e", "collect_worker.py")


def torchrun(run: str, mode: str, tmp_path, env: dict[str, str] | None = None, timeout: int = 300):
    e = dict(env or os.environ)
    e.update(PYTHONPATH=ROOT, RS_SPOOL=str(tmp_path / "spool"), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", WORKER, run, mode]
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)


def said(p: subprocess.CompletedProcess) -> str:
    """What a failed job's ranks printed: every line naming an error or an abort, from any rank, then the tail of
    stderr. The tail alone can be torchrun's summary and one rank's traceback (a fresh-clone suite run, loaded
    machine: rank 1 ended with SIGABRT while rank 0 was inside a backward; the tail kept only rank 0's side)."""
    keys = ("terminate", "Fatal", "Error", "abort", "Abort", "Signal", "TRAINING-", "RankscopeWarning")
    marked = [line for line in (p.stdout + p.stderr).splitlines() if any(k in line for k in keys)]
    return "\n".join([f"exit status {p.returncode}; stdout: {p.stdout[-500:]!r}", *marked[:60], "--- stderr tail ---",
                      p.stderr[-2500:]])


def _resume(spool: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    code = ("import sys; from rankscope.commands.upload import run, add_arguments; import argparse;"
            "p=argparse.ArgumentParser(); add_arguments(p); sys.exit(run(p.parse_args(sys.argv[1:])))")
    return subprocess.run([sys.executable, "-c", code, "--resume", spool, "--timeout", "30"],
                          env={**env, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=300)


def test_profile_two_ranks_local(tmp_path):
    run = tmp_path / "run"
    hostmap = tmp_path / "private" / "hosts.json"
    p = torchrun(str(run), "ok", tmp_path, {**os.environ, "RS_HOSTMAP": str(hostmap)})
    assert p.returncode == 0, said(p)
    # where the traces went, said once for the job (by rank 0; rank 1 stays quiet)
    said = [line for line in p.stderr.splitlines() if line.startswith("rankscope: traces written")]
    assert said == [f"rankscope: traces written to {run} (2 windows)"], said(p)
    rj = json.loads((run / "run.json").read_text())
    assert rj["world_size"] == 2 and rj["ranks_expected"] == [0, 1] and rj["hosts"] == ["node-0"]
    assert rj["layout"] == {"dp": 2, "tp": 1, "pp": 1}
    metas = [json.loads((run / f"ranks/{r}/meta.json").read_text()) for r in (0, 1)]
    for r, m in enumerate(metas):
        assert (m["rank"], m["world_size"], m["backend"], m["host"]) == (r, 2, "gloo", "node-0")
        assert [w["steps"] for w in m["windows"]] == [[2, 3], [6, 7]]  # aligned on both ranks
        assert [a["when"] for a in m["clock"]["anchors"]] == ["start", "end"]
        assert m["metadata"] == {"mode": "ok"} and m["process_groups"][0]["ranks"] == [0, 1]
        man = json.loads((run / f"ranks/{r}/MANIFEST.json").read_text())
        # each window's trace and, the recorder being on by default, its collectives (group, sequence)
        assert {f["path"] for f in man["files"]} == {"meta.json", "window-0000.pt.trace.json.gz",
                                                     "window-0001.pt.trace.json.gz",
                                                     "window-0000.collectives.json.gz",
                                                     "window-0001.collectives.json.gz"}
        trace = json.load(gzip.open(run / f"ranks/{r}/window-0001.pt.trace.json.gz"))
        assert trace["distributedInfo"]["rank"] == r
        names = {e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")}
        assert names == {"ProfilerStep#6", "ProfilerStep#7"}
    # same host: the estimated offset is small and bounded by its round-trip error
    off, err = metas[1]["clock"]["offset_to_rank0_ns"], metas[1]["clock"]["offset_error_ns"]
    assert err is not None and 0 <= err < 50_000_000 and abs(off) <= err + 1_000_000
    # host names only in the owner-only host map, never in the run
    assert stat.S_IMODE(os.stat(hostmap).st_mode) == 0o600
    host = json.loads(hostmap.read_text())["hosts"]["node-0"]
    for f in run.rglob("*.json"):
        assert host not in f.read_text()
    # the analysis sees the same aligned windows
    from rankscope.analysis.steps.capture import run_capture
    from rankscope.model.run import load_run

    cap = run_capture(load_run(run, jobs=1), {})
    assert cap.findings == [] and cap.summary == {"aligned": True, "ranks": 2, "reference_steps": "2-3,6-7"}


def test_idle_rank_window_closed_and_reported(tmp_path):
    """Rank 1 stops calling step() inside its second window: the backstop closes it; capture warns."""
    run = tmp_path / "run"
    p = torchrun(str(run), "idle", tmp_path)
    assert p.returncode == 0 and p.stdout.count("TRAINING-DONE") == 2, said(p)
    m0, m1 = (json.loads((run / f"ranks/{r}/meta.json").read_text()) for r in (0, 1))
    assert [w["steps"] for w in m0["windows"]] == [[2, 3], [6, 7]] and "idle" not in m0
    assert [w["steps"] for w in m1["windows"]] == [[2, 3], [6]]
    assert m1["windows"][1]["closed_by"] == "idle_timeout" and m1["idle"]["since_step"] == 6
    assert m1["idle"]["idle_s"] >= 1.0
    trace = json.load(gzip.open(run / "ranks/1/window-0001.pt.trace.json.gz"))
    assert {e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")} == \
        {"ProfilerStep#6"}
    from rankscope.analysis.steps.capture import run_capture
    from rankscope.model.run import load_run

    kinds = {f.kind: f for f in run_capture(load_run(run, jobs=1), {}).findings}
    assert kinds["capture_mismatch"].ranks == (1,) and "rank 1 lacks step 7" in kinds["capture_mismatch"].title
    assert kinds["idle_rank"].ranks == (1,)


def test_profile_only_some_ranks_with_metadata(tmp_path):
    """ranks=[1]: rank 0 trains unprofiled; rank 1's windows carry add_metadata / add_metadata_json."""
    run = tmp_path / "run"
    p = torchrun(str(run), "subset", tmp_path)
    assert p.returncode == 0 and p.stdout.count("TRAINING-DONE") == 2, said(p)
    # said once, by the first profiled rank (1; rank 0 has no traces)
    said = [line for line in p.stderr.splitlines() if line.startswith("rankscope: traces written")]
    assert said == [f"rankscope: traces written to {run} (2 windows)"], said(p)
    assert json.loads((run / "run.json").read_text())["ranks_expected"] == [1]
    assert not list((run / "ranks/0").glob("*.pt.trace.json.gz"))
    m1 = json.loads((run / "ranks/1/meta.json").read_text())
    assert [w["steps"] for w in m1["windows"]] == [[2, 3], [6, 7]]
    assert m1["metadata"] == {"mode": "subset", "note": "subset", "cfg": {"lr": 0.01, "bs": 8}}
    trace = json.load(gzip.open(run / "ranks/1/window-0000.pt.trace.json.gz"))
    assert trace["note"] == "subset" and trace["cfg"] == {"lr": 0.01, "bs": 8}
    from rankscope.analysis.steps.capture import run_capture
    from rankscope.model.run import load_run

    cap = run_capture(load_run(run, jobs=1), {})
    assert cap.findings == [] and cap.summary["ranks"] == 1


def test_profile_two_ranks_s3(tmp_path, moto_server):
    env = {**os.environ, **moto_server.env}
    bucket = moto_server.bucket()
    p = torchrun(f"s3://{bucket}/exp", "ok", tmp_path, env)
    assert p.returncode == 0, said(p)
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=moto_server.endpoint, key="test", secret="test", skip_instance_cache=True)
    assert fs.exists(f"{bucket}/exp/run.json")
    for r in (0, 1):
        man = json.loads(fs.cat_file(f"{bucket}/exp/ranks/{r}/MANIFEST.json"))
        assert {f["path"] for f in man["files"]} == {"meta.json", "window-0000.pt.trace.json.gz",
                                                     "window-0001.pt.trace.json.gz",
                                                     "window-0000.collectives.json.gz",
                                                     "window-0001.collectives.json.gz"}


def _malloc_debug() -> str:
    """glibc's malloc checking library, beside the libc this process runs on (glibc >= 2.34 ships it with libc)."""
    with open("/proc/self/maps") as f:
        libc = next((line.split()[-1] for line in f if "/libc.so.6" in line), None)
    lib = os.path.join(os.path.dirname(libc), "libc_malloc_debug.so.0") if libc else ""
    if not os.path.exists(lib):
        pytest.fail(f"glibc's libc_malloc_debug.so.0 not found beside {libc} (glibc >= 2.34 ships it with libc6)",
                    pytrace=False)
    return lib


def test_windows_that_end_right_after_ddps_backward_leave_the_heap_intact(tmp_path):
    """DDP's last all-reduce completes its future before gloo's worker ends the collective's profiler event; a
    window stopped in between corrupted the heap on torch 2.13 (7 of 13 plain-torch jobs with glibc's malloc checks,
    docs/collect.md). The worker's windows end right after backward. With the checks on, three jobs finish, every
    rank waited before its three stops (two windows, the final stop), and both windows are kept."""
    env = {**os.environ, "LD_PRELOAD": _malloc_debug(), "GLIBC_TUNABLES": "glibc.malloc.check=3"}
    for i in range(3):
        run = tmp_path / f"run{i}"
        p = torchrun(str(run), "ok", tmp_path / f"job{i}", env)
        assert p.returncode == 0 and p.stdout.count("TRAINING-DONE") == 2, said(p)
        for r in (0, 1):
            meta = json.loads((run / f"ranks/{r}/meta.json").read_text())
            assert meta["stop_settle"]["stops"] == 3, meta.get("stop_settle")
            assert [w["steps"] for w in meta["windows"]] == [[2, 3], [6, 7]]


def test_storage_unreachable_training_finishes_then_resume(tmp_path, moto_server):
    dead = {**moto_server.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    dead["FSSPEC_S3_ENDPOINT_URL"] = dead["AWS_ENDPOINT_URL"]
    bucket = moto_server.bucket()
    p = torchrun(f"s3://{bucket}/down", "ok", tmp_path, {**os.environ, **dead})
    assert p.returncode == 0 and p.stdout.count("TRAINING-DONE") == 2, said(p)
    assert p.stderr.count("RankscopeWarning") == 2  # one warning per rank, no more
    assert (tmp_path / "spool" / "rank-1" / "data" / "ranks" / "1" / "window-0000.pt.trace.json.gz").exists()
    r = _resume(str(tmp_path / "spool"), {**os.environ, **moto_server.env})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("checksum(s) verified") == 2


def test_storage_failing_mid_upload_in_a_job_heals_and_nothing_partial_is_seen(tmp_path, moto_server):
    """A real 2-rank job uploads through a proxy that kills every request after 1.5 kB of it (storage
    failing mid-upload: the server never gets a whole body); once failures were seen, the proxy
    heals. Meanwhile the bucket is read directly: every trace object visible is a complete gzip.
    The job finishes, its retries publish everything, and the checksums verify."""
    import gzip
    import threading
    import time

    import s3fs

    from rankscope.store.fs import open_target
    from rankscope.store.uploader import verify_rank

    bucket = moto_server.bucket()
    proxy = FaultProxy(int(moto_server.endpoint.rsplit(":", 1)[1]))
    proxy.cut_after = 1500
    env = {**os.environ, **moto_server.env, "AWS_ENDPOINT_URL": proxy.endpoint,
           "FSSPEC_S3_ENDPOINT_URL": proxy.endpoint, "RS_EXIT_S": "30",
           "PYTHONPATH": ROOT, "RS_SPOOL": str(tmp_path / "spool"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", WORKER, f"s3://{bucket}/flaky", "ok"]
    direct = s3fs.S3FileSystem(endpoint_url=moto_server.endpoint, key="test", secret="test", skip_instance_cache=True)
    seen: set[str] = set()
    partial: list[str] = []

    def check_visible() -> None:
        direct.invalidate_cache()
        for path in direct.find(f"{bucket}/flaky"):
            if path.endswith(".json.gz") and path not in seen:
                try:
                    gzip.decompress(direct.cat_file(path))
                    seen.add(path)
                except (OSError, EOFError) as exc:
                    partial.append(f"{path}: {exc}")

    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: dict[str, str] = {}
    reader = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), proc.communicate())))
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while proxy.cuts < 2 and proc.poll() is None and time.monotonic() < deadline:
            check_visible()
            time.sleep(0.1)
        cuts = proxy.cuts
        proxy.cut_after = None  # storage heals
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            check_visible()
            time.sleep(0.2)
        reader.join(10)
        check_visible()
    finally:
        if proc.poll() is None:
            kill_tree(proc)
        proxy.close()
    assert proc.returncode == 0 and out.get("stdout", "").count("TRAINING-DONE") == 2, out.get("stderr", "")[-3000:]
    assert cuts >= 2, "no upload was cut: the fault never happened"
    assert partial == []  # never a partial object, while failing or after
    target = open_target(f"s3://{bucket}/flaky", {"endpoint_url": moto_server.endpoint, "key": "test",
                                                  "secret": "test"})
    for r in (0, 1):
        ok, problems = verify_rank(target, r)
        assert problems == [] and ok >= 3, (r, ok, problems)  # 2 windows + meta.json, sha256 checked
        assert f"{bucket}/flaky/ranks/{r}/window-0001.pt.trace.json.gz" in seen


def test_rank_killed_then_resume_verifies(tmp_path, moto_server):
    bucket = moto_server.bucket()
    env = {**os.environ, **moto_server.env}
    p = torchrun(f"s3://{bucket}/killed", "kill", tmp_path, env)
    assert p.returncode != 0 and "TRAINING-DONE" not in p.stdout
    from rankscope.store.spool import Spool

    spools = {r: Spool.open(str(tmp_path / f"spool/rank-{r}")) for r in (0, 1)}
    waiting = [e.rel for s in spools.values() for e in s.waiting()]
    assert waiting, "the kill came after every upload finished: nothing to resume"
    # What the spools held at the kill. A window is exported on a background thread; beside busy CPUs a kill 5 steps
    # after window 0 closed came before its export did (a fresh-clone suite beside two busy loops: the resumed
    # MANIFEST had only meta.json), so the worker now waits for its exports before it kills itself.
    prefix = {r: f"ranks/{r}/" for r in (0, 1)}
    held = {r: {e.rel[len(prefix[r]):] for e in s.entries.values()
                if e.state != "dropped" and e.rel.startswith(prefix[r])} for r, s in spools.items()}
    r = _resume(str(tmp_path / "spool"), env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0: " in r.stdout and "rank 1: " in r.stdout
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=moto_server.endpoint, key="test", secret="test", skip_instance_cache=True)
    for rk in (0, 1):  # every file the spool held made it, listed in the final MANIFEST
        man = json.loads(fs.cat_file(f"{bucket}/killed/ranks/{rk}/MANIFEST.json"))
        listed = {f["path"] for f in man["files"]}
        assert {"meta.json", "window-0000.pt.trace.json.gz", "window-0001.pt.trace.json.gz"} <= held[rk], held[rk]
        assert held[rk] - {"MANIFEST.json"} <= listed, (rk, held[rk], listed)
        for f in man["files"]:  # each listed file is there, whole
            assert fs.size(f"{bucket}/killed/ranks/{rk}/{f['path']}") == f["size"], f


def test_missing_credentials_fail_before_training(tmp_path, moto_server):
    env = free_env_without_aws()
    env["FSSPEC_S3_ENDPOINT_URL"] = moto_server.endpoint
    p = torchrun("s3://somebucket/run", "ok", tmp_path, env)
    assert p.returncode != 0 and "TRAINING-STARTED" not in p.stdout
    assert "no valid credentials" in p.stderr


def test_invalid_url_clear_error_in_process():
    from rankscope.collect.profiler import profile
    from rankscope.errors import RankscopeError

    with pytest.raises(RankscopeError, match="nosuch://"):
        profile(run="nosuch://x/y").start()
