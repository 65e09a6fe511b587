"""Golden tests of the cluster analyses on real traces from HTA's test data (../shared/data/hta, MIT).

Expected numbers for trace_filter come from ../shared/data/README.md, measured with
holistictraceanalysis 0.5.0 (PyPI): comm–compute overlap 11.81 % (rank 0) and 20.05 % (rank 1),
temporal breakdown idle 321,378 / compute 106,252 of 600,058 µs (rank 0). Collective sizes of
nccl_parser_config are the trace's own record_param_comms metadata ("In msg nelems" × dtype width).
"""
import json

import pytest

from rankscope.analysis.compat.hta import overlap
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run


@pytest.fixture(scope="module")
def trace_filter(shared_data):
    return load_run(shared_data / "hta" / "trace_filter", jobs=1, allow_missing_ranks=True)


def test_trace_filter_overlap_matches_hta(trace_filter):
    assert round(overlap(trace_filter, 0)["overlap_pct"], 2) == 11.81
    assert round(overlap(trace_filter, 1)["overlap_pct"], 2) == 20.05
    res = run_all(trace_filter, names=["hta_temporal"])["hta_temporal"]
    assert res.summary["overlap_pct"] == {0: 11.81, 1: 20.05}
    t = {r["rank"]: r for r in res.tables["hta_temporal"].to_pylist()}
    assert t[0]["idle"] == 321_378_000 and t[0]["compute"] == 106_252_000 and t[0]["total"] == 600_058_000


def test_trace_filter_breakdown_never_nan_and_ascend_sums(trace_filter):
    res = run_all(trace_filter, names=["breakdown", "kernels", "opstats"])
    for a in res["breakdown"].tables["step_trace_time"].to_pylist():
        assert a["Communication"] > 0  # NCCL kernels classified as communication
        total = a["Computing"] + a["Communication(Not Overlapped)"] + a["Free"]
        assert total == pytest.approx(a["Stage"] + a["Bubble"], abs=1e-6)
    cls = res["kernels"].tables["kernel_classes"].to_pylist()
    assert {r["class"] for r in cls if r["time"] > 0} >= {"computation", "communication"}
    for r in res["kernels"].tables["idle_breakdown"].to_pylist():
        assert r["host_wait"] + r["kernel_wait"] + r["other"] == r["idle"]
    top = res["opstats"].tables["kernels"].to_pylist()
    assert top[0]["ranks"] == 2 and top[0]["sum"] >= top[-1]["sum"]


def test_nccl_collective_metadata_and_bandwidth(shared_data):
    run = load_run(shared_data / "hta" / "nccl_parser_config", jobs=1, allow_missing_ranks=True)
    res = run_all(run, names=["collectives"])["collectives"]
    inst = [i for i in res.tables["instances"].to_pylist() if i["op"] != "other"]
    ar = [i for i in inst if i["op"] == "all_reduce"]
    assert inst[0]["op"] == "broadcast" and inst[0]["bytes"] == 53120 * 4
    assert 2049000 * 4 in {i["bytes"] for i in ar}
    for i in ar:
        assert i["group_size"] == 2 and i["transfer"] > 0
        assert i["algbw_gbps"] == pytest.approx(i["bytes"] / i["transfer"])
        assert i["busbw_gbps"] == pytest.approx(i["algbw_gbps"])  # 2(n-1)/n = 1 for n = 2


def test_cpu_only_trace_skips_gpu_analyses(shared_data):
    run = load_run(shared_data / "hta" / "cpu_only", jobs=1, allow_missing_ranks=True)
    res = run_all(run, names=["breakdown", "kernels", "hta_temporal", "collectives"])
    assert "CPU-only" in res["kernels"].skipped and "CPU-only" in res["hta_temporal"].skipped
    assert all(r["source"] == "host" for r in res["breakdown"].tables["breakdown"].to_pylist())
    assert res["collectives"].skipped is None


def test_export_writes_ascend_files(trace_filter, tmp_path):
    from rankscope.render.export import ASCEND_STEP_COLUMNS, export

    res = run_all(trace_filter, names=["breakdown", "collectives", "comm_matrix"])
    paths = export(trace_filter, res, "parquet", tmp_path)
    names = {p.name for p in paths}
    assert {"breakdown.breakdown.parquet", "cluster_step_trace_time.csv", "summary.json",
            "cluster_communication_matrix.json", "cluster_communication.json"} <= names
    header = (tmp_path / "cluster_step_trace_time.csv").read_text().splitlines()[0]
    assert header.split(",")[:3] == ASCEND_STEP_COLUMNS[:3] and header.endswith("Preparing")
    comm = json.loads((tmp_path / "cluster_communication.json").read_text())
    group = next(iter(comm.values()))
    step = group["step551"]
    info = step["Total Op Info"]["0"]["Communication Time Info"]
    assert info["Elapse Time(ms)"] >= info["Wait Time(ms)"] >= 0
    mat = json.loads((tmp_path / "cluster_communication_matrix.json").read_text())
    link = next(iter(next(iter(next(iter(mat.values()))["step"].values())).values()))
    assert set(link) == {"Transport Type", "Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)", "op_name"}
