"""The demo's --rotate-cpus: every thread of a rank moves to the chosen CPU (in a child process, so
this test process keeps its own CPUs)."""
from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, os, threading, time
from rankscope.demo.train import pin_process
stop = threading.Event()
t = threading.Thread(target=stop.wait); t.start()       # a second thread, like gloo's
cpu = max(os.sched_getaffinity(0))
pin_process(cpu)
seen = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
stop.set(); t.join()
print(json.dumps({"cpu": cpu, "seen": seen}))
"""


def test_pin_process_moves_every_thread():
    """Linux only, as the demo's --rotate-cpus (sched_setaffinity, /proc/self/task): no skip elsewhere."""
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=120)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(got["seen"]) >= 2  # the main thread and the extra one (torch may start more)
    assert all(cpus == [got["cpu"]] for cpus in got["seen"].values()), got


def test_launch_command_parses_in_train_with_rotate_cpus(monkeypatch, tmp_path):
    """launch() and train.py agree on the flags: the command launch() builds parses with train's own
    parser, and --rotate-cpus reaches it only when asked. subprocess.run is replaced (no job started:
    the real job runs in tests/e2e/test_demo.py)."""
    from rankscope.demo import launch as mod
    from rankscope.demo.train import parse_args

    calls = []

    class Done:
        returncode = 0

    monkeypatch.setattr(mod.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or Done())
    for rotate in (False, True):
        mod.launch(tmp_path / str(rotate), ranks=2, steps=3, warmup=1, slow_rank=1, slow_kind="data",
                   slowdown=0.5, rotate_cpus=rotate)
    parsed = [parse_args(c[c.index("rankscope.demo.train") + 1:]) for c in calls]
    assert [a.rotate_cpus for a in parsed] == [False, True]
    assert all((a.steps, a.warmup, a.slow_rank, a.slow_kind, a.slowdown) == (3, 1, 1, "data", 0.5) for a in parsed)
