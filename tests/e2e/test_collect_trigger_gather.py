"""On-demand trigger (single process, S3 via moto, 2 real ranks through the c10d store) and gather."""
from __future__ import annotations

import json
import os
import time

from rankscope.collect.trigger import write_request
from rankscope.commands.gather import gather, open_source
from rankscope.store.uploader import UploadConfig
from tests.fixtures_s3 import moto_server, s3_env  # noqa: F401

FAST = UploadConfig(jitter_s=0.05, backoff_base_s=0.05, exit_timeout_s=60)  # at close: waits only while uploads run


def _train_until_triggered(p, run: str, trigger_at: int = 5, limit_s: float = 120.0) -> tuple[str, str]:
    """Steps of ~50 ms (a matmul and a sleep); the request is written at step ``trigger_at``; training goes on
    until the triggered window is saved, with only a hang bound (how soon: bench/timing_limits.py)."""
    import torch

    x = torch.randn(16, 16)
    rid = path = ""
    deadline = time.monotonic() + limit_s
    for i in range(100_000):
        x = x @ x / 16
        time.sleep(0.05)
        if i == trigger_at:
            rid, path = write_request(run, steps=2, warmup=1)
        p.step()
        if rid and any(w.get("trigger") == rid for w in p.collector.windows):
            break
        assert time.monotonic() < deadline, f"no window for trigger {rid} after {limit_s:g} s"
    for _ in range(3):  # a few more steps after the window, as a job would go on
        p.step()
    return rid, path


def test_trigger_starts_capture_at_the_next_step_after_adoption(tmp_path):
    from rankscope.collect.profiler import profile

    run = str(tmp_path / "run")
    t_req = time.time_ns()
    with profile(run=run, on_demand=True, spool_dir=str(tmp_path / "sp"), upload=FAST) as p:
        rid, _ = _train_until_triggered(p, run)
    meta = json.loads((tmp_path / "run/ranks/0/meta.json").read_text())
    (win,) = meta["windows"]
    assert win["trigger"] == rid and len(win["steps"]) == 2
    # the rank adopted the request after it was written (how soon: bench/timing_limits.py), and capture
    # (warm-up) began at the next step
    (trig,) = meta["triggers"]
    assert trig["id"] == rid and trig["seen_wall_ns"] >= t_req
    assert win["steps"][0] == trig["start_step"] + 1  # one warm-up step first
    assert (tmp_path / "run/ranks/0" / win["file"]).exists()


def test_a_rank_that_sees_a_plan_late_records_its_tail_never_other_steps(tmp_path):
    """A rank whose trigger thread was starved past the lead (a loaded host) must record the plan's own
    steps, fewer of them, never later ones: the other ranks recorded the agreed steps. The plan (warm-up
    at steps 5 and 6, recording 7, 8 and 9) is handed over at the end of a step before it, inside its
    warm-up, inside its recording and after it, as a late trigger thread would hand it."""
    import torch

    from rankscope.collect.profiler import profile
    from rankscope.collect.trigger import Plan

    x = torch.randn(16, 16)
    seen_after = {"early": 3, "in-warmup": 5, "in-record": 7, "over": 9, "other-rank": 7}  # at the end of this step
    expect = {"early": ([7, 8, 9], None), "in-warmup": ([7, 8, 9], []), "in-record": ([8, 9], [7]),
              "over": ([], [7, 8, 9]), "other-rank": ([], None)}  # a plan for rank 1 only: nothing to miss here
    for name, k in seen_after.items():
        with profile(run=str(tmp_path / name), on_demand=True, spool_dir=str(tmp_path / f"sp-{name}"),
                     upload=FAST) as p:
            for i in range(14):
                x = torch.tanh(x @ x)
                if i == k:
                    p._adopt(Plan(name, 5, 2, 3, (1,) if name == "other-rank" else None, time.time_ns()))
                p.step()
        meta = json.loads((tmp_path / name / "ranks/0/meta.json").read_text())
        got = [s for w in meta["windows"] if w.get("trigger") == name for s in w["steps"]]
        (trig,) = meta["triggers"]
        assert (got, trig.get("missed_steps")) == expect[name], (name, meta)
        assert ("late" in trig) == (name not in ("early", "other-rank"))


def test_trigger_through_s3(tmp_path, s3_env):
    """The request is an object on a real S3 server (moto): written by write_request, listed and read
    by the rank's background watcher, and the triggered window lands in the bucket."""
    import s3fs

    from rankscope.collect.profiler import profile

    run = f"s3://{s3_env.bucket()}/trig"
    with profile(run=run, on_demand=True, spool_dir=str(tmp_path / "sp"), upload=FAST) as p:
        rid, path = _train_until_triggered(p, run, trigger_at=3)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert fs.exists(path)
    meta = json.loads(fs.cat_file(run + "/ranks/0/meta.json"))
    (win,) = meta["windows"]
    assert win["trigger"] == rid and len(win["steps"]) == 2
    assert fs.exists(run + "/ranks/0/" + win["file"])


def test_trigger_two_ranks_through_c10d_store(tmp_path):
    """`rankscope trigger` (the real CLI) at a running 2-rank torchrun job (gloo): both ranks capture
    the same steps, agreed through the c10d store (how soon after the request: bench/timing_limits.py and
    bench/trigger_latency.py; here only TriggerJob's hang bound)."""
    from tests.e2e.trigger_job import TriggerJob

    job = TriggerJob(tmp_path)
    try:
        job.wait_started()
        caps = [job.trigger(steps=3, warmup=1), job.trigger(steps=2, warmup=0)]
        only1 = job.trigger(steps=2, warmup=1, ranks="1")
    finally:
        rc = job.stop()
    assert rc == 0, "".join(job.lines[-30:])
    for cap, (n, warmup) in zip(caps, ((3, 1), (2, 0))):
        cap.check_aligned(n, warmup)  # the same steps on both ranks (a rank late on a loaded host: a tail, in its meta)
        # rank 0 adopted the request after it was written and recorded after adopting; both ranks recorded
        # only after the request (order, not speed)
        assert cap.seen_ns is not None and cap.created_ns <= cap.seen_ns <= cap.windows[0]["start_wall_ns"]
        assert all(w["start_wall_ns"] >= cap.created_ns for w in cap.windows.values()), cap.windows
    assert caps[1].windows[0]["steps"][0] > caps[0].windows[0]["steps"][-1]
    meta = json.loads((tmp_path / "run/ranks/1/meta.json").read_text())
    assert [w["trigger"] for w in meta["windows"]] == [c.id for c in [*caps, only1] if 1 in c.windows]
    # --ranks 1: rank 1 captured (all 2 steps, or the tail its meta accounts for), rank 0 did not
    assert len(only1.steps(1)) + len(only1.notes.get(1, {}).get("missed_steps", [])) == 2
    meta0 = json.loads((tmp_path / "run/ranks/0/meta.json").read_text())
    assert [w["trigger"] for w in meta0["windows"]] == [c.id for c in caps]


def test_gather_builds_one_run_from_node_copies(tmp_path):
    node_a, node_b = tmp_path / "a", tmp_path / "b"
    (node_a / "ranks/0").mkdir(parents=True)
    (node_a / "ranks/0/meta.json").write_text('{"rank": 0}')
    (node_a / "run.json").write_text('{"format": "rankscope.run/1"}')
    (node_a / "ranks/0/.rstmp-x-junk").write_text("partial")
    spool_file = node_b / "rank-1/data/ranks/1/window-0000.pt.trace.json.gz"
    spool_file.parent.mkdir(parents=True)
    spool_file.write_bytes(os.urandom(1000))
    (node_b / "rank-1/spool.json").write_text("{}")
    out = tmp_path / "run"
    counts = gather(str(out), [open_source(f"file://{node_a}"), open_source(f"file://{node_b}")])
    assert counts == {0: 1, 1: 1}
    assert (out / "run.json").exists() and not (out / "ranks/0/.rstmp-x-junk").exists()
    from rankscope.store.fs import open_target
    from rankscope.store.uploader import verify_rank

    assert verify_rank(open_target(str(out)), 1) == (1, [])


def test_gather_over_real_sftp(tmp_path):
    """Real OpenSSH server on 127.0.0.1 with a generated key (`make test` installs openssh-server; missing,
    this fails with the command, never skips)."""
    import shutil
    import subprocess

    import pytest

    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        pytest.fail("openssh-server is not installed: `sudo apt-get install -y openssh-server` (or `make sysdeps` "
                    "as root; `make test` runs it)", pytrace=False)
    from fsspec.implementations.sftp import SFTPFileSystem

    from tests.fixtures_s3 import _wait_port, free_port

    d = tmp_path / "ssh"
    d.mkdir()
    for k in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / k)], check=True)
    (d / "auth").write_text((d / "user.pub").read_text())
    port = free_port()
    (d / "cfg").write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nAuthorizedKeysFile {d}/auth\n"
                           f"PasswordAuthentication no\nStrictModes no\nSubsystem sftp internal-sftp\n"
                           f"PidFile {d}/pid\n")
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen([sshd, "-D", "-f", str(d / "cfg"), "-E", str(d / "log")])
    try:
        _wait_port(port)
        node = tmp_path / "node"
        (node / "ranks/2").mkdir(parents=True)
        (node / "ranks/2/meta.json").write_text('{"rank": 2}')
        fs = SFTPFileSystem("127.0.0.1", port=port, username=os.environ.get("USER", "root"),
                            key_filename=str(d / "user"), look_for_keys=False, allow_agent=False)
        assert gather(str(tmp_path / "run"), [(fs, str(node))]) == {2: 1}
        assert json.loads((tmp_path / "run/ranks/2/meta.json").read_text()) == {"rank": 2}
    finally:
        proc.terminate()
        proc.wait(10)
