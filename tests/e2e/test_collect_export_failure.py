"""A window that cannot be saved (disk full) costs that window, never the training job.

The disk-full error is injected by replacing torch's ``export_chrome_trace`` with one that raises
``OSError(ENOSPC)`` (a real full disk cannot be made here without root mounts): the job must run all
its steps, say once per lost window why, and record the loss in meta.json.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import errno, sys, torch, rankscope
def full(self, path):
    raise OSError(errno.ENOSPC, "No space left on device", path)
torch.profiler.profile.export_chrome_trace = full
x = torch.randn(32, 32)
with rankscope.profile(run=sys.argv[1], schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2),
                       on_trace_ready=lambda p: None) as prof:
    for step in range(10):
        x = torch.tanh(x @ x)
        prof.step()
print("DONE", step)
"""


def test_export_failure_loses_the_window_not_the_job(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", JOB, str(run)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "DONE 9" in p.stdout, p.stderr[-2000:]
    lost = [line for line in p.stderr.splitlines() if "could not be saved" in line]
    assert len(lost) == 2 and "No space left on device" in lost[0], p.stderr[-2000:]
    said = [line for line in p.stderr.splitlines() if line.startswith("rankscope: traces written")]
    assert said == [f"rankscope: traces written to {run} (0 windows, 2 lost)"], p.stderr[-2000:]
    meta = json.loads((run / "ranks" / "0" / "meta.json").read_text())
    assert [w["steps"] for w in meta["lost_windows"]] == [[2, 3], [6, 7]]
