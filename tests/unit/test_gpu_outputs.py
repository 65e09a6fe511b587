"""Where the GPU analyses show up: ``analyze --export`` files, the notebook API, and the timeline's counter
tracks (decoded with Perfetto's own protobuf classes, as tests/unit/test_render_pftrace.py does)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

import rankscope
from rankscope.model.run import load_run
from rankscope.render.timeline import write_timeline
from tests.helpers import write_trace, x

BW = "memory bandwidth (GB/s)"


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    # one stream: launches at 0, 1, 2 µs, kernels at 5, 6, 7 (queue 1, 2, 3, 2, 1, 0); two overlapping
    # HtoD copies of 2 and 3 GB/s on other streams (bandwidth 2, 5, 3, 0)
    ev = [x("ProfilerStep#1", 0, 40, "user_annotation")]
    ev += [x("cudaLaunchKernel", i, 0.5, "cuda_runtime", correlation=i + 1) for i in range(3)]
    ev += [x("k", 5 + i, 0.5, "kernel", tid=7, stream=7, correlation=i + 1, device=0) for i in range(3)]
    ev += [x("cudaMemcpyAsync", 10, 0.5, "cuda_runtime", correlation=10 + i) for i in range(2)]
    ev += [x("Memcpy HtoD (Pinned -> Device)", 10 + 5 * i, 10, "gpu_memcpy", tid=9 + i, stream=9 + i,
             correlation=10 + i, device=0, bytes=(2 + i) * 10_000, **{BW: 2.0 + i}) for i in range(2)]
    d = tmp_path_factory.mktemp("gpu") / "run"
    write_trace(d / "r0.json", ev, rank=0, world=1)
    return d


def test_timeline_counter_tracks(trace_dir, tmp_path):
    out = write_timeline(load_run(trace_dir, jobs=1), tmp_path / "t.pftrace")
    trace = pb.Trace.FromString(out.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet if p.HasField("track_descriptor")}
    series: dict[str, list[tuple[int, float]]] = {}
    for p in trace.packet:
        te = p.track_event
        if p.HasField("track_event") and te.type == pb.TrackEvent.TYPE_COUNTER:
            v = te.double_counter_value if te.HasField("double_counter_value") else te.counter_value
            series.setdefault(tracks[te.track_uuid].name, []).append((p.timestamp, v))
    q = series["queue length · stream 7"]
    assert [v for _, v in q] == [1, 2, 3, 2, 1, 0]
    assert [t - q[0][0] for t, _ in q] == [0, 1000, 2000, 5000, 6000, 7000]  # ns, on the kernels' clock
    assert tracks[next(u for u, d in tracks.items() if d.name == "queue length · stream 7")].counter.unit == \
        pb.CounterDescriptor.UNIT_COUNT
    assert [v for _, v in series["memory bandwidth · Memcpy HtoD (GB/s)"]] == [2.0, 5.0, 3.0, 0.0]


def test_timeline_json_counters(trace_dir, tmp_path):
    doc = json.loads(write_timeline(load_run(trace_dir, jobs=1), tmp_path / "t.json").read_text())
    q = [e["args"]["value"] for e in doc["traceEvents"] if e.get("ph") == "C" and e["name"] == "queue length · stream 7"]
    assert q == [1, 2, 3, 2, 1, 0]


def test_export_and_notebook_api(trace_dir, tmp_path):
    p = subprocess.run([sys.executable, "-m", "rankscope.cli", "analyze", str(trace_dir), "-j", "1", "--export", "csv",
                        "--export-dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    names = {f.name for f in tmp_path.iterdir()}
    for t in ("kernel_breakdown.kernel_stats", "gpu_idle.idle_time", "gpu_idle.hta_idle_time",
              "launch_delay.hta_launch_stats", "queue_length.hta_queue_length", "queue_length.queue_length_summary",
              "memory_bw.memory_bw", "memory_bw.hta_memory_bw_summary", "hta_temporal.hta_temporal_breakdown"):
        assert f"{t}.csv" in names
    lines = (tmp_path / "queue_length.hta_queue_length.csv").read_text().splitlines()
    assert lines[0] == "rank,stream,ts,queue_length"
    assert [ln.split(",")[3] for ln in lines[1:] if ln.split(",")[1] == "7"] == ["1", "2", "3", "2", "1", "0"]
    a = rankscope.analyze(trace_dir, jobs=1)
    assert a.table("queue_length", "queue_length_summary")["max"].to_list() == [3, 1, 1]  # streams 7, 9, 10
    assert a.table("memory_bw", "memory_bw", pandas=True)["bytes"].tolist() == [50_000]


def test_a_failing_rank_is_reported_not_dropped():
    """guard.guarded: a per-rank step that raises becomes one line naming the rank; the others go on."""
    from types import SimpleNamespace

    from rankscope.analysis.base import Result
    from rankscope.analysis.gpu.guard import guarded, split, with_problems

    @guarded
    def part(d):
        return 1 / d.x

    parts = [(r, part(SimpleNamespace(rank=r, x=r))) for r in (0, 1, 2)]
    good, problems = split(parts)
    assert [r for r, _ in good] == [1, 2] and problems == ["rank 0: ZeroDivisionError: division by zero"]
    res = with_problems(problems, Result("x", skipped="nothing"))
    assert res.summary["problems"] == problems and "rank 0: ZeroDivisionError" in res.skipped
