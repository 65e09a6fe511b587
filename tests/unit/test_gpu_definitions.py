"""Each GPU analysis's definition on a tiny hand-built trace, with the HTA 0.5.0 source line it follows
(hta/... as installed by ``pip install holistictraceanalysis==0.5.0``); expected values worked out by
hand in the comments. The same definitions are checked value by value against HTA itself on real
traces in tests/golden/test_hta_oracle.py."""
from __future__ import annotations

import json

import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.helpers import write_trace, x


def kern(name, ts, dur, corr, cat="kernel", stream=7, tid=7, **args):
    return x(name, ts, dur, cat, tid=tid, stream=stream, correlation=corr, device=0, **args)


def launch(ts, corr, dur=1, name="cudaLaunchKernel", tid=1):
    return x(name, ts, dur, "cuda_runtime", tid=tid, correlation=corr)


def run(tmp_path, events, names, rank=0, world=1, **env):
    write_trace(tmp_path / f"r{rank}.json", events, rank=rank, world=world)
    return run_all(load_run(tmp_path, jobs=1), names=names)


def rows(res, table):
    t = res.tables[table]
    return t.to_dicts() if hasattr(t, "to_dicts") else t.to_pylist()


def test_load_drops_the_last_step_as_hta(tmp_path):
    # hta/common/trace.py:705-731: CPU events from the start of the last ProfilerStep on are dropped, and
    # device events follow their launch (a kernel launched before it stays even when it runs after)
    ev = [x("ProfilerStep#1", 0, 100, "user_annotation"), x("ProfilerStep#2", 100, 100, "user_annotation"),
          launch(10, 1), kern("k_a", 20, 10, 1), launch(90, 2), kern("k_b", 105, 10, 2),
          launch(150, 3), kern("k_c", 160, 10, 3)]
    res = run(tmp_path, ev, ["kernel_breakdown"])["kernel_breakdown"]
    names = {r["name"] for r in rows(res, "hta_kernel_breakdown")}
    assert names == {"k_a", "k_b"}  # k_c's launch is in the last step
    own = {r["name"] for r in rows(res, "kernel_stats")}
    assert own == {"k_a", "k_b", "k_c"}  # rankscope's own tables keep every step


def test_ns_timestamps_rounded_as_hta(tmp_path):
    # hta/common/trace_parser.py:330-336: start rounded up, end rounded down to whole µs:
    # [1.5, 3.7) -> [2, 3): 1 µs; [4.2, 9.9) -> [5, 9): 4 µs
    ev = [launch(0.5, 1, 0.5), kern("k", 1.5, 2.2, 1), launch(3.0, 2, 0.5), kern("k", 4.2, 5.7, 2)]
    res = run(tmp_path, ev, ["kernel_breakdown"])["kernel_breakdown"]
    (k,) = [r for r in rows(res, "hta_kernel_breakdown")]
    assert (k["sum (us)"], k["max (us)"], k["min (us)"]) == (5.0, 4.0, 1.0)
    (own,) = rows(res, "kernel_stats")
    assert own["sum"] == 2_200 + 5_700  # rankscope keeps the ns


def test_kernel_overlap_labels(tmp_path):
    # hta/analyzers/breakdown_analysis.py:495-562: merged intervals per type, a running bitmask, labels in
    # the order COMPUTATION, COMMUNICATION, MEMORY. compute [0,10) comm [5,20) memcpy [18,25):
    # COMPUTATION 5, COMPUTATION overlapping COMMUNICATION 5, COMMUNICATION 8, COMMUNICATION overlapping
    # MEMORY 2, MEMORY 5 (percent of 25, one decimal)
    ev = [launch(0, 1, 0), kern("gemm", 0, 10, 1), launch(0, 2, 0), kern("ncclKernel_AllReduce", 5, 15, 2, stream=9),
          launch(0, 3, 0, "cudaMemcpyAsync"), kern("Memcpy HtoD (Pageable -> Device)", 18, 7, 3, cat="gpu_memcpy",
                                                   stream=11, bytes=7000, **{"memory bandwidth (GB/s)": 1.0})]
    res = run(tmp_path, ev, ["kernel_breakdown"])["kernel_breakdown"]
    got = {r["kernel_type"]: (r["sum"], r["percentage"]) for r in rows(res, "hta_kernel_type")}
    assert got == {"COMPUTATION": (5.0, 20.0), "COMPUTATION overlapping COMMUNICATION": (5.0, 20.0),
                   "COMMUNICATION": (8.0, 32.0), "COMMUNICATION overlapping MEMORY": (2.0, 8.0),
                   "MEMORY": (5.0, 20.0)}
    own = {r["kernels"]: r["time"] for r in rows(res, "kernel_overlap")}
    assert own["computation overlapping communication"] == 5_000  # same labels, rankscope's classes


def test_top_kernels_and_others(tmp_path):
    # breakdown_analysis.py:564-627: 11 names of 11..1 µs; running sums 11,21,...,63,65,66; their 0.8
    # quantile (linear) is 63: the names after it (2 and 1 µs) become "others", which is then
    # re-aggregated over per-name sums: sum 3, max 2, min 1, mean 1.5, std 0.7071; a kept name has
    # max = min = mean = its sum
    ev = []
    for i, d in enumerate(range(11, 0, -1)):
        ev += [launch(i * 20, i + 1, 0), kern(f"k{d:02d}", i * 20 + 1, d, i + 1)]
    res = run(tmp_path, ev, ["kernel_breakdown"])["kernel_breakdown"]
    got = {r["name"]: r for r in rows(res, "hta_kernel_breakdown")}
    assert set(got) == {f"k{d:02d}" for d in range(3, 12)} | {"others"}
    o = got["others"]
    assert (o["sum (us)"], o["max (us)"], o["min (us)"], o["mean (us)"]) == (3.0, 2.0, 1.0, 1.5)
    assert o["stddev"] == pytest.approx(0.70710678)
    k = got["k11"]
    assert (k["sum (us)"], k["max (us)"], k["min (us)"], k["mean (us)"], k["stddev"]) == (11.0, 11.0, 11.0, 11.0, 0.0)


def test_idle_time_per_stream(tmp_path):
    # breakdown_analysis.py:754-777: gap = start - previous kernel's end (start order), host wait when the
    # launch started after that end (769), kernel wait when < 30 µs (777), else other; HTA keeps negative gaps.
    # k0 [0,10); k1 [8,12) launched at 1: gap -2, kernel wait; k2 [50,60) launched at 45 > 12: host 38;
    # k3 [65,70) launched at 40: gap 5, kernel wait; k4 [200,210) launched at 50: gap 130, other
    ts = [(0, 10, -5), (8, 4, 1), (50, 10, 45), (65, 5, 40), (200, 10, 50)]
    ev = []
    for i, (t, d, lt) in enumerate(ts):
        ev += [launch(lt, i + 1, 1), kern(f"k{i}", t, d, i + 1)]
    res = run(tmp_path, ev, ["gpu_idle"])["gpu_idle"]
    hta = {r["idle_category"]: r["idle_time"] for r in rows(res, "hta_idle_time")}
    assert hta == {"host_wait": 38.0, "kernel_wait": 3.0, "other": 130.0}
    (own,) = rows(res, "idle_time")  # rankscope: gaps after the latest earlier end, never negative
    assert (own["host_wait"], own["kernel_wait"], own["other"], own["idle"]) == (38_000, 5_000, 130_000, 173_000)


def test_launch_delay_from_the_end_of_the_call(tmp_path):
    # hta/analyzers/cuda_kernel_analysis.py:616-621: kernel start - (call start + call duration), clipped at
    # 0; cudaMemcpyAsync counted (include_memory_events); calls over 50 µs counted (trace_analysis.py:327)
    ev = [launch(0, 1, 2), kern("k", 10, 5, 1),  # delay 8
          launch(20, 2, 60), kern("k", 70, 5, 2),  # starts before the 60 µs call returns: 0; slow call
          launch(100, 3, 2, "cudaMemcpyAsync"), kern("Memcpy DtoH", 300, 5, 3, cat="gpu_memcpy")]  # 198
    res = run(tmp_path, ev, ["launch_delay"])["launch_delay"]
    got = {r["correlation"]: (r["cpu_duration"], r["gpu_duration"], r["launch_delay"])
           for r in rows(res, "hta_launch_stats")}
    assert got == {1: (2.0, 5.0, 8.0), 2: (60.0, 5.0, 0.0), 3: (2.0, 5.0, 198.0)}
    (s,) = rows(res, "launch_summary")
    assert (s["launches"], s["long_runtime"], s["long_delay"], s["delay_max"]) == (3, 1, 1, 198_000)


def test_queue_length(tmp_path, monkeypatch):
    # hta/analyzers/trace_counters.py:19-95: +1 at a launch, -1 when its kernel starts, per stream:
    # launches at 0, 1, 2, kernels at 5, 6, 7 -> 1, 2, 3, 2, 1, 0; HTA's summary is over these points
    # (unweighted: mean 1.5); rankscope's mean is over time: (1·1 + 2·1 + 3·3 + 2·1 + 1·1) / 7 = 15/7
    monkeypatch.setenv("RANKSCOPE_MAX_QUEUE_LENGTH", "3")
    ev = [launch(i, i + 1, 0.5) for i in range(3)] + [kern("k", 5 + i, 0.5, i + 1) for i in range(3)]
    res = run(tmp_path, ev, ["queue_length"])["queue_length"]
    assert [r["queue_length"] for r in rows(res, "hta_queue_length")] == [1, 2, 3, 2, 1, 0]
    (summ,) = rows(res, "hta_queue_length_summary")
    assert (summ["count"], summ["mean"], summ["max"]) == (6.0, 1.5, 3.0)
    (own,) = rows(res, "queue_length_summary")
    assert own["mean_time_weighted"] == pytest.approx(15 / 7) and own["time_at_max"] == 3_000
    # trace_counters.py:195-257: time at >= max_queue_length (3 here): 3 µs of a 7 µs trace
    (full,) = rows(res, "hta_queue_full")
    assert full["duration_at_max_queue_length"] == 3.0
    assert full["relative_duration_at_max_queue_length"] == pytest.approx(3 / 7)
    assert own["time_full"] == 3_000


def test_memory_bandwidth(tmp_path):
    # hta/analyzers/trace_counters.py:259-325: + bandwidth at a copy's start, - at its end, per copy kind
    # (utils.py:120): HtoD 2 GB/s over [0,10) and 3 GB/s over [5,15) -> 2, 5, 3, 0; HTA's summary over
    # the positive points: mean 10/3, max 5. rankscope: 20 kB + 30 kB over the 15 µs busy = 3.33 GB/s
    ev = [launch(0, 1, 0, "cudaMemcpyAsync"), launch(0, 2, 0, "cudaMemcpyAsync"),
          kern("Memcpy HtoD (Pinned -> Device)", 0, 10, 1, cat="gpu_memcpy", bytes=20_000,
               **{"memory bandwidth (GB/s)": 2.0}),
          kern("Memcpy HtoD (Pinned -> Device)", 5, 10, 2, cat="gpu_memcpy", stream=9, bytes=30_000,
               **{"memory bandwidth (GB/s)": 3.0})]
    res = run(tmp_path, ev, ["memory_bw"])["memory_bw"]
    assert [r["memory_bw_gbps"] for r in rows(res, "hta_memory_bw")] == [2.0, 5.0, 3.0, 0.0]
    (summ,) = rows(res, "hta_memory_bw_summary")
    assert summ["name"] == "Memcpy HtoD" and summ["mean"] == pytest.approx(10 / 3) and summ["max"] == 5.0
    (own,) = rows(res, "memory_bw")
    assert own["bytes"] == 50_000 and own["busy"] == 15_000 and own["bandwidth_gbps"] == pytest.approx(50 / 15)


def test_kernels_with_their_annotation(tmp_path):
    # breakdown_analysis.py:256-307: annotations longest first, a later (inner) one overwrites; only kernels
    # of the annotation's own pid/tid, overlapping [start, end)
    ev = [x("outer", 0, 100, "gpu_user_annotation", tid=7), x("inner", 10, 10, "gpu_user_annotation", tid=7),
          launch(0, 1, 0), kern("a", 12, 3, 1), launch(0, 2, 0), kern("b", 50, 10, 2),
          launch(0, 3, 0), kern("c", 12, 3, 3, stream=9, tid=9), x("outer", 0, 100, "user_annotation")]
    res = run(tmp_path, ev, ["annotations"])["annotations"]
    got = {r["correlation"]: r["user_annotation"] for r in rows(res, "hta_kernels_with_annotation")}
    assert got == {1: "inner", 2: "outer", 3: ""}
    gpu = {r["name"]: r["sum (us)"] for r in rows(res, "hta_gpu_annotation_breakdown")}
    assert gpu == {"outer": 100.0, "inner": 10.0}
    assert [r["name"] for r in rows(res, "hta_cpu_annotation_breakdown")] == ["outer"]
    own = {r["name"]: (r["kernels"], r["kernel_time"]) for r in rows(res, "annotation_kernels")}
    assert own == {"inner": (1, 3_000), "outer": (1, 10_000)}


def test_aten_op_kernels_and_delays(tmp_path):
    # hta/analyzers/cuda_kernel_analysis.py:433-443: the latest-starting aten:: op containing the launch,
    # of any thread; aten op delay = launch start - op start, runtime delay = kernel start - launch start.
    # Thread 1: aten::linear [0,50) > aten::addmm [5,40) launching at 10 and 20; thread 2: aten::to [8,60)
    ev = [x("aten::linear", 0, 50), x("aten::addmm", 5, 35), launch(10, 1, 2), kern("gemm", 15, 5, 1),
          launch(20, 2, 2), kern("bias", 30, 5, 2), x("aten::to", 8, 52, tid=2)]
    res = run(tmp_path, ev, ["aten_kernels"])["aten_kernels"]
    (hta,) = rows(res, "hta_aten_op_kernels")  # HTA: aten::to (thread 2) starts last and contains both
    assert (hta["aten_op_name"], hta["kernel_sequence"], hta["occurrence_count"]) == ("aten::to", "gemm -> bias", 1)
    assert (hta["avg_aten_op_launch_delay"], hta["avg_runtime_delay"]) == (2.0, 5.0)
    (own,) = rows(res, "aten_op_kernels")  # rankscope: the operator on the launch's own thread
    assert (own["aten_op_name"], own["avg_aten_op_launch_delay"], own["avg_runtime_delay"]) == ("aten::addmm", 5_000, 5_000)


def test_aten_table_accumulates_ranks_as_hta(tmp_path):
    # cuda_kernel_analysis.py:431: HTA's launch list is not reset per rank, so rank 1's table counts rank 0's
    for r in (0, 1):
        write_trace(tmp_path / f"r{r}.json", [x("aten::mm", 0, 50), launch(10, 1, 2), kern("gemm", 15, 5, 1)],
                    rank=r, world=2)
    res = run_all(load_run(tmp_path, jobs=1), names=["aten_kernels"])["aten_kernels"]
    assert {r["rank"]: r["occurrence_count"] for r in rows(res, "hta_aten_op_kernels")} == {0: 1, 1: 2}
    assert {r["rank"]: r["occurrence_count"] for r in rows(res, "aten_op_kernels")} == {0: 1, 1: 1}


def test_frequent_kernel_sequences(tmp_path):
    # cuda_kernel_analysis.py:82-120: roots = calls of the name at its shallowest depth with >= 3 kernels
    # (min_pattern_len); pattern = name | kernels by start; count, kernel and operator time summed
    ev = []
    for i, t0 in enumerate((0, 100)):
        ev.append(x("block", t0, 50))
        for j in range(3):
            c = 10 * i + j + 1
            ev += [launch(t0 + 1 + j, c, 0.5), kern(f"k{j}", t0 + 10 + 5 * j, 2, c)]
    ev += [x("small", 200, 10), launch(201, 99, 0.5), kern("k0", 205, 2, 99)]  # 1 kernel: no pattern
    res = run(tmp_path, ev, ["kernel_sequences"])["kernel_sequences"]
    (seq,) = rows(res, "hta_kernel_sequences")
    assert (seq["operator"], seq["pattern"], seq["count"]) == ("block", "block|k0|k1|k2", 2)
    assert (seq["GPU kernel duration (us)"], seq["CPU op duration (us)"]) == (12.0, 100.0)


def test_cupti_counters_with_operators(tmp_path):
    # hta/analyzers/cupti_counter_analysis.py:26-95: ranges and cudaLaunchKernel paired in start order,
    # the launch's cpu_op stack outermost first; FLOPs: an FMA counts 2 (cupti_counter_analysis.py:13).
    # Event shape: Kineto's CUPTI range profiler (cat "cuda_profiler_range", metrics as args, pid/tid 0)
    ffma, fadd = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum", "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum"
    rng = lambda name, ts, a, b: {"ph": "X", "cat": "cuda_profiler_range", "name": name, "pid": 0, "tid": 0,  # noqa: E731
                                  "ts": ts, "dur": 5, "args": {ffma: a, fadd: b}}
    ev = [x("aten::linear", 0, 50), x("aten::addmm", 5, 30), launch(10, 1, 2), x("aten::relu", 60, 20),
          launch(65, 2, 2), rng("gemm", 100, 10, 5), rng("relu_kernel", 110, 0, 3)]
    res = run(tmp_path, ev, ["cupti_counters"])["cupti_counters"]
    got = rows(res, "hta_cupti_counters")
    assert [(r["name"], r["op_stack"], r["top_level_op"], r["bottom_level_op"], r[ffma]) for r in got] == [
        ("gemm", "aten::linear | aten::addmm", "aten::linear", "aten::addmm", 10),
        ("relu_kernel", "aten::relu", "aten::relu", "aten::relu", 0)]
    flops = {r["bottom_level_op"]: r["flops"] for r in rows(res, "kernel_flops")}
    assert flops == {"aten::addmm": 25, "aten::relu": 3}


def test_counters_survive_the_cache(tmp_path):
    """The counters column is built at ingest (a second read for such traces) and cached."""
    ev = [launch(10, 1, 2), {"ph": "X", "cat": "cuda_profiler_range", "name": "k", "pid": 0, "tid": 0, "ts": 20,
                             "dur": 5, "args": {"m.sum": 7, "note": "text"}}]
    write_trace(tmp_path / "r0.json", ev, rank=0, world=1)
    for _ in range(2):  # the second load reads the Parquet cache
        run_ = load_run(tmp_path, jobs=1)
        col = [c for c in run_.table(0, "events", columns=["counters"]).column("counters").to_pylist() if c]
        assert [json.loads(c) for c in col] == [{"m.sum": 7}]


def test_innermost_containing_interval_equals_brute_force():
    """aten_kernels.innermost (a sparse table over the ends' ranks, issue 26) against a direct scan, on random
    intervals with shared starts and ends (ties) and queries inside, on and outside them."""
    import numpy as np

    from rankscope.analysis.gpu.aten_kernels import innermost

    rng = np.random.default_rng(26)
    for n in (1, 2, 7, 64, 300):
        ts = np.sort(rng.integers(0, 50, n)) * 1000
        end = ts + rng.integers(0, 30, n) * 1000
        q_ts = rng.integers(-2, 60, 200) * 1000
        q_end = q_ts + rng.integers(0, 10, 200) * 1000
        j, tie = innermost(ts, end, q_ts, q_end)
        for i in range(len(q_ts)):
            ok = np.flatnonzero((ts <= q_ts[i]) & (end >= q_end[i]))
            assert j[i] == (ok[-1] if len(ok) else -1)
            assert tie[i] == (len(ok) > 0 and int((ts[ok] == ts[ok[-1]]).sum()) > 1)
