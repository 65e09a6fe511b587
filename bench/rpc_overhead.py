"""Cost of rankscope's RPC wrappers (issue 15): with no profile active, and per profiled call.

Two processes over loopback (TensorPipe): worker0 times, worker1 serves. Three measurements, each as
interleaved blocks (A, B, A, B, ...) so that drifts in machine speed hit both sides alike, reported as
medians:

1. dispatch: the wrapper's own cost with nothing recording. ``rankscope.rpc.rpc_async`` calling a
   no-op in place of torch's function vs calling that no-op directly (ns per call): the flag check.
2. idle: a real ``rpc_sync`` of a tiny function through torch's own function vs through rankscope's
   wrapper with nothing recording (µs per call).
3. profiled: the same call plainly vs under ``rankscope.rpc.profile(local=False)`` (the callee runs it
   under its thread-local recorder and returns its events): the added latency per call, for a tiny
   function and for a 256x256 matmul.
4. recorders (``--recorders``, one process, no RPC): what recording one call costs on a worker thread
   with the callee's recorder (``threadrec.ThreadRecorder``: torch's thread-local profiler) vs a
   ``torch.profiler.profile`` session per call (the callee before issue 23), events read back included.

    PYTHONPATH=. .venv/bin/python bench/rpc_overhead.py --blocks 10 --calls 200
    PYTHONPATH=. .venv/bin/python bench/rpc_overhead.py --recorders --blocks 10 --calls 100
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed.rpc as rpc


def tiny(x: int) -> int:
    return x + 1


def mm(a: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, a)


def _per_call(fn, n: int) -> float:
    t0 = time.perf_counter_ns()
    for i in range(n):
        fn(i)
    return (time.perf_counter_ns() - t0) / n


def dispatch(blocks: int, n: int) -> tuple[float, float]:
    from rankscope.collect.rpc import state

    def noop(to, func, args=None, kwargs=None, timeout=0.0):
        return None

    saved = state.TORCH["rpc_async"]
    state.TORCH["rpc_async"] = noop
    try:
        bare, wrapped = [], []
        for _ in range(blocks):
            bare.append(_per_call(lambda i: noop("worker1", tiny, (i,)), n))
            wrapped.append(_per_call(lambda i: state.rpc_async("worker1", tiny, (i,)), n))
    finally:
        state.TORCH["rpc_async"] = saved
    return statistics.median(bare), statistics.median(wrapped)


def paired(blocks: int, n: int, a, b) -> tuple[float, float]:
    xs, ys = [], []
    for _ in range(blocks):
        xs.append(a(n))
        ys.append(b(n))
    return statistics.median(xs) / 1e3, statistics.median(ys) / 1e3


def caller(blocks: int, calls: int) -> None:
    import rankscope.rpc as rr
    from rankscope.collect.rpc import state

    torch_sync = state.TORCH["rpc_sync"]
    a = torch.randn(256, 256)
    for _ in range(50):  # warm-up: connections
        torch_sync("worker1", tiny, (1,))
    with rr.profile(local=False):
        rr.rpc_sync("worker1", tiny, (1,))
    bare, wrapped = dispatch(blocks, calls * 50)
    print(f"dispatch, nothing recording: bare {bare:.0f} ns/call, wrapper {wrapped:.0f} ns/call, "
          f"added {wrapped - bare:.0f} ns")
    plain = lambda n: _per_call(lambda i: torch_sync("worker1", tiny, (i,)), n)  # noqa: E731
    wrap = lambda n: _per_call(lambda i: rr.rpc_sync("worker1", tiny, (i,)), n)  # noqa: E731
    p, w = paired(blocks, calls, plain, wrap)
    print(f"idle rpc_sync(tiny): torch {p:.1f} µs/call, rankscope wrapper {w:.1f} µs/call")

    def profiled(fn, args):
        def run(n: int) -> float:
            with rr.profile(local=False):
                return _per_call(lambda i: rr.rpc_sync("worker1", fn, args), n)
        return run

    for label, fn, args, n in (("tiny", tiny, (1,), calls), ("mm 256x256", mm, (a,), max(calls // 4, 10))):
        p, w = paired(blocks, n, lambda k, fn=fn, args=args: _per_call(lambda i: torch_sync("worker1", fn, args), k),
                      profiled(fn, args))
        print(f"profiled rpc_sync({label}): plain {p:.1f} µs/call, profiled {w:.1f} µs/call, added {w - p:.1f} µs")


def recorders(blocks: int, calls: int) -> None:
    """Measurement 4, on a thread of its own (as an RPC thread runs a call)."""
    import threading

    from torch.profiler import ProfilerActivity, profile, record_function

    from rankscope.collect.rpc.threadrec import ThreadRecorder

    a = torch.randn(256, 256)

    def thread_rec(fn, args) -> None:
        rec = ThreadRecorder({"record_shapes": True})
        rec.start()
        with record_function("rpc remote#f"):
            fn(*args)
        rec.stop()
        rec.events("rpc remote#f")

    def kineto(fn, args) -> None:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
            with record_function("rpc remote#f"):
                fn(*args)
        list(p.profiler.kineto_results.events())

    def per_call(rec, fn, args, n: int) -> float:
        out: list[float] = []

        def body() -> None:
            t0 = time.perf_counter_ns()
            for _ in range(n):
                rec(fn, args) if rec else fn(*args)
            out.append((time.perf_counter_ns() - t0) / n)
        t = threading.Thread(target=body)
        t.start()
        t.join()
        return out[0]

    for label, fn, args in (("tiny", tiny, (1,)), ("mm 256x256", mm, (a,))):
        per_call(kineto, fn, args, 5)  # first use of each, outside the blocks
        per_call(thread_rec, fn, args, 5)
        bare, tr, kt = [], [], []
        for _ in range(blocks):
            bare.append(per_call(None, fn, args, calls))
            tr.append(per_call(thread_rec, fn, args, calls))
            kt.append(per_call(kineto, fn, args, calls))
        b, t, k = (statistics.median(x) / 1e3 for x in (bare, tr, kt))
        print(f"recording {label}: bare {b:.1f} µs/call, thread recorder +{t - b:.1f} µs, "
              f"torch.profiler session +{k - b:.1f} µs")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--recorders", action="store_true", help="measurement 4 only (one process, no RPC)")
    args = ap.parse_args()
    if args.recorders:
        recorders(args.blocks, args.calls)
        return
    if args.rank == 0 and not args.port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = s.getsockname()[1]
        peer = subprocess.Popen([sys.executable, __file__, "--rank", "1", "--port", str(args.port)],
                                env={**os.environ, "OMP_NUM_THREADS": "1"}, stderr=subprocess.DEVNULL)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, init_method=f"tcp://127.0.0.1:{args.port}")
    rpc.init_rpc(f"worker{args.rank}", rank=args.rank, world_size=2, rpc_backend_options=opts)
    if args.rank == 0:
        caller(args.blocks, args.calls)
    rpc.shutdown()
    if args.rank == 0:
        peer.wait()


if __name__ == "__main__":
    main()
