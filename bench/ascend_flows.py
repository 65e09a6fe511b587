"""Reading a flow-heavy torch_npu trace_view.json: this tree against another, side by side (issue 25).

torch_npu writes a ``torch_to_npu`` flow ("s" + "f") for every task. rankscope reads them into launch links
(``model/readers/ascend/flows.py``). This bench writes a trace_view.json of N tasks, each launched by one torch op and
linked by one flow, then reads it to the events table (``torch_npu.read_trace_view`` + ``tables.build``) with each
tree in turn, in a fresh process each time, interleaved. It reports the median wall time and the peak RSS.

    .venv/bin/python bench/ascend_flows.py --other /path/to/older/checkout --tasks 300000 --repeats 3
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READ = """
import resource, sys, time, pathlib
sys.path.insert(0, sys.argv[1])
from rankscope.model.readers.ascend import torch_npu
from rankscope.model import tables
t0 = time.perf_counter()
tabs, _ = tables.build(torch_npu.read_trace_view(pathlib.Path(sys.argv[2])))
print(tabs["events"].num_rows, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def write(path: Path, n: int, queue: bool = False) -> None:
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},
            {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "Ascend Hardware"}},
            {"ph": "M", "name": "process_labels", "pid": 2, "tid": 0, "args": {"labels": "NPU 0"}}]
    t = 1735689600000000
    with open(path, "w") as f:
        f.write("[" + ",".join(json.dumps(e) for e in meta))
        for i in range(n):
            ts, dev = f"{t + i * 10}.{i % 1000:03d}", f"{t + i * 10 + 5}.{i % 1000:03d}"
            f.write(f',{{"ph":"X","name":"aten::op{i % 50}","pid":1,"tid":1,"ts":"{ts}","dur":3.0,"cat":"cpu_op",'
                    f'"args":{{"Sequence number":{i}}}}}'
                    f',{{"ph":"X","name":"Kernel{i % 50}","pid":2,"tid":2,"ts":"{dev}","dur":5.0,'
                    f'"args":{{"Task Type":"AI_CORE","Stream Id":2}}}}'
                    f',{{"ph":"s","bp":"e","name":"torch_to_npu","id":{i},"pid":1,"tid":1,"ts":"{ts}",'
                    f'"cat":"async_npu"}}'
                    f',{{"ph":"f","bp":"e","name":"torch_to_npu","id":{i},"pid":2,"tid":2,"ts":"{dev}",'
                    f'"cat":"async_npu"}}')
            if queue:  # torch_npu's task queue: an Enqueue in the op, a Dequeue on thread 3, their flow
                enq, deq = f"{t + i * 10 + 1}.{i % 1000:03d}", f"{t + i * 10 + 2}.{i % 1000:03d}"
                f.write(f',{{"ph":"X","name":"Enqueue","pid":1,"tid":1,"ts":"{enq}","dur":1.0,"cat":"enqueue"}}'
                        f',{{"ph":"X","name":"Dequeue@op{i % 50}","pid":1,"tid":3,"ts":"{deq}","dur":2.0,'
                        f'"cat":"dequeue"}}'
                        f',{{"ph":"s","bp":"e","name":"enqueue_to_dequeue","id":{i},"pid":1,"tid":1,"ts":"{enq}",'
                        f'"cat":"async_task_queue"}}'
                        f',{{"ph":"f","bp":"e","name":"enqueue_to_dequeue","id":{i},"pid":1,"tid":3,"ts":"{deq}",'
                        f'"cat":"async_task_queue"}}')
        f.write("]")


def one(tree: Path, trace: Path) -> tuple[int, float, int]:
    out = subprocess.run([sys.executable, "-c", READ, str(tree), str(trace)], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(tree)})
    rows, secs, mb = out.stdout.split()
    return int(rows), float(secs), int(mb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--other", required=True,
                    help="another checkout of rankscope (e.g. a git worktree at an older commit)")
    ap.add_argument("--tasks", type=int, default=300_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--task-queue", action="store_true",
                    help="each op also enqueues its work for a second thread (torch_npu's task queue)")
    ap.add_argument("--out", default="/tmp/rankscope-bench-ascend-flows")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    trace = out / "trace_view.json"
    write(trace, args.tasks, args.task_queue)
    trees = {"this": ROOT, "other": Path(args.other).resolve()}
    got: dict[str, list[tuple[int, float, int]]] = {k: [] for k in trees}
    for i in range(args.repeats):
        for name in (("this", "other") if i % 2 == 0 else ("other", "this")):
            got[name].append(one(trees[name], trace))
            print(name, got[name][-1], f"load {os.getloadavg()[0]:.1f}", flush=True)
    med = {k: (statistics.median(s for _, s, _ in v), max(m for _, _, m in v)) for k, v in got.items()}
    print(f"\n{args.tasks} tasks{' with a task queue' if args.task_queue else ''}, {trace.stat().st_size / 1e6:.0f} MB, "
          f"{args.repeats} interleaved repeats, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print("| tree | events | median s | peak RSS MB |\n|---|---|---|---|")
    for k, (s, m) in med.items():
        print(f"| {k} ({trees[k]}) | {got[k][0][0]} | {s:.2f} | {m} |")
    print(f"time ratio this / other: {med['this'][0] / med['other'][0]:.2f}")


if __name__ == "__main__":
    main()
