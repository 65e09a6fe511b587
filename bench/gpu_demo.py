"""The demo job on a real CUDA GPU (a device machine): runs to analyze on any machine afterwards.

    python3 bench/gpu_demo.py OUT [--cases healthy,data,compute,host,nccl1] [--steps 6] [--repeats 1] [--ranks 2]

Each case is rankscope/demo/train.py under torch.distributed.run with ``--device cuda``, profiled by
``rankscope.profile`` with CPU and CUDA activities:
- ``healthy``, ``data``, ``compute``, ``host``: 2 ranks (``--ranks``) on one GPU with gloo (NCCL refuses two
  ranks on one GPU), rank 1 the straggler of that kind (none for ``healthy``);
- ``nccl1``: one rank with NCCL (world size 1).
Writes OUT/CASE/ (the run) and OUT/CASE.log (OUT/CASE-i with ``--repeats``, the cases interleaved); prints one
line per run (exit status, seconds). The runs are then
read where rankscope's analysis dependencies are installed: ``rankscope analyze OUT/CASE --json``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {"healthy": (2, -1, "compute"), "data": (2, 1, "data"), "compute": (2, 1, "compute"),
         "host": (2, 1, "host"), "nccl1": (1, -1, "compute")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--ranks", type=int, default=2, help="ranks of the gloo cases (all on the machine's GPUs)")
    p.add_argument("--timeout", type=float, default=120)
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = [(c, f"{c}-{i}" if a.repeats > 1 else c) for i in range(a.repeats) for c in a.cases.split(",")]
    for case, name in runs:
        ranks, slow, kind = CASES[case]
        ranks = a.ranks if ranks > 1 else ranks
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "--module", "rankscope.demo.train", "--device", "cuda", "--run-dir", str(out / name),
               "--steps", str(a.steps), "--warmup", "2", "--slow-rank", str(slow), "--slow-kind", kind]
        t0 = time.perf_counter()
        with open(out / f"{name}.log", "w") as fh:
            try:
                rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, timeout=a.timeout).returncode
            except subprocess.TimeoutExpired:
                rc = -9
        tail = (out / f"{name}.log").read_text(errors="replace").strip().splitlines()[-2:]
        print(f"{name}: exit {rc} in {time.perf_counter() - t0:.1f} s | {' | '.join(tail)[-300:]}", flush=True)


if __name__ == "__main__":
    main()
