"""A 3-worker TensorPipe RPC job over loopback for tests/e2e/test_rpc.py (one process per worker).

    python rpc_job.py RANK PORT OUT [RUN_DIR]

worker0 calls the others under ``rankscope.rpc.profile`` (and then under ``rankscope.profile(run=...)``
when RUN_DIR is given) and writes what it saw to OUT/result.json, OUT/table.txt, OUT/trace.json;
worker1 and worker2 only serve. The test starts worker1 with ``RANKSCOPE_RPC_CLOCK_SHIFT_NS`` set:
that is how its clock is shifted on purpose (rankscope's RPC clock on that worker reads wall time
plus the shift, for its timestamps and its events alike).
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed.rpc as rpc
from torch.distributed.rpc import rpc_sync as bound_rpc_sync  # bound at import: never rankscope's wrapper

N = 384  # a remote matmul of a few ms on this machine


def remote_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)


def fails(x: int) -> int:
    raise ValueError(f"remote failure {x}")


def calls_third(a: torch.Tensor) -> torch.Tensor:
    # torch's own function, looked up at call time: patched while this runs under a profiled call
    return rpc.rpc_sync("worker2", remote_mm, args=(a, a)) + 1


def calls_third_bound(a: torch.Tensor) -> torch.Tensor:
    # torch's own function bound before any profile: not captured, and it must still work while the
    # call is recorded (torch profiles it its own way, the legacy RPC profiling)
    return bound_rpc_sync("worker2", remote_mm, args=(a, a)) + 2


def calls_back(a: torch.Tensor) -> torch.Tensor:
    # worker0 runs a rankscope profile itself: its profiler is busy, it answers unprofiled
    return rpc.rpc_sync("worker0", remote_mm, args=(a, a))


def hide_rankscope() -> bool:
    """Make this worker look like one without rankscope's RPC support (an older rankscope)."""
    for name in [m for m in sys.modules if m.startswith("rankscope.collect.rpc")]:
        del sys.modules[name]
    sys.modules["rankscope.collect.rpc"] = None  # type: ignore[assignment]
    return True


def raised(call) -> list | None:
    """[type name, first two lines of the message] of what ``call()`` raised, None if it did not."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001
        return [type(exc).__name__, str(exc).splitlines()[:2]]
    return None


def caller(out: str, run_dir: str | None) -> None:
    import rankscope
    import rankscope.rpc as rr

    torch.manual_seed(0)
    a, b = torch.randn(N, N), torch.randn(N, N)
    res: dict = {"torch_fns": {n: getattr(rpc, n).__module__ + "." + getattr(rpc, n).__qualname__
                               for n in ("rpc_sync", "rpc_async", "remote")}, "patched_before": rr.patched()}
    # the plain torch behaviour of a remote exception, for comparison
    res["plain_exc"] = raised(lambda: rpc.rpc_sync("worker1", fails, args=(7,)))
    res["plain_remote_exc"] = raised(lambda: rpc.remote("worker1", fails, args=(8,)).to_here())
    rpc.rpc_sync("worker1", remote_mm, args=(a, b))  # warm up both sides unprofiled
    with rr.profile(record_shapes=True) as prof:
        res["patched_during"] = rr.patched()
        c = rpc.rpc_sync("worker1", remote_mm, args=(a, b))
        res["sync_ok"] = bool(torch.allclose(c, torch.mm(a, b)))
        fut = rpc.rpc_async("worker1", remote_mm, args=(a, b))
        res["async_ok"] = bool(torch.allclose(fut.wait(), torch.mm(a, b)))
        rref = rpc.remote("worker2", remote_mm, args=(a, b))
        res["remote_ok"] = bool(torch.allclose(rref.to_here(), torch.mm(a, b)))
        res["profiled_exc"] = raised(lambda: rpc.rpc_sync("worker1", fails, args=(7,)))
        res["profiled_remote_exc"] = raised(lambda: rpc.remote("worker1", fails, args=(8,)).to_here())
        back = rpc.rpc_sync("worker1", calls_back, args=(a,))
        res["busy_ok"] = bool(torch.allclose(back, torch.mm(a, a)))
        n = rpc.rpc_sync("worker1", calls_third, args=(a,))
        res["nested_ok"] = bool(torch.allclose(n, torch.mm(a, a) + 1))
        res["bound_ok"] = bool(torch.allclose(rpc.rpc_sync("worker1", calls_third_bound, args=(a,)), a @ a + 2))
    res["patched_after"] = rr.patched()
    res["torch_fns_after"] = {n: getattr(rpc, n).__module__ + "." + getattr(rpc, n).__qualname__
                              for n in ("rpc_sync", "rpc_async", "remote")}
    res["calls"], res["gaps"] = prof.calls, prof.gaps
    with open(os.path.join(out, "table.txt"), "w") as f:
        f.write(prof.table(sort_by="cpu_time_total", row_limit=60))
    prof.export_chrome_trace(os.path.join(out, "trace.json"))
    # a callee that cannot profile answers normally, and the caller notes the gap
    rpc.rpc_sync("worker2", hide_rankscope)
    with rr.profile(record_shapes=True) as prof2:
        d = rpc.rpc_sync("worker2", remote_mm, args=(a, b))
    res["gap_ok"], res["gap_calls"], res["gap_gaps"] = bool(torch.allclose(d, torch.mm(a, b))), prof2.calls, prof2.gaps
    if run_dir:
        with rankscope.profile(run=run_dir, ranks=[0]) as p:
            for _ in range(3):
                torch.mm(a, b)
                rpc.rpc_sync("worker1", remote_mm, args=(a, b))
                rpc.rpc_async("worker1", remote_mm, args=(a, b)).wait()
                p.step()
        res["patched_after_run"] = rr.patched()
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(res, f)


def main() -> None:
    rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    run_dir = sys.argv[4] if len(sys.argv) > 4 else None
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=60, init_method=f"tcp://127.0.0.1:{port}")
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=3, rpc_backend_options=opts)
    t0 = time.monotonic()
    if rank == 0:
        caller(out, run_dir)
    rpc.shutdown()
    print(f"worker{rank} done in {time.monotonic() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
