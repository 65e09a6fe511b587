"""GPU idle gaps explained one by one (analysis/gpu/gaps.py, gapcause.py), each cause on a tiny hand-built
trace (times in µs as Kineto writes them; expected values worked out by hand in the comments). The same
rules on real H100 traces with known causes (a 2-rank DDP job on gloo whose rank 1 sleeps in its Dataset or runs
a host loop): tests/unit/test_gpu_gloo_run.py::test_gpu_idle_gaps_say_who_waited_for_whom."""
from __future__ import annotations

from typing import Any

import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import write_trace, x

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def kern(name: str, ts: float, dur: float, corr: int, stream: int = 7, **args: Any) -> dict[str, Any]:
    return x(name, ts, dur, "kernel", tid=stream, stream=stream, correlation=corr, device=0, **args)


def launch(ts: float, corr: int, dur: float = 1, name: str = "cudaLaunchKernel") -> dict[str, Any]:
    return x(name, ts, dur, "cuda_runtime", correlation=corr)


def gaps(tmp_path, events, rank=0, world=1, names=("gpu_gaps",)):
    write_trace(tmp_path / f"r{rank}.json", events, rank=rank, world=world, backend="nccl")
    res = run_all(load_run(tmp_path, jobs=1), names=list(names))["gpu_gaps"]
    assert res.skipped is None, res.skipped
    return res


def one(res, stream=7):
    (g,) = res.tables["gaps"].filter(stream=stream).to_dicts()
    return g


def test_late_launch_after_python_work_waits_for_the_host(tmp_path):
    # A [0,10); the thread runs a 28 µs Python span [12,40), then launches B at 45; B [50,55).
    # Gap [10,50): 40 µs, the launch came 35 µs after the stream ran dry; "loop" covers 28 of those 35
    ev = [launch(0, 1), kern("A", 0, 10, 1), x("loop", 12, 28, "python_function"),
          x("aten::mul", 44, 3), launch(45, 2), kern("B", 50, 5, 2)]
    g = one(gaps(tmp_path, ev))
    assert (g["cause"], g["dur"], g["late"], g["event"], g["context"]) == ("host", 40_000, 35_000, "loop", "aten::mul")
    assert g["device_idle"] == 40_000  # the only stream: all of it is device idle


def test_the_host_blocked_in_a_sync_when_the_stream_ran_dry(tmp_path):
    # A [0,100); cudaDeviceSynchronize [5,102) returns 2 µs after A ends; launch B at 110; B [115,120)
    ev = [launch(0, 1), kern("A", 0, 100, 1), x("cudaDeviceSynchronize", 5, 97, "cuda_runtime"),
          launch(110, 2), kern("B", 115, 5, 2)]
    g = one(gaps(tmp_path, ev))
    assert (g["cause"], g["dur"], g["event"]) == ("sync", 15_000, "cudaDeviceSynchronize")


def test_item_is_a_copy_then_a_stream_sync_inside_local_scalar_dense(tmp_path):
    # .item(): aten::_local_scalar_dense [2,60) > cudaMemcpyAsync [3,4) + cudaStreamSynchronize [5,58); the
    # D2H copy [40,41) ends the queue; next launch at 62, kernel [66,70): gap [41,66), sync, inside the op
    ev = [launch(0, 1), kern("A", 0, 40, 1), x("aten::_local_scalar_dense", 2, 58),
          launch(3, 2, name="cudaMemcpyAsync"), x("Memcpy DtoH (Device -> Pinned)", 40, 1, "gpu_memcpy", tid=7,
                                                   stream=7, correlation=2, device=0),
          x("cudaStreamSynchronize", 5, 53, "cuda_runtime"), launch(62, 3), kern("B", 66, 4, 3)]
    g = one(gaps(tmp_path, ev))
    assert (g["cause"], g["event"], g["context"], g["dur"]) == ("sync", "cudaStreamSynchronize",
                                                                "aten::_local_scalar_dense", 25_000)


def test_a_sync_that_waited_for_nothing_does_not_explain_the_gap(tmp_path):
    # A [0,10); the host works [11,80), then syncs [81,82) (the stream was long idle: it waited for
    # nothing), then launches at 85: the host was late, not held by the sync
    ev = [launch(0, 1), kern("A", 0, 10, 1), x("work", 11, 69), x("cudaStreamSynchronize", 81, 1, "cuda_runtime"),
          launch(85, 2), kern("B", 90, 5, 2)]
    g = one(gaps(tmp_path, ev))
    assert (g["cause"], g["event"]) == ("host", "work")


def test_the_host_was_loading_data(tmp_path):
    # A [0,10); the DataLoader's span [8,60) holds the thread until the launch at 62; B [65,70)
    ev = [launch(0, 1), kern("A", 0, 10, 1), x(LOADER, 8, 52, "user_annotation"), launch(62, 2), kern("B", 65, 5, 2)]
    g = one(gaps(tmp_path, ev))
    assert (g["cause"], g["event"], g["dur"]) == ("data", LOADER, 55_000)


def test_data_then_other_launches_is_the_host(tmp_path):
    # as above, but the data span ends at 30 and the thread launches C (another stream) at 32 before B at 62:
    # the data load did not hold this launch back
    ev = [launch(0, 1), kern("A", 0, 10, 1), x(LOADER, 8, 22, "user_annotation"), launch(32, 3),
          kern("C", 33, 1, 3, stream=9), launch(62, 2), kern("B", 65, 5, 2)]
    assert one(gaps(tmp_path, ev))["cause"] == "host"


def test_a_stream_waiting_for_a_collective_and_for_a_compute_kernel(tmp_path):
    # stream 7: A [0,10), B launched at 8 (in time) starts at 81, 1 µs after the NCCL kernel on stream 20
    # ends (80): collective. Stream 30: G [0,10), H launched at 8 starts at 42, 2 µs after "gemm" on
    # stream 31 [0,40) ends: a dependency on compute, "other", explained by gemm
    ev = [launch(0, 1), kern("A", 0, 10, 1), launch(4, 2), kern("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 5, 75, 2,
                                                                 stream=20),
          launch(8, 3), kern("B", 81, 4, 3),
          launch(0, 4), kern("G", 0, 10, 4, stream=30), launch(0, 5), kern("gemm", 0, 40, 5, stream=31),
          launch(8, 6), kern("H", 42, 4, 6, stream=30)]
    res = gaps(tmp_path, ev)
    b, h = one(res, 7), one(res, 30)
    assert (b["cause"], b["event"], b["dur"]) == ("collective", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 71_000)
    assert (h["cause"], h["event"], h["dur"]) == ("other", "gemm", 32_000)
    # the device ran something all the time except [80,81): that microsecond is B's
    assert b["device_idle"] == 1_000 and h["device_idle"] == 0


@pytest.mark.parametrize("late_us, cause", [(-500, "collective"), (7_000, "collective"), (40_000, "host")])
def test_a_launch_after_waiting_for_gloo_is_the_collective_even_before_gloo_closed_its_span(tmp_path, late_us, cause):
    # DDP's backward on CUDA with gloo: A [0,10 ms); the training thread issues the all-reduce at 9 ms, gloo's
    # thread runs it from 9.2 ms, the thread launches B at 300 ms. gloo closes its span after waking the waiter:
    # measured 1.4-12.6 ms after the waiter resumed (4 ranks on 2 cores, tests/unit/test_critical_path_wakes.py).
    # Closed 0.5 ms before or 7 ms after the launch: the wait for it; 40 ms after (past LATE_END_NS): the host's
    end = 300_000 + late_us
    ev = [launch(0, 1), kern("A", 0, 10_000, 1), x("c10d::allreduce_", 9_000, 500),
          x("gloo:all_reduce", 9_200, end - 9_200, "user_annotation", tid=2), launch(300_000, 2),
          kern("B", 300_005, 95, 2)]
    g = one(gaps(tmp_path, ev))
    assert g["cause"] == cause and g["dur"] == 290_005_000
    assert (g["event"] == "gloo:all_reduce") == (cause == "collective")


def test_device_idle_is_given_once_to_the_stream_that_ended_it(tmp_path):
    # stream 7: A [0,10) B [50,60); stream 9: C [0,30) D [70,80). The device idles (30,50), ended by B,
    # and (60,70), ended by D: B's gap [10,50) holds 20 µs of it, D's gap [30,70) 10 µs; the sum is the
    # device's idle time (30), not the streams' idle (40 + 40)
    ev = [launch(0, 1), kern("A", 0, 10, 1), launch(0, 2), kern("C", 0, 30, 2, stream=9),
          launch(0, 3), kern("B", 50, 10, 3), launch(0, 4), kern("D", 70, 10, 4, stream=9)]
    res = gaps(tmp_path, ev)
    assert (one(res, 7)["device_idle"], one(res, 9)["device_idle"]) == (20_000, 10_000)
    assert res.summary["device_idle_ns"] == 30_000
    assert res.tables["per_step"]["idle"].to_list() == [80_000]


def test_steps_take_the_gaps_that_end_in_them_and_totals_count_every_gap(tmp_path, monkeypatch):
    # steps [0,100) and [100,200); kernels every 20 µs from 5: gaps of 10 µs end at 25, 45, ..., 185;
    # the one ending at 105 crosses into step 2 and is step 2's. 4 gaps in step 1, 5 in step 2
    from rankscope.analysis.gpu import gaps as mod

    monkeypatch.setattr(mod, "MAX_GAPS", 3)
    ev = [x("ProfilerStep#1", 0, 100, "user_annotation"), x("ProfilerStep#2", 100, 100, "user_annotation")]
    for i in range(10):
        ev += [launch(5 + 20 * i - 4, i + 1), kern(f"k{i}", 5 + 20 * i, 10, i + 1)]
    res = gaps(tmp_path, ev)
    tot = {r["step"]: r["gaps"] for r in res.tables["totals"].to_dicts()}
    assert tot == {1: 4, 2: 5}
    assert res.summary["gaps"] == 9 and res.tables["gaps"].height == 3  # the table keeps MAX_GAPS per rank
    assert res.tables["per_step"].filter(step=2)["device_idle"].item() == 50_000


def _rank(rank: int, arrive: float) -> list[dict[str, Any]]:
    """One rank of a 2-rank NCCL all_reduce (seq 1): the host issues it at ``arrive``; the NCCL kernel ends
    when the later rank arrived (at 50) + 20 µs; the compute stream's next kernel, launched in time, waits."""
    meta = {"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024, "Out msg nelems": 1024,
            "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Group size": 2, "Seq": 1}
    return [x("ProfilerStep#1", 0, 200, "user_annotation"), launch(0, 1), kern("A", 0, 10, 1),
            x("record_param_comms", arrive, 5, **meta), launch(arrive + 1, 2),
            kern("ncclDevKernel_AllReduce_Sum_f32_RING_LL", arrive + 3, 70 - arrive - 3, 2, stream=20),
            launch(arrive + 6, 3), kern("B", 71, 4, 3)]


def test_collective_gap_names_the_instance_and_the_peer_that_arrived_last(tmp_path):
    # rank 0 issues at 10, rank 1 at 50 (one clock: both traces start at 0); rank 0's stream 7 waits
    # [10,71) for the collective: its peer, rank 1, arrived 40 µs later. Rank 1 arrived last itself.
    write_trace(tmp_path / "r0.json", _rank(0, 10), rank=0, world=2, backend="nccl")
    write_trace(tmp_path / "r1.json", _rank(1, 50), rank=1, world=2, backend="nccl")
    res = run_all(load_run(tmp_path, jobs=1), names=["clock", "gpu_gaps"])["gpu_gaps"]
    g = {r["rank"]: r for r in res.tables["gaps"].filter(cause="collective").to_dicts()}
    assert g[0]["collective"] == "all_reduce #1 of group 0" and g[0]["dur"] == 61_000
    assert (g[0]["peer"], g[1]["peer"]) == (1, 1)
    assert g[0]["peer_wait"] == pytest.approx(40_000, abs=3_000) and g[1]["peer_wait"] == 0


def test_no_kernels_is_skipped_with_the_reason(tmp_path):
    write_trace(tmp_path / "r0.json", [x("aten::mm", 0, 10)], rank=0, world=1)
    res = run_all(load_run(tmp_path, jobs=1), names=["gpu_gaps"])["gpu_gaps"]
    assert res.skipped and "no GPU kernels" in res.skipped
