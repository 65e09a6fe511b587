"""DDP step time with the timed collective recorder recording vs paused, in one job (2 ranks, gloo, CPU).

bench/comms_overhead.py compares separate torchrun jobs; on this VM identical jobs differ by up to
±40 %, far more than the ≤ 1 % to resolve. Here one job alternates blocks of ``--block`` DDP steps with
recording on (every collective timed, or one in N with ``--sample N``) and paused
(``timed_pg.set_recording(False)``: calls pass straight to gloo, counted), in the order on, off, off, on,
on, off, ... so drifts hit both alike; both ranks switch at the same step. The overhead is the median
over adjacent (on, off) pairs of on/off - 1, from rank 0's block times. Both halves go through the wrapper,
so this is the cost of recording; the paused wrapper's own dispatch (a backend written in Python: +0.6 to
+19 µs per collective, bench/comms_call_cost.py) is not in it and is added to it when comparing with plain gloo.

    PYTHONPATH=. .venv/bin/python bench/comms_overhead_inproc.py --width 256 --blocks 40 --block 50
    PYTHONPATH=. .venv/bin/python bench/comms_overhead_inproc.py --width 1024 --depth 4 --blocks 30 --block 20

Prints the step time, collectives per step, and the overhead's median and interquartile range.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = r'''
import sys, time, datetime, torch, torch.distributed as dist
from rankscope.collect import comms
from rankscope.collect.comms import timed_pg
width, depth, blocks, block, sample, poll = (int(a) for a in sys.argv[1:7])
dist.init_process_group(comms.timed_backend("gloo", sample_every=sample, poll=bool(poll)),
                        timeout=datetime.timedelta(seconds=120))
torch.manual_seed(0)
layers = []
for _ in range(depth):
    layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, width)
def step():
    opt.zero_grad(); model(x).sum().backward(); opt.step()
for _ in range(30):
    step()
dist.barrier()
c0 = sum(timed_pg.RING.counts.values())
times = []
for b in range(blocks):
    on = (b % 4) in (0, 3)  # on, off, off, on, on, off, off, on, ...
    timed_pg.set_recording(on)
    t0 = time.perf_counter()
    for _ in range(block):
        step()
    times.append((on, time.perf_counter() - t0))
timed_pg.set_recording(True)
calls = (sum(timed_pg.RING.counts.values()) - c0) / (blocks * block)
dist.barrier()
if dist.get_rank() == 0:
    print("CALLS_PER_STEP", calls)
    for on, t in times:
        print("BLOCK", int(on), t / block)
dist.destroy_process_group()
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--width", type=int, default=256, help="MLP width (default 256)")
    ap.add_argument("--depth", type=int, default=1, help="Linear layers (default 1)")
    ap.add_argument("--blocks", type=int, default=40, help="blocks of steps, half recording (default 40)")
    ap.add_argument("--block", type=int, default=50, help="steps per block (default 50)")
    ap.add_argument("--sample", type=int, default=1, help="time one collective in N while recording (default 1)")
    ap.add_argument("--poll", action="store_true", help="completion found by polling, no callback (timed_backend poll=True)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from fixtures_s3 import free_port

    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
                        f"--master-port={free_port()}", "--no-python", sys.executable, "-c", JOB,
                        *map(str, (a.width, a.depth, a.blocks, a.block, a.sample, int(a.poll)))],
                       env=env, capture_output=True, text=True, timeout=1800)
    blocks = [(line.split()[1] == "1", float(line.split()[2])) for line in p.stdout.splitlines()
              if line.startswith("BLOCK")]
    calls = next((float(line.split()[1]) for line in p.stdout.splitlines() if line.startswith("CALLS_PER_STEP")), 0.0)
    if not blocks:
        raise SystemExit(f"job failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    pairs = [(blocks[i][1], blocks[i + 1][1]) if blocks[i][0] else (blocks[i + 1][1], blocks[i][1])
             for i in range(0, len(blocks) - 1, 2)]
    over = sorted(on / off - 1 for on, off in pairs)
    q = statistics.quantiles(over, n=4) if len(over) >= 4 else [over[0], statistics.median(over), over[-1]]
    off_ms = statistics.median(t for on, t in blocks if not on) * 1e3
    load = os.getloadavg()[0]
    print(f"width {a.width} x depth {a.depth}, sample 1 in {a.sample}{', poll' if a.poll else ''}: step {off_ms:.2f} ms (paused), "
          f"{calls:.1f} collectives per step, {len(pairs)} pairs of {a.block}-step blocks")
    print(f"overhead of recording: median {statistics.median(over) * 100:+.2f} %, "
          f"IQR {q[0] * 100:+.2f} % .. {q[2] * 100:+.2f} %  (load {load:.1f})")


if __name__ == "__main__":
    main()
