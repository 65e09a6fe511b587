"""DDP training steps per second with the collective recorder on vs off (2 ranks, gloo, CPU).

The recorder's capture engine (Flight Recorder's ring, ``TORCH_FR_BUFFER_SIZE``) is fixed when the
process group is created, so "on" and "off" are separate torchrun jobs, run alternately (on, off,
on, off, ...) so that drifts in machine speed hit both alike. Each job times ``--steps`` DDP steps
of a small MLP after a warm-up and prints steps/s; the script reports the median of each side and
the median of the paired ratios.

    PYTHONPATH=. .venv/bin/python bench/comms_overhead.py --pairs 6 --steps 300
    PYTHONPATH=. .venv/bin/python bench/comms_overhead.py --pairs 6 --steps 300 --modes off,on,timed,timed16

Modes: ``off``; ``on`` (Flight Recorder's ring and rankscope's watchdog); ``timed`` (rankscope's timed
backend wrapping gloo, every collective timed by a completion callback); ``timedN`` (the same, one in N
timed). Each round runs every mode once, in an order rotated per round; overheads are paired per round
against ``off``.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = r'''
import os, sys, time, datetime, torch, torch.distributed as dist
mode = sys.argv[1]
on = mode != "off"
backend = "gloo"
if on:
    from rankscope.collect import comms
    if mode.startswith("timed"):
        backend = comms.timed_backend("gloo", sample_every=int(mode[5:] or 1))
    else:
        comms.enable()
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 256)
rec = comms.Recorder("/tmp/rankscope-comms-bench", watchdog_s=60).start() if on else None
def step():
    opt.zero_grad(); model(x).sum().backward(); opt.step()
for _ in range(30):
    step()
dist.barrier()
n = int(sys.argv[2]); t0 = time.perf_counter()
for _ in range(n):
    step()
dist.barrier()
el = time.perf_counter() - t0
if rec: rec.stop()
if dist.get_rank() == 0:
    print("STEPS_PER_S", n / el, flush=True)
dist.destroy_process_group()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one(mode: str, steps: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("TORCH_FR_BUFFER_SIZE", None)
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
                        f"--master-port={free_port()}", "--no-python", sys.executable, "-c", JOB,
                        mode, str(steps)], env=env, capture_output=True, text=True, timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("STEPS_PER_S"):
            return float(line.split()[1])
    raise SystemExit(f"job failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--modes", default="off,on", help="comma-separated: off, on, timed, timedN (default off,on)")
    a = ap.parse_args()
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    if "off" not in modes:
        modes.insert(0, "off")
    rates: dict[str, list[float]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes if m != "off"}
    for i in range(a.pairs):
        order = modes[i % len(modes):] + modes[:i % len(modes)]
        got = {m: one(m, a.steps) for m in order}
        for m in modes:
            rates[m].append(got[m])
            if m != "off":
                ratios[m].append(got["off"] / got[m])
        print(f"round {i}: " + ", ".join(f"{m} {got[m]:.1f} steps/s" for m in modes) + "; overhead "
              + ", ".join(f"{m} {100 * (ratios[m][-1] - 1):+.2f} %" for m in ratios), flush=True)
    for m in ratios:
        r = ratios[m]
        print(f"{m}: median {statistics.median(rates[m]):.1f} steps/s vs off {statistics.median(rates['off']):.1f}; "
              f"median paired overhead {100 * (statistics.median(r) - 1):+.2f} % "
              f"(min {100 * (min(r) - 1):+.2f}, max {100 * (max(r) - 1):+.2f}); load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
