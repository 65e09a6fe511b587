"""Breakdown and steps on tiny hand-made traces with hand-computed answers."""
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import write_trace, x


def _cpu_rank(step_extra: float = 0.0):
    # Two steps of 100 µs on the main thread (tid 1); gloo all-reduce on a worker thread (tid 2).
    ev = []
    for k, t0 in ((1, 0.0), (2, 100.0 + step_extra)):
        ev += [x(f"ProfilerStep#{k}", t0, 100.0 + step_extra, "user_annotation"),
               x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0 + 0, 10, "user_annotation"),
               x("aten::mm", t0 + 10, 40 + step_extra),
               x("gloo:all_reduce", t0 + 40 + step_extra, 40, "user_annotation", tid=2,
                 **{"Input Dims": [[1000]], "Input type": ["float"]})]
    return ev


def test_cpu_breakdown_sums_and_values(tmp_path):
    write_trace(tmp_path / "r0.json", _cpu_rank(), rank=0)
    write_trace(tmp_path / "r1.json", _cpu_rank(), rank=1)
    run = load_run(tmp_path, jobs=1)
    assert run.rank_ids == [0, 1]
    bd = run_all(run)["breakdown"].tables["breakdown"].to_pylist()
    assert len(bd) == 4
    r = bd[0]
    # step 1: data [0,10), compute [10,50), comm [40,80) -> overlapped 10, exposed 30, idle 20
    assert (r["wall"], r["data_wait"], r["computing"]) == (100_000, 10_000, 40_000)
    assert (r["overlapped"], r["comm_exposed"], r["free"]) == (10_000, 30_000, 20_000)
    for row in bd:
        assert row["computing"] + row["comm_exposed"] + row["data_wait"] + row["free"] == row["wall"]


def test_collective_bytes_from_gloo_input_dims(tmp_path):
    write_trace(tmp_path / "r0.json", _cpu_rank(), rank=0)
    run = load_run(tmp_path / "r0.json", jobs=1, allow_missing_ranks=True)
    assert run.missing == [1]
    coll = run.table(0, "collectives").to_pylist()
    assert [c["op"] for c in coll] == ["all_reduce", "all_reduce"]
    assert coll[0]["bytes_in"] == 4000 and coll[0]["pg_ranks"] == "0,1"


def test_no_straggler_when_ranks_are_equal(tmp_path):
    write_trace(tmp_path / "r0.json", _cpu_rank(), rank=0)
    write_trace(tmp_path / "r1.json", _cpu_rank(), rank=1)
    res = run_all(load_run(tmp_path, jobs=1))
    assert res["straggler"].summary["verdict"] == "no straggler"
    assert res["straggler"].findings == []


def test_straggler_named_with_compute_cause(tmp_path):
    write_trace(tmp_path / "r0.json", _cpu_rank(), rank=0)
    write_trace(tmp_path / "r1.json", _cpu_rank(step_extra=60.0), rank=1)
    st = run_all(load_run(tmp_path, jobs=1))["straggler"]
    assert [(f.ranks, f.evidence["cause"]) for f in st.findings] == [((1,), "compute")], st.summary["verdict"]
    assert st.summary["verdict"] == st.findings[0].title  # the verdict is the finding's headline, nothing added


def test_steps_extend_to_device_work(tmp_path):
    ev = [x("ProfilerStep#3", 0, 50, "user_annotation"),
          x("cudaLaunchKernel", 10, 5, "cuda_runtime", correlation=7),
          x("sgemm", 20, 70, "kernel", tid=7, correlation=7, stream=7, device=0),
          x("ProfilerStep#4", 60, 50, "user_annotation")]
    write_trace(tmp_path / "r0.json", ev, rank=0, world=1)
    steps = load_run(tmp_path / "r0.json", jobs=1).table(0, "steps").to_pylist()
    assert [s["step"] for s in steps] == [3, 4]
    assert steps[0]["end"] == 90_000  # the kernel launched in step 3 ends at 90 µs
    assert steps[1]["ts"] == 90_000   # step 4 starts after step 3's device work


def _profiled_steps(path, annotation: str) -> None:
    """A real torch.profiler trace of 3 steps: a span named ``annotation`` holding real tensor work
    (a decode-like cumsum and a sort), then a matmul outside it."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    path.parent.mkdir(parents=True, exist_ok=True)
    a = torch.randn(256, 256)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with record_function(annotation):
                torch.sort(torch.randn(200_000).cumsum(0))
            a @ a
            prof.step()
    prof.export_chrome_trace(str(path))


def test_user_data_annotation_and_the_work_inside_it_count_as_data_wait(tmp_path):
    """Issue 12: a user's record_function("data") (real work inside: its operators) counted as compute.
    Now the span and the operators under it are data wait; a span named "metadata" stays compute."""
    _profiled_steps(tmp_path / "d" / "r0.pt.trace.json", "data")
    _profiled_steps(tmp_path / "m" / "r0.pt.trace.json", "metadata")
    shares = {}
    for k in ("d", "m"):
        run = load_run(tmp_path / k / "r0.pt.trace.json", jobs=1, allow_missing_ranks=True)
        bd = [r for r in run_all(run, ["breakdown"])["breakdown"].tables["breakdown"].to_pylist()
              if r["complete"]]
        assert bd
        shares[k] = sum(r["data_wait"] for r in bd) / sum(r["wall"] for r in bd)
        for r in bd:
            assert r["computing"] + r["comm_exposed"] + r["data_wait"] + r["free"] == r["wall"]
    assert shares["d"] > 0.3, shares  # the sort dominates the step
    assert shares["m"] == 0.0, shares


def test_data_span_pattern_is_configurable(tmp_path, monkeypatch):
    _profiled_steps(tmp_path / "r0.pt.trace.json", "my_reader")
    run = load_run(tmp_path / "r0.pt.trace.json", jobs=1, allow_missing_ranks=True)
    def share():
        bd = run_all(run, ["breakdown"])["breakdown"].tables["breakdown"].to_pylist()
        return sum(r["data_wait"] for r in bd)
    assert share() == 0
    monkeypatch.setenv("RANKSCOPE_DATA_SPANS", "my_reader")
    assert share() > 0
