"""``prof.step()`` forgotten: the job says so when the profile ends, and the analysis of the run
(which has no trace) names the likely cause instead of "no trace files found"."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import sys, torch, rankscope
x = torch.randn(32, 32)
with rankscope.profile(run=sys.argv[1], schedule=torch.profiler.schedule(wait=1, warmup=1, active=2)):
    for _ in range(6):
        x = torch.tanh(x @ x)   # the loop never calls prof.step()
print("DONE")
"""


def test_forgotten_step_is_noticed_at_exit_and_by_the_analysis(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", JOB, str(run)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "DONE" in p.stdout, p.stderr[-2000:]
    warn = [line for line in p.stderr.splitlines() if "prof.step() was never called" in line]
    assert len(warn) == 1, p.stderr[-2000:]
    said = [line for line in p.stderr.splitlines() if line.startswith("rankscope: traces written")]
    assert said == [f"rankscope: traces written to {run} (0 windows)"], p.stderr[-2000:]
    meta = json.loads((run / "ranks" / "0" / "meta.json").read_text())
    assert "prof.step() was never called" in meta["no_steps"] and meta["windows"] == []
    a = subprocess.run([sys.executable, "-m", "rankscope.cli", "analyze", str(run)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert a.returncode == 1 and "prof.step()" in a.stderr and "Traceback" not in a.stderr
