"""rankscope.collect.comms.timed_pg without a multi-rank job: option parsing, backend-name mapping, and a
recorder that fails on an entry (the collective must still run). The process-group parts run in a
subprocess (a gloo world of one rank): init_process_group is process-global state."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAILING = r'''
import logging, os, torch, torch.distributed as dist
from rankscope.collect.comms import timed_pg as T
logging.basicConfig(level=logging.WARNING)
dist.init_process_group(T.timed_backend("gloo"), init_method="file://" + os.environ["STORE"], rank=0, world_size=1)
def broken(self, method, args):
    raise ZeroDivisionError("recorder bug")
T.TimedBackend._entry = broken
t = torch.ones(4)
for _ in range(3):
    dist.all_reduce(t)
print("RESULT", t.tolist(), len(T.RING.entries))
dist.destroy_process_group()
'''


def test_a_failing_recorder_never_breaks_the_collective(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-c", FAILING], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "STORE": str(tmp_path / "store")})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "RESULT [1.0, 1.0, 1.0, 1.0] 0" in p.stdout, p.stdout[-1000:] + p.stderr[-2000:]
    # one warning line for the whole run, not one per collective
    assert p.stderr.count("the timed collective recorder failed on an entry") == 1, p.stderr[-2000:]


def test_options_from_the_environment(monkeypatch) -> None:
    from rankscope.collect.comms.timed_setup import from_env

    monkeypatch.delenv("RANKSCOPE_COMMS_TIMED", raising=False)
    assert from_env() is None
    monkeypatch.setenv("RANKSCOPE_COMMS_TIMED", "0")
    assert from_env() is None
    monkeypatch.setenv("RANKSCOPE_COMMS_TIMED", "1")
    assert from_env() == {"ring": 2000, "sample_every": 1, "stack": False, "poll": False}
    monkeypatch.setenv("RANKSCOPE_COMMS_TIMED", "sample=16, ring=500,stack=1,poll=1")
    assert from_env() == {"ring": 500, "sample_every": 16, "stack": True, "poll": True}


MAPPING = r'''
from rankscope.collect.comms.timed_setup import mapped
for b in ("gloo", "GLOO", "cpu:gloo,cuda:nccl", "cpu:gloo,cuda:gloo", "rankscope_gloo", "mpi"):
    print("MAP", b, mapped(b, 100, 1, False))
'''


def test_backend_names_map_to_their_timed_wrappers() -> None:
    """(In a subprocess: registering a backend changes torch's process-wide default device map.)"""
    p = subprocess.run([sys.executable, "-c", MAPPING], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr[-2000:]
    got = dict(line.split()[1:] for line in p.stdout.splitlines() if line.startswith("MAP "))
    assert got == {"gloo": "rankscope_gloo", "GLOO": "rankscope_gloo",
                   # two backends in one group: torch would keep only the first wrapper (the group is that
                   # ProcessGroup), so NCCL would be lost: left as it is, with a warning
                   "cpu:gloo,cuda:nccl": "cpu:gloo,cuda:nccl", "cpu:gloo,cuda:gloo": "cpu:rankscope_gloo,cuda:rankscope_gloo",
                   "rankscope_gloo": "rankscope_gloo", "mpi": "mpi"}  # mpi: no wrapper, left as it is
    assert "wraps one backend per group" in p.stderr


def test_watchdog_clock_of_a_p2p_op_starts_at_its_wait() -> None:
    """gloo's send / recv complete in the caller's wait(): an isend nobody waits for yet is not pending
    (no watchdog dump), one being waited for is pending from that wait; every other entry from its creation."""
    from rankscope.collect.comms import _pending_since

    assert _pending_since({"time_created_ns": 5, "wait_started_ns": None}) is None
    assert _pending_since({"time_created_ns": 5, "wait_started_ns": 9}) == 9
    assert _pending_since({"time_created_ns": 5}) == 5  # a collective, or Flight Recorder's entry


PAUSED = r'''
import os, torch, torch.distributed as dist
from rankscope.collect.comms import timed_pg as T
dist.init_process_group(T.timed_backend("gloo"), init_method="file://" + os.environ["STORE"], rank=0, world_size=1)
t = torch.ones(4)
dist.all_reduce(t)
assert T.set_recording(False) is True
dist.all_reduce(t); dist.broadcast(t, 0)
assert T.set_recording(True) is False
dist.all_reduce(t)
print("RESULT", [(e["profiling_name"], e["collective_seq_id"]) for e in T.entries()], dict(T.RING.counts))
dist.destroy_process_group()
'''


def test_paused_recording_passes_calls_through_counted_and_numbered(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-c", PAUSED], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "STORE": str(tmp_path / "store")})
    assert p.returncode == 0, p.stderr[-2000:]
    # no entries while paused, but the sequence numbers went on (4: after two paused calls)
    assert "RESULT [('gloo:all_reduce', 1), ('gloo:all_reduce', 4)] {'all_reduce': 3, 'broadcast': 1}" in p.stdout, \
        p.stdout[-1000:] + p.stderr[-2000:]


GPU_EVENTS = r'''
import logging, os, time, torch, torch.distributed as dist
from rankscope.collect.comms import timed_pg as T
from rankscope.collect.comms import timed_gpu as G
logging.basicConfig(level=logging.WARNING)
EVS = []
class Ev:  # stands in for torch.cuda.Event(enable_timing=True): no GPU on this machine
    def __init__(self):
        self.done, self.at = False, None
        EVS.append(self)
    def record(self):
        self.at = time.perf_counter() * 1000
    def query(self):
        return self.done
    def elapsed_time(self, other):
        return other.at - self.at
G.EVENT[0] = Ev
dist.init_process_group(T.timed_backend("gloo"), init_method="file://" + os.environ["STORE"], rank=0, world_size=1)
dist.group.WORLD.gpu = True  # as for NCCL: completion from the events, not from the future
def settle(n):
    for _ in range(200):
        if len(G.GPU.pending) == n:
            return
        time.sleep(0.01)
G.POLL_S = 3600.0  # the test polls by hand
t = torch.ones(4)
dist.all_reduce(t)
settle(1)
e = T.RING.entries[-1]
seen = [(e["state"], e["time_discovered_started_ns"] is None, e["retired"])]
G.GPU.poll()
seen.append((e["state"], e["time_discovered_started_ns"] is None, e["retired"]))
EVS[0].done = True
G.GPU.poll()
seen.append((e["state"], e["time_discovered_started_ns"] is None, e["retired"]))
time.sleep(0.01)
EVS[1].done = True
G.GPU.poll()
seen.append((e["state"], e["time_discovered_started_ns"] is None, e["retired"]))
print("STATES", seen)
print("DURATION", e["duration_ms"] > 0, e["time_discovered_completed_ns"] >= e["time_discovered_started_ns"] >= e["time_created_ns"])
# a snapshot (dumps, the watchdog, window files) looks at the events itself
dist.all_reduce(t)
settle(1)
EVS[2].done = EVS[3].done = True
print("SNAPSHOT", T.entries()[-1]["state"], len(G.GPU.pending))
# bounded: a GPU that never finishes cannot grow memory
G.MAX_PENDING = 3
for _ in range(5):
    dist.all_reduce(t)
settle(3)
print("BOUNDED", len(G.GPU.pending), G.GPU.given_up, [x["timed"] for x in list(T.RING.entries)[-5:]])
# an event that cannot be made: the collective runs, untimed, one warning
def broken():
    raise RuntimeError("no CUDA")
G.EVENT[0] = broken
for _ in range(3):
    dist.all_reduce(t)
print("RESULT", t.tolist(), T.RING.entries[-1]["timed"], T.RING.entries[-1]["state"])
dist.destroy_process_group()
'''


def test_gpu_backends_are_timed_by_events_polled_off_the_training_thread(tmp_path: Path) -> None:
    """The NCCL path of the timed recorder (its Work's future completes at enqueue, so completion must come
    from CUDA events). Mocked: no GPU can run here, so a fake event stands in for torch.cuda.Event and a gloo
    world of one is told it is a GPU backend; the real run is tests/e2e/test_comms_gpu.py (on a GPU only)."""
    p = subprocess.run([sys.executable, "-c", GPU_EVENTS], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "STORE": str(tmp_path / "store")})
    assert p.returncode == 0, p.stderr[-2000:]
    out = p.stdout
    # scheduled until the start event completes, started until the end event does, then completed
    assert ("STATES [('scheduled', True, False), ('scheduled', True, False), ('started', False, False), "
            "('completed', False, True)]") in out, out + p.stderr[-2000:]
    assert "DURATION True True" in out, out
    assert "SNAPSHOT completed 0" in out, out
    # 5 pending with room for 3: the 2 oldest given up and marked untimed, the newest 3 still timed
    assert "BOUNDED 3 2 [False, False, True, True, True]" in out, out
    assert "RESULT [1.0, 1.0, 1.0, 1.0] False scheduled" in out, out
    assert p.stderr.count("timing a collective with CUDA events failed") == 1, p.stderr[-2000:]
