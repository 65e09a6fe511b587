"""A trainer and two parameter servers over TensorPipe (one process each), for tests/e2e/test_rpc.py.

    python rpc_selfprof_job.py RANK PORT OUT MODE CALLS

worker0 (the trainer) makes CALLS pairs of ``rpc_async`` calls, one to each server, inside
``rankscope.rpc.profile()`` (MODE ``trainer-plain``: inside a bare ``torch.profiler.profile()``
instead). worker1 runs a profiler of its own the whole time, started the way MODE says, with a loop of
its own steps (``ps_own_step`` spans around a matmul) on its main thread until the trainer is done;
worker2 only serves. Each worker writes OUT/worker<r>.json; worker1 also its own trace, OUT/own.json.

MODE: ``profiler`` (torch.profiler.profile), ``autograd`` (torch.autograd.profiler.profile),
``direct`` (torch.autograd.profiler._prepare_profiler / _enable_profiler, the private calls those
two make, with no Python flag set), ``ondemand`` (Kineto's on-demand trace, asked for over its IPC
fabric by :class:`StandInDynolog`; the test starts worker1 with ``KINETO_USE_DAEMON=1`` and
``KINETO_IPC_SOCKET_DIR``; the trainer then calls until the on-demand trace is written, CALLS at
most), ``trainer-plain`` (worker1 as in ``profiler``, the trainer under a bare torch.profiler).
"""
from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
import struct
import sys
import threading
import time
from typing import Any, Iterator

import torch
import torch.distributed.rpc as rpc

N = 64
DONE = threading.Event()  # set on worker1 by the trainer's last call
READY = threading.Event()  # set on worker1 once its own profiler runs
OUT = ""  # this worker's output folder
CALLED = threading.Event()  # set on worker1 by the first call it serves


class StandInDynolog(threading.Thread):
    """Stands in for the dynolog daemon, which cannot be installed here (a mock of the daemon only:
    Kineto's on-demand path is the real one). It answers Kineto's first request for an activities
    config made after worker1 served its first call (so that the trace covers calls), over Kineto's IPC
    fabric: datagrams of {size_t size; char type[32]} then the body, on
    unix sockets under ``KINETO_IPC_SOCKET_DIR`` (kineto: dynolog_headers/.../FabricManager.h,
    IpcFabricConfigClient.cpp)."""

    def __init__(self, config: str) -> None:
        super().__init__(daemon=True)
        self.config = config.encode()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(os.path.join(os.environ["KINETO_IPC_SOCKET_DIR"], "dynolog"))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()

    def run(self) -> None:
        sent = False
        while not self.stop.is_set():
            try:
                data, addr = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            kind = data[8:40].split(b"\0")[0]
            asks = kind == b"req" and struct.unpack("<i", data[40:44])[0] & 2  # an ACTIVITIES config
            if asks and not sent and CALLED.is_set():
                self.sock.sendto(struct.pack("<Q32s", len(self.config), b"req") + self.config, addr)
                sent = True
        self.sock.close()


def ondemand_trace() -> str | None:
    """worker1's on-demand trace once Kineto has written it (Kineto adds the pid to the name)."""
    for path in glob.glob(os.path.join(OUT, "ondemand_*.json")):
        try:
            with open(path) as f:
                json.load(f)
            return path
        except ValueError:  # still being written
            pass
    return None


def ondemand_written() -> bool:
    return ondemand_trace() is not None


def ps_work(a: torch.Tensor) -> torch.Tensor:
    CALLED.set()
    return torch.mm(a, a)


def finish() -> bool:
    DONE.set()
    return True


def ready() -> bool:
    return READY.is_set()


@contextlib.contextmanager
def own_profiler(mode: str, trace: str) -> Iterator[None]:
    """worker1's own profiler, on its main thread, saved to ``trace`` (Chrome JSON) when it stops."""
    from torch.autograd import ProfilerActivity, ProfilerConfig, ProfilerState
    from torch.autograd.profiler import _disable_profiler, _enable_profiler, _prepare_profiler

    if mode in ("profiler", "trainer-plain"):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
            yield
        p.export_chrome_trace(trace)
    elif mode == "autograd":
        with torch.autograd.profiler.profile() as p:
            yield
        p.export_chrome_trace(trace)
    elif mode == "direct":
        cfg = ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False,
                             torch._C._profiler._ExperimentalConfig())
        _prepare_profiler(cfg, {ProfilerActivity.CPU})
        _enable_profiler(cfg, {ProfilerActivity.CPU})
        try:
            yield
        finally:
            result = _disable_profiler()
        with open(trace, "w") as f:
            json.dump({"traceEvents": [{"name": e.name(), "ph": "X"} for e in result.events()]}, f)
    elif mode == "ondemand":
        dyno = StandInDynolog(f"ACTIVITIES_LOG_FILE={os.path.join(OUT, 'ondemand.json')}\n"
                              "ACTIVITIES_DURATION_MSECS=2000\nACTIVITIES_WARMUP_PERIOD_SECS=0\nPROFILE_START_TIME=0\n")
        dyno.start()
        try:
            yield
        finally:
            dyno.stop.set()
            dyno.join()
        path = ondemand_trace()
        if path is not None:
            os.replace(path, trace)
        else:  # never written: the test sees no events of its own
            with open(trace, "w") as f:
                json.dump({"traceEvents": []}, f)
    else:
        raise SystemExit(f"unknown mode {mode}")


def own_counts(trace: str) -> dict[str, int]:
    with open(trace) as f:
        ev = json.load(f)["traceEvents"]
    return {n: sum(e.get("name") == n for e in ev) for n in ("ps_own_step", "aten::mm", "rpc remote#ps_work")}


def server_with_own_profiler(mode: str, out: str) -> dict[str, Any]:
    trace = os.path.join(out, "own.json")
    x = torch.randn(N, N)
    steps = 0
    with own_profiler(mode, trace):
        READY.set()
        while not DONE.is_set():
            with torch.profiler.record_function("ps_own_step"):
                torch.mm(x, x)
            steps += 1
            DONE.wait(0.002)
    return {"steps": steps, "own": own_counts(trace)}


def summary(prof: Any) -> dict[str, Any]:
    """Per destination: calls (``work``: those of ps_work), their statuses and gaps, and the remote
    aten::mm events they carry."""
    out: dict[str, Any] = {}
    for c in prof.calls:
        d = out.setdefault(c["dst"], {"calls": 0, "work": 0, "status": {}, "gaps": [], "mm": 0, "events": 0})
        d["calls"] += 1
        d["work"] += c["fn"] == "ps_work"
        d["status"][c["status"]] = d["status"].get(c["status"], 0) + 1
        if c.get("gap") and c["gap"] not in d["gaps"]:
            d["gaps"].append(c["gap"])
        d["events"] += len(c.get("events") or ())
        d["mm"] += sum(e["name"] == "aten::mm" for e in c.get("events") or ())
    return {"by_dst": out, "gaps": prof.gaps}


def trainer(mode: str, calls: int) -> dict[str, Any]:
    import rankscope.rpc as rr

    while not rpc.rpc_sync("worker1", ready):
        time.sleep(0.01)
    a = torch.randn(N, N)
    rpc.rpc_sync("worker2", ps_work, args=(a,))  # warm up unprofiled
    ctx = torch.profiler.profile() if mode == "trainer-plain" else rr.profile()
    ok = True
    with ctx as prof:
        for i in range(calls):
            f1 = rpc.rpc_async("worker1", ps_work, args=(a,))
            f2 = rpc.rpc_async("worker2", ps_work, args=(a,))
            ok &= bool(torch.allclose(f1.wait(), a @ a)) and bool(torch.allclose(f2.wait(), a @ a))
            if mode == "ondemand":  # calls until worker1's on-demand trace is written (CALLS: a hang guard)
                if i % 10 == 9 and rpc.rpc_sync("worker1", ondemand_written):
                    break
                time.sleep(0.02)
    rpc.rpc_sync("worker1", finish)
    return {"results_ok": ok, **(summary(prof) if mode != "trainer-plain" else {})}


def main() -> None:
    global OUT
    rank, port, out, mode, calls = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    OUT = out
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=120,
                                           init_method=f"tcp://127.0.0.1:{port}")
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=3, rpc_backend_options=opts)
    res: dict[str, Any] = {}
    if rank == 0:
        res = trainer(mode, calls)
    elif rank == 1:
        res = server_with_own_profiler(mode, out)
    rpc.shutdown()
    with open(os.path.join(out, f"worker{rank}.json"), "w") as f:
        json.dump(res, f)
    print(f"worker{rank} done", flush=True)


if __name__ == "__main__":
    main()
