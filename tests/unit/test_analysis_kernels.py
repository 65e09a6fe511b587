"""Kernel launch statistics, idle-time breakdown, cross-rank operator statistics and memory
on tiny hand-made traces (answers computed by hand in the comments)."""
import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import write_trace, x


def _launches():
    ev = [x("ProfilerStep#1", 0, 200, "user_annotation")]
    # (launch ts, kernel ts, kernel dur), launches 2 µs long, one stream
    for i, (lt, kt, kd) in enumerate([(0, 5, 10), (20, 25, 10), (22, 40, 5), (24, 100, 10)]):
        ev.append(x("cudaLaunchKernel", lt, 2, "cuda_runtime", correlation=i + 1))
        ev.append(x(f"k{i}", kt, kd, "kernel", tid=7, correlation=i + 1, stream=7, device=0))
    return ev


def test_launch_stats_and_idle_breakdown(tmp_path):
    write_trace(tmp_path / "r0.json", _launches(), rank=0, world=1)
    res = run_all(load_run(tmp_path, jobs=1), names=["opstats", "kernels"])["kernels"]
    (ls,) = res.tables["launch_stats"].to_pylist()
    # delays from the end of each 2 µs launch (HTA's definition, cuda_kernel_analysis.py:616-621): 3, 3, 16, 74 µs
    assert ls["kernels"] == 4 and ls["linked"] == 4 and ls["launch_delay_max"] == 74_000
    assert ls["launch_delay_p50"] == pytest.approx(9_500) and ls["short_kernels"] == 0
    assert ls["long_runtime"] == 0 and ls["long_delays"] == 0
    (idle,) = res.tables["idle_breakdown"].to_pylist()
    # gap 15->25 launched at 20 (after prev end): host wait 10; 35->40 (queued) < 30 µs: kernel
    # wait 5; 45->100 (queued) >= 30 µs: other 55
    assert (idle["idle"], idle["host_wait"], idle["kernel_wait"], idle["other"]) == (70_000, 10_000, 5_000, 55_000)
    cls = {r["class"]: r["time"] for r in res.tables["kernel_classes"].to_pylist()}
    assert cls == {"computation": 35_000, "communication": 0, "memory": 0}


def test_cpu_only_kernels_skipped_with_reason(tmp_path):
    write_trace(tmp_path / "r0.json", [x("ProfilerStep#1", 0, 10, "user_annotation"), x("aten::mm", 1, 5)],
                rank=0, world=1)
    res = run_all(load_run(tmp_path, jobs=1), names=["kernels", "hta_temporal", "memory"])
    assert "CPU-only" in res["kernels"].skipped and "CPU-only" in res["hta_temporal"].skipped
    assert "memory" in res["memory"].skipped


def test_cross_rank_operator_stats(tmp_path):
    for r, d in enumerate([10, 20, 30, 100]):
        write_trace(tmp_path / f"r{r}.json", [x("ProfilerStep#1", 0, 200, "user_annotation"),
                                              x("aten::mm", 1, d), x("aten::add", 150, 5)], rank=r, world=4)
    res = run_all(load_run(tmp_path, jobs=1), names=["opstats"])["opstats"]
    mm = next(r for r in res.tables["operators"].to_pylist() if r["name"] == "aten::mm")
    assert (mm["ranks"], mm["calls"], mm["min_rank"], mm["max_rank"]) == (4, 4, 0, 3)
    assert (mm["min"], mm["max"], mm["sum"], mm["median"]) == (10_000, 100_000, 160_000, 25_000)
    assert mm["q1"] == pytest.approx(17_500) and mm["q3"] == pytest.approx(47_500)


def test_memory_peak_and_operator_at_peak(tmp_path):
    def mem(ts, alloc, res):
        return {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
                "args": {"Total Allocated": alloc, "Total Reserved": res, "Bytes": 1, "Device Id": 0}}
    ev = [x("ProfilerStep#1", 0, 100, "user_annotation"), x("aten::linear", 10, 50), x("aten::mm", 20, 10),
          mem(5, 100, 1000), mem(25, 900, 2000), mem(70, 200, 2000)]
    write_trace(tmp_path / "r0.json", ev, rank=0, world=1)
    res = run_all(load_run(tmp_path, jobs=1), names=["memory"])["memory"]
    (p,) = res.tables["peaks"].to_pylist()
    assert (p["peak_allocated"], p["peak_reserved"], p["operator_at_peak"]) == (900, 2000, "aten::mm")
    assert res.tables["timeline"].num_rows == 3
