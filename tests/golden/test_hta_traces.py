"""Golden tests on real traces from HTA's test data (../shared/data/hta, MIT).

Expected numbers: ../shared/data/README.md, measured with holistictraceanalysis 0.5.0 on
trace_filter (µs): rank 0 idle 321,378 / compute 106,252 / non-compute 172,428 of 600,058;
rank 1 idle 328,671 / compute 135,548 / non-compute 136,455 of 600,674.
"""
from rankscope.analysis.compat.hta import temporal
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run


def test_trace_filter_ranks_and_steps(shared_data):
    run = load_run(shared_data / "hta" / "trace_filter", jobs=1, allow_missing_ranks=True)
    assert run.rank_ids == [0, 1]
    assert run.world_size == 128 and len(run.missing) == 126
    for r in (0, 1):
        assert [s["step"] for s in run.table(r, "steps").to_pylist()] == [551, 552]


def test_trace_filter_matches_hta_temporal_breakdown(shared_data):
    run = load_run(shared_data / "hta" / "trace_filter", jobs=1, allow_missing_ranks=True)
    got = {r: temporal(run, r) for r in (0, 1)}
    assert got[0]["total"] == 600_058_000 and got[1]["total"] == 600_674_000
    assert got[0]["compute"] == 106_252_000 and got[1]["compute"] == 135_548_000
    assert got[0]["idle"] == 321_378_000 and got[1]["idle"] == 328_671_000


def test_trace_filter_breakdown_sums_to_step_time(shared_data):
    run = load_run(shared_data / "hta" / "trace_filter", jobs=1, allow_missing_ranks=True)
    bd = run_all(run)["breakdown"].tables["breakdown"].to_pylist()
    assert len(bd) == 4 and all(r["source"] == "device" for r in bd)
    for r in bd:
        assert r["computing"] + r["comm_exposed"] + r["data_wait"] + r["free"] == r["wall"]
        assert r["communication"] > 0
