"""Breakdown extensions on tiny hand-made GPU traces: comm classification through External id,
Ascend columns, receive bubble, trajectory, and the whole-window step without markers."""
import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import write_trace, x


def k(name, ts, dur, ext, stream=7):
    return x(name, ts, dur, "kernel", tid=stream, **{"External id": ext, "stream": stream, "device": 0})


def _gpu_step(t0=0.0):
    # step [0,100): a comm kernel with an unrecognisable name, linked to nccl:all_reduce by
    # External id 7, [30,60); a compute kernel [20,40); a receive kernel [70,80).
    return [x("ProfilerStep#1", t0, 100, "user_annotation"),
            x("nccl:all_reduce", t0 + 10, 10, "cpu_op", **{"External id": 7}),
            x("aten::mm", t0 + 12, 5, "cpu_op", **{"External id": 8}),
            k("my_custom_transport_kernel", t0 + 30, 30, 7, stream=20),
            k("gemm_kernel", t0 + 20, 20, 8),
            k("ncclDevKernel_Recv(ncclDevComm*)", t0 + 70, 10, 9, stream=21)]


def test_comm_linked_by_external_id_and_ascend_columns(tmp_path):
    write_trace(tmp_path / "r0.json", _gpu_step(), rank=0, world=1)
    res = run_all(load_run(tmp_path, jobs=1), names=["breakdown", "trajectory"])
    (r,) = res["breakdown"].tables["breakdown"].to_pylist()
    assert r["source"] == "device" and r["wall"] == 100_000
    # comm [30,60) ∪ [70,80); compute [20,40): overlapped 10, exposed 20 + 10, free 100-20-30
    assert (r["computing"], r["communication"], r["overlapped"]) == (20_000, 40_000, 10_000)
    assert (r["comm_exposed"], r["free"], r["bubble"], r["comm_exposed_no_recv"]) == (30_000, 50_000, 10_000, 20_000)
    assert r["preparing"] == 20_000
    assert (r["iteration_gap"], r["fwd_bwd"], r["iteration_tail"]) == (20_000, 20_000, 60_000)
    (a,) = res["breakdown"].tables["step_trace_time"].to_pylist()
    assert a["Step"] == 1 and a["Type"] == "rank" and a["Index"] == 0
    assert a["Computing"] == pytest.approx(20.0) and a["Communication(Not Overlapped)"] == pytest.approx(30.0)
    assert a["Stage"] == pytest.approx(90.0) and a["Bubble"] == pytest.approx(10.0)
    assert a["Computing"] + a["Communication(Not Overlapped)"] + a["Free"] == pytest.approx(100.0)
    (t,) = res["trajectory"].tables["trajectory"].to_pylist()
    assert t["fwd_bwd"] == 20_000


def test_name_fallback_without_external_id(tmp_path):
    ev = [x("ProfilerStep#1", 0, 100, "user_annotation"), k("NCCLDEVKERNEL_AllReduce", 10, 20, -1),
          k("RcclKernel_x", 40, 10, -1), k("gemm", 60, 10, -1)]
    write_trace(tmp_path / "r0.json", ev, rank=0, world=1)
    (r,) = run_all(load_run(tmp_path, jobs=1), names=["breakdown"])["breakdown"].tables["breakdown"].to_pylist()
    assert r["communication"] == 30_000 and r["computing"] == 10_000


def test_no_step_markers_whole_window_is_one_step(tmp_path):
    ev = [x("aten::mm", 0, 40), x("gloo:all_reduce", 30, 30, "user_annotation", tid=2)]
    write_trace(tmp_path / "r0.json", ev, rank=0, world=1)
    res = run_all(load_run(tmp_path, jobs=1), names=["breakdown"])["breakdown"]
    (r,) = res.tables["breakdown"].to_pylist()
    assert r["step"] == -1 and r["wall"] == 60_000 and r["source"] == "host"
    assert r["computing"] == 40_000 and r["comm_exposed"] == 20_000
    assert res.summary["whole_window_ranks"] == [0] and "whole captured window" in res.summary["note"]
