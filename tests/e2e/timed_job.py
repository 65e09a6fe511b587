"""A gloo job for tests/e2e/test_comms_timed.py (launched with torchrun).

    timed_job.py OUT MODE      MODE: fr | timed | hang

``fr``: plain gloo with Flight Recorder (the oracle for the counts); ``timed``: rankscope's timed backend
(ring and sampling from RANKSCOPE_TEST_RING / RANKSCOPE_TEST_SAMPLE); both run the same workload (DDP's
construction and 3 training steps, 2 FSDP2 steps, then the user's collectives in the list, tensor, coalesced
and functional APIs, and point-to-point ops) and write
OUT/rank<r>.json with the entries' ops and what a backend error raised. ``hang``: a plain
``init_process_group("gloo")`` script, run under ``-m rankscope.collect.comms.run --timed``; rank 1 skips
an all_reduce and every rank blocks.
"""
from __future__ import annotations

import datetime
import json
import os
import pickle
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch.distributed.fsdp import fully_shard


def workload(rank: int) -> None:
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 16))
    for _ in range(3):
        model(torch.randn(4, 16)).sum().backward()  # DDP's gradient all-reduce, issued from C++
    fsdp = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16))
    for layer in (fsdp[0], fsdp[2], fsdp):
        fully_shard(layer)  # FSDP2: all-gathers and gradient reductions issued by FSDP itself
    for _ in range(2):
        fsdp(torch.randn(4, 16)).sum().backward()
    t = torch.ones(100)
    dist.all_reduce(t)
    dist.broadcast(t, 0)
    dist.all_gather([torch.zeros(100) for _ in range(dist.get_world_size())], t)
    n = dist.get_world_size()
    dist.all_gather_into_tensor(torch.zeros(100 * n), t)  # the tensor API (group.all_gather_single)
    dist.reduce_scatter_tensor(torch.zeros(100), torch.ones(100 * n))
    dist.all_to_all_single(torch.zeros(100), torch.ones(100))
    with dist._coalescing_manager(async_ops=False):
        dist.all_reduce(t)
        dist.all_reduce(t.clone())
    (fc.all_gather_tensor(t, 0, dist.group.WORLD) + 0).sum()  # functional collectives (DTensor, compile)
    (fc.reduce_scatter_tensor(torch.ones(100 * n), "sum", 0, dist.group.WORLD) + 0).sum()
    dist.barrier()
    # point-to-point: blocking, isend / irecv then wait(), recv from any source
    if rank == 0:
        dist.send(torch.ones(8), 1)
        dist.isend(torch.ones(4), 1).wait()
        dist.recv(torch.zeros(2))  # from any source: rank 1
    elif rank == 1:
        dist.recv(torch.zeros(8), 0)
        w = dist.irecv(torch.zeros(4), 0)
        w.wait()
        assert w.is_completed() and w.is_success()  # gloo's recv completes in wait(); asked after it
        dist.send(torch.ones(2), 0)


def error_of(pg: dist.ProcessGroup) -> list[str]:
    """What the backend raises for an all_reduce of two tensors of different sizes."""
    try:
        pg.allreduce([torch.ones(2), torch.ones(3)]).wait()
    except Exception as exc:  # noqa: BLE001
        return [type(exc).__name__, str(exc).splitlines()[0][:200]]
    return []


def main(out: str, mode: str) -> None:
    os.makedirs(out, exist_ok=True)
    timeout = datetime.timedelta(seconds=60)
    if mode == "fr":
        os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
        dist.init_process_group("gloo", timeout=timeout)
    elif mode == "timed":
        from rankscope.collect import comms

        name = comms.timed_backend("gloo", ring=int(os.environ.get("RANKSCOPE_TEST_RING", "2000")),
                                   sample_every=int(os.environ.get("RANKSCOPE_TEST_SAMPLE", "1")),
                                   stack=os.environ.get("RANKSCOPE_TEST_STACK") == "1",
                                   poll=os.environ.get("RANKSCOPE_TEST_POLL") == "1")
        dist.init_process_group(name, timeout=timeout)
    else:
        dist.init_process_group("gloo", timeout=timeout)  # comms_run --timed swaps in the wrapper
    rank = dist.get_rank()
    if mode == "hang":
        t = torch.ones(100)
        dist.all_reduce(t)
        print(f"READY {rank} {os.getpid()}", flush=True)
        if rank != 1:
            dist.all_reduce(t)  # rank 1 skips it: everyone blocks from here on
        dist.all_gather([torch.zeros(100) for _ in range(dist.get_world_size())], t)
        return
    workload(rank)
    err = error_of(dist.group.WORLD)
    time.sleep(0.3)  # completion callbacks of the last calls
    if mode == "fr":
        import torch._C._distributed_c10d as c10d

        entries = pickle.loads(c10d._dump_fr_trace(True, False, False))["entries"]
        extra = {}
    else:
        from rankscope.collect.comms import timed_pg

        entries = timed_pg.entries()
        extra = {"counts": dict(timed_pg.RING.counts), "timed_n": timed_pg.RING.timed,
                 "backend": type(dist.group.WORLD).__name__}
        from rankscope.collect import comms

        comms.Recorder(out).dump("end")  # fr_rank_<r>: what `rankscope hang` and torchfrtrace read
    rows = [{"op": e["profiling_name"], "seq": e["collective_seq_id"], "p2p_seq": e["p2p_seq_id"], "p2p": e["is_p2p"],
             "pg": list(e["process_group"]), "state": e["state"], "record_id": e["record_id"],
             "created": e["time_created_ns"], "completed": e["time_discovered_completed_ns"],
             "sizes": e["input_sizes"], "timed": e.get("timed"), "peer": e.get("peer"),
             "frame_files": sorted({str(f["filename"]).rsplit("/", 1)[-1] for f in e.get("frames") or []})}
            for e in entries]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "entries": rows, "error": err, **extra}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
