"""``destroy_process_group`` frees the world group of a job profiled by rankscope: gloo's worker threads
are joined there, not left to race the interpreter's finalization (where one dropping its last Work
aborted 6 of 40 two-rank MoE workload runs with SIGABRT). See rankscope.collect.worldref."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fixtures_s3 import free_port
from tests.procs import why_failed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "tests", "e2e", "world_freed_job.py")
GLOO = "pt_gloo_runloop"  # the name gloo's ProcessGroup gives its worker threads (ProcessGroupGloo.cpp)



def _job(tmp_path, mode: str) -> dict[int, dict[str, list[str]]]:
    out = tmp_path / mode
    out.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
           f"--master-port={free_port()}", JOB, mode, str(out)]
    p = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1",
                                 "PYTHONFAULTHANDLER": "1", "RS_SPOOL": str(tmp_path / "spool")},
                       capture_output=True, text=True, timeout=300)  # a hang bound only
    assert p.returncode == 0, why_failed(p.stderr)
    return {r: json.loads((out / f"threads-{r}.json").read_text()) for r in (0, 1)}


def test_destroy_process_group_joins_gloo_threads_under_rankscope(tmp_path):
    got = _job(tmp_path, "rankscope")
    for rank, t in got.items():
        assert GLOO in t["before"], (rank, t)  # the threads were there to be joined
        assert GLOO not in t["after"], (rank, t)


def test_control_plain_torch_profiler_pins_the_group(tmp_path):
    """The control: without rankscope, torch.profiler (2.13) leaves the group alive; if this fails, torch no
    longer pins it and rankscope.collect.worldref can go."""
    got = _job(tmp_path, "torch")
    for rank, t in got.items():
        assert GLOO in t["after"], (rank, t)
