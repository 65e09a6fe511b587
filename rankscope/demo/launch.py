"""Launch the demo training job through torch.distributed.run and wait for it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rankscope.errors import RankscopeError


def launch(run_dir: Path, *, ranks: int, steps: int, warmup: int, slow_rank: int | None,
           slow_kind: str, slowdown: float, timeout_s: float = 600, rotate_cpus: bool = False) -> None:
    """Run ``ranks`` processes of rankscope.demo.train; raises RankscopeError with the log tail on failure.
    ``rotate_cpus``: every rank moves to another CPU each step (see train.py's --rotate-cpus)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
           "--module", "rankscope.demo.train", "--run-dir", str(run_dir), "--steps", str(steps),
           "--warmup", str(warmup), "--slow-rank", str(-1 if slow_rank is None else slow_rank),
           "--slow-kind", slow_kind, "--slowdown", str(slowdown)] + (["--rotate-cpus"] if rotate_cpus else [])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    log = run_dir / "launch.log"
    with open(log, "w") as fh:
        try:
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise RankscopeError(f"the demo job did not finish in {timeout_s:.0f} s; log: {log}") from exc
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise RankscopeError(f"the demo job failed (exit {proc.returncode}); log: {log}: {' | '.join(tail)}")
