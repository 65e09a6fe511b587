"""Issue 14: the collective recorder switched on by the environment in a job profiled with
rankscope.profile, a remote ``rankscope trigger RUN --dump`` while the job hangs, the dumps published to
the run directory by the uploader (``ranks/<r>/comms.*.json.gz``), and ``rankscope hang RUN`` naming the
rank that never joined. Real 3-rank gloo job under torchrun."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import kill_tree

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rankscope.cli", *args], capture_output=True, text=True, timeout=120)


def test_trigger_dump_of_a_hung_job_reaches_the_run_and_hang_names_the_missing_rank(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "RANKSCOPE_COMMS": "1", "TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(HERE.parents[1])}
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3",
                            str(HERE / "comms_profile_job.py"), str(run)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        ready, deadline = set(), time.monotonic() + 120
        assert job.stdout is not None
        while len(ready) < 3 and time.monotonic() < deadline:
            line = job.stdout.readline()
            if not line and job.poll() is not None:
                break
            ready.update(re.findall(r"READY (\d)", line))  # ranks' lines may interleave with the profiler's
        assert len(ready) == 3, "the job did not reach the hang"
        time.sleep(1.0)
        done = _cli("trigger", str(run), "--dump")
        assert done.returncode == 0 and "dump collectives" in done.stdout, done.stderr
        dumps: list[Path] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # published by each rank's uploader while the job hangs
            dumps = sorted(run.glob("ranks/*/comms.*-trigger-*.rank*.json.gz"))
            if len(dumps) == 3:
                break
            time.sleep(0.5)
        assert [p.parent.name for p in dumps] == ["0", "1", "2"], dumps
        assert job.poll() is None  # the job itself was not disturbed: still waiting in its collective
        hang = _cli("hang", str(run), "--json")
        assert hang.returncode == 0, hang.stderr
        v = json.loads(hang.stdout)
        first = v["problems"][0]  # rank 1 skipped the all_reduce: its next collective takes that sequence number
        assert first["kind"] == "mismatch" and first["expected_ranks"] == [0, 2], v
        assert list(first["odd"].values()) == [[1]] and "all_gather" in list(first["odd"])[0], v
        assert "rank 1 issued all_gather" in v["headline"] and v["no_dump"] == [], v["headline"]
        # the same verdict in the run's analysis: the report's "Collectives / hang" view
        from rankscope.analysis.registry import run_all
        from rankscope.model.run import load_run
        from rankscope.render.html import build

        r = load_run(run, jobs=1, allow_missing_ranks=True)
        res = run_all(r, ["hang"])["hang"]
        assert [(f.kind, f.ranks) for f in res.findings] == [("desync", (1,))] and res.summary["dumps"] == 3
        page = build(r, {"hang": res})
        assert 'id="view-hang"' in page and "rank 1 issued all_gather" in page.split('id="view-hang"')[1]
    finally:
        kill_tree(job, 30)
