"""The hang matrix on NCCL (a GPU machine): tests/e2e/hang_matrix_job.py's scenarios with ``BACKEND nccl``,
each named by ``rankscope hang RUN --json`` from the dumps the recorder's watchdog made every rank write.

    python bench/nccl_hang.py [--ranks 2] [--cases op-fr,size-timed,...]

Ranks share the machine's GPUs (rank r on GPU r % count): on one GPU, two ranks share it, when NCCL allows
that (it checks first: ``probe``). Prints per case the root cause found and the seconds from the job's
"BAD" line (the moment it goes wrong) to the verdict.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CASES = "op-fr,op-timed,size-fr,size-timed,skip_sub-fr,sleep-timed,exit-fr,p2p-timed,ddp-fr,ddp-timed,fsdp-timed"
PROBE = """
import os, torch, torch.distributed as dist
r = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(r % torch.cuda.device_count())
dist.init_process_group("nccl"); t = torch.ones(4, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
print("PROBE", r, float(t[0]), flush=True); dist.destroy_process_group()
"""


def probe(n: int) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PROBE)
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}", "--master-addr=127.0.0.1",
                        f"--master-port={_port()}", f.name], capture_output=True, text=True, timeout=120)
    ok = p.stdout.count("PROBE") == n
    return "ok" if ok else (p.stdout + p.stderr)[-1500:]


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_case(case: str, n: int, base: Path) -> dict:
    from tests.e2e.test_hang_matrix import _wait_for_dumps
    from tests.procs import kill_tree

    scenario, engine = case.split("-")
    run, log_path = base / case, base / f"{case}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
                                 "--master-addr=127.0.0.1", f"--master-port={_port()}",
                                 str(ROOT / "tests/e2e/hang_matrix_job.py"), str(run), scenario, engine, "nccl"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
        try:
            bad = _wait_for_dumps(log_path, run, n, proc, limit_s=60)
            p = subprocess.run([sys.executable, "-m", "rankscope.cli", "hang", str(run), "--json", "--world-size", str(n)],
                               capture_output=True, text=True, timeout=120)
            after = (time.time_ns() - bad) / 1e9
        except AssertionError as exc:
            return {"case": case, "error": str(exc)[-1500:]}
        finally:
            kill_tree(proc)
    if p.returncode:
        return {"case": case, "error": p.stderr[-1500:]}
    v = json.loads(p.stdout)
    root = v["problems"][0] if v["problems"] else {}
    return {"case": case, "after_s": round(after, 1), "headline": v["headline"],
            "root": {k: root.get(k) for k in ("kind", "group", "seq", "op", "culprits", "waiting", "step")},
            "where": {r: w["state"] for r, w in v["where"].items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--cases", default=CASES)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args()
    got = probe(a.ranks) if a.ranks > 1 else "ok"
    print(f"probe: {a.ranks} NCCL ranks on {os.popen('nvidia-smi -L').read().count('GPU ')} GPU(s): {got}", flush=True)
    rows = []
    if got == "ok":
        base = Path(tempfile.mkdtemp(prefix="nccl-hang-"))
        for case in a.cases.split(","):
            r = run_case(case, a.ranks, base)
            rows.append(r)
            print(json.dumps(r), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"probe": got, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
