"""The recorder's threads never crash a job at its end: 2-rank gloo jobs (tests/e2e/live_job.py ``exit``) end
after 0 to 60 steps, through ``prof.stop()`` or through the interpreter's exit alone, while rank 1 asks every
rank to dump every 20 ms, the watchdog polls every 50 ms and the live signal reports: every rank must end
with status 0 and no abort ("terminate called", "Fatal Python error"), and the dumps in the run must read."""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fixtures_s3 import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
TIMINGS = [(0, "atexit"), (1, "stop"), (3, "atexit"), (9, "stop"), (27, "atexit"), (60, "stop")]


def _job(run: Path, steps: int, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
                           f"--master-port={free_port()}", str(ROOT / "tests/e2e/live_job.py"), str(run), "exit",
                           str(steps), how], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


def test_jobs_end_cleanly_at_many_moments_of_the_recorders_threads(tmp_path: Path) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda t: (t, _job(tmp_path / f"run-{t[0]}-{t[1]}", *t)), TIMINGS))
    for (steps, how), p in done:
        text = p.stdout + p.stderr
        assert p.returncode == 0, f"{steps} steps, {how}:\n{text[-3000:]}"
        assert sorted(line for line in p.stdout.splitlines() if line.startswith("DONE")) == ["DONE 0", "DONE 1"]
        for bad in ("terminate called", "Fatal Python error", "Traceback"):
            assert bad not in text, f"{steps} steps, {how}:\n{text[-3000:]}"
    from rankscope.model.readers import frdump

    for (steps, how), _ in done:
        dumps = [frdump.read(f) for f in frdump.find(tmp_path / f"run-{steps}-{how}")]
        assert {d.rank for d in dumps} == {0, 1}  # every rank dumped (its exit dump at least), each one readable
        assert all(d.reason for d in dumps)
