"""rankscope.collect.settle: the wait before a profiler stop, on real threads named as gloo's workers.

The heap corruption it prevents (torch 2.13, gloo, DDP) is measured in docs/collect.md; here: what the wait reads
(a thread's name and state in /proc), that it ends when the workers block, that it is bounded when one keeps running,
and which of torch's schedule steps stop the trace."""
from __future__ import annotations

import ctypes
import hashlib
import threading
import time

import torch

from rankscope.collect import settle

NAME = "rs_test_gloo"  # not gloo's own name: gloo threads of other tests in this process must not count
OURS = frozenset({NAME})
_BIG = bytes(32 << 20)  # hashing it takes tens of ms, with the GIL released


def _named(name: str) -> None:
    libc = ctypes.CDLL(None)
    libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME: what /proc/self/task/<tid>/stat shows


def test_waits_for_a_runnable_worker_and_is_bounded():
    spin, stop, named = threading.Event(), threading.Event(), threading.Event()

    def worker() -> None:
        _named(NAME)
        named.set()
        while not stop.is_set():
            if spin.is_set():
                hashlib.sha256(_BIG)  # runnable, without the GIL: on a CPU or waiting for one
            else:
                stop.wait(0.01)  # blocked

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    try:
        assert named.wait(10)
        waited, ok = settle.settle(max_wait_s=5.0, names=OURS)  # blocked most of the time: settles on one of its waits
        assert ok and waited < 5.0
        spin.set()
        seen, deadline = 0, time.monotonic() + 30  # it leaves its last 10 ms wait, then hashes without blocking
        while not seen and time.monotonic() < deadline:
            seen = settle.runnable_workers(OURS)
            time.sleep(0.001)
        assert seen == 1  # a hashing thread is seen runnable
        assert settle.runnable_workers(frozenset({"no_such_thread"})) == 0
    finally:
        stop.set()
        t.join(10)


def test_a_worker_that_never_blocks_costs_at_most_the_bound():
    stop, named = threading.Event(), threading.Event()

    def worker() -> None:
        _named(NAME)
        named.set()
        while not stop.is_set():
            hashlib.sha256(_BIG)  # runnable throughout, but for a moment between two calls

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    try:
        assert named.wait(10)
        s = settle.Settler()
        col = type("C", (), {"extra": {}})()
        outcomes = [settle.settle(max_wait_s=0.05, names=OURS) for _ in range(20)]
        # a look that falls between two calls may see it blocked for the GIL (then the wait ends at once); every
        # wait that ran out stopped at the bound
        assert any(not ok for _, ok in outcomes)
        assert all(ok or w >= 0.05 for w, ok in outcomes)
        s(None, col, stopping=True)
        got = col.extra["stop_settle"]
        assert got["stops"] == 1 and got["max_wait_ms"] == settle.MAX_WAIT_S * 1e3
    finally:
        stop.set()
        t.join(10)


def test_the_steps_that_stop_torchs_trace():
    p = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=2))
    p.start()
    stops = []
    for _ in range(9):
        stops.append(settle.stops_next(p))
        p.step()
    p.stop()
    assert stops == [False, False, False, True, False, False, False, True, False]  # the RECORD_AND_SAVE steps
    assert settle.stops_next(object()) is False  # another backend's profiler: no wait
