"""NCCL on a real GPU: rankscope's timed engine against Flight Recorder's own NCCL records.

    python bench/nccl_recorder.py [--calls 500] [--rounds 5]      (a CUDA machine; world size 1)

Each engine runs in its own process (a recorder is chosen before the process group exists):
- ``nccl``: plain NCCL, Flight Recorder's ring 0 (``TORCH_FR_BUFFER_SIZE=0``): the baseline;
- ``fr``: Flight Recorder with ``TORCH_NCCL_ENABLE_TIMING=1`` (what ``rankscope.comms.enable()`` sets);
- ``timed``: rankscope's timed wrapper of NCCL (CUDA events polled off the training thread).
Measured: the CPU cost of issuing one all_reduce of 1 KiB (``--calls`` calls, then one synchronize; median of
``--rounds``), and for 4 KiB, 1 MiB and 64 MiB all_reduces the GPU time each engine recorded (``duration_ms``)
against CUDA events around the same call on the caller's stream (median of 20 calls each).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = {"4 KiB": 1 << 10, "1 MiB": 1 << 18, "64 MiB": 1 << 24}  # float32 elements


def worker(engine: str, out: str, calls: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT))
    torch.cuda.set_device(0)
    backend = "nccl"
    if engine == "timed":
        from rankscope.collect.comms import timed_pg

        backend = timed_pg.timed_backend("nccl")
    store = tempfile.mktemp(prefix="nccl-store-")
    dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    small = torch.ones(256, device="cuda")
    for _ in range(50):
        dist.all_reduce(small)
    torch.cuda.synchronize()
    issue = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(small)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        issue.append((t1 - t0) / calls * 1e6)
    truth: dict[str, list[float]] = {}
    for name, n in SIZES.items():
        t = torch.ones(n, device="cuda")
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dist.all_reduce(t)
            b.record()
            b.synchronize()
            truth.setdefault(name, []).append(a.elapsed_time(b))
    time.sleep(1.0)  # the pollers (ours every 0.1 s, NCCL's watchdog) see the last events
    recorded = _recorded(engine)
    res = {"engine": engine, "issue_us": statistics.median(issue), "truth_ms": {k: statistics.median(v) for k, v in truth.items()},
           "recorded_ms": {}, "states": sorted({str(e.get("state")) for e in recorded[-60:]})}
    tail = recorded[-60:]  # the 3 x 20 sized calls, in order
    for i, name in enumerate(SIZES):
        got = [e.get("duration_ms") for e in tail[20 * i:20 * (i + 1)] if e.get("duration_ms") is not None]
        res["recorded_ms"][name] = statistics.median(got) if got else None
    Path(out).write_text(json.dumps(res))
    dist.destroy_process_group()


def _recorded(engine: str) -> list[dict]:
    if engine == "timed":
        from rankscope.collect.comms import timed_pg

        return timed_pg.entries()
    if engine == "fr":
        from rankscope.collect import comms

        return comms.fr_doc()["entries"]  # NCCL's ring (_dump_nccl_trace)
    return []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--worker", nargs=2, metavar=("ENGINE", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker[0], a.worker[1], a.calls, a.rounds)
        return
    rows = []
    for engine in ("nccl", "fr", "timed", "nccl"):  # the baseline before and after
        env = {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_FR_BUFFER_SIZE": "0" if engine == "nccl" else "2000",
               "TORCH_NCCL_ENABLE_TIMING": "1" if engine == "fr" else "0"}
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            p = subprocess.run([sys.executable, __file__, "--worker", engine, f.name, "--calls", str(a.calls),
                                "--rounds", str(a.rounds)], env=env, capture_output=True, text=True, timeout=300)
            if p.returncode:
                print(f"{engine}: failed\n{p.stderr[-2000:]}")
                continue
            rows.append(json.loads(Path(f.name).read_text()))
    print("| engine | issue µs / all_reduce 1 KiB | " + " | ".join(f"{s}: recorded / events ms" for s in SIZES)
          + " | states |")
    print("|---|---|" + "---|" * len(SIZES) + "---|")
    for r in rows:
        cells = [f"{r['recorded_ms'][s]:.4f} / {r['truth_ms'][s]:.4f}" if r["recorded_ms"].get(s) is not None
                 else f"- / {r['truth_ms'][s]:.4f}" for s in SIZES]
        print(f"| {r['engine']} | {r['issue_us']:.1f} | " + " | ".join(cells) + f" | {','.join(r['states'])} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
