"""The critical path across ranks on Ascend runs: launch links from torch_npu's flows, streams, HCCL operations.

The flows come from torch_npu's own writer (``TraceEventManager.create_torch_to_npu_flow`` of the cached torch-npu
wheel, tests/torch_npu_oracle.py). The what-if's truth is the simulator's: the same job simulated without the slow
rank (rankscope/synth/ascend_sim.py, whose ranks rendezvous on every HCCL operation), its own step time.
"""
from __future__ import annotations

import json
import statistics
import sys

import pytest

from rankscope.analysis.registry import run_all
from rankscope.model.readers.ascend import torch_npu as reader
from rankscope.model.readers.ascend.flows import GROUP_STREAMS
from rankscope.model.schema import QUEUE_IDS
from rankscope.model.run import load_run
from rankscope.synth.ascend_run import write_run
from rankscope.synth.ascend_sim import AscendJob
from tests import torch_npu_oracle


class _Ev:  # the fields torch_npu's beans give create_torch_to_npu_flow
    def __init__(self, pid: int, tid: int, ts: int) -> None:
        self.pid, self.tid, self.ts = pid, tid, ts


def _flow_writer():
    torch_npu_oracle._import(torch_npu_oracle.unpacked())
    from torch_npu.profiler.analysis.prof_common_func._trace_event_manager import (  # type: ignore[import-not-found]
        TraceEventManager)
    return TraceEventManager.create_torch_to_npu_flow


def _x(name, pid, tid, ts_ns, dur_ns, **kw):
    return {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": f"{ts_ns // 1000}.{ts_ns % 1000:03d}",
            "dur": dur_ns / 1000, **kw}


def test_launch_links_follow_torch_npus_own_flows(tmp_path):
    """One torch op launching tasks on two streams that start at the same time (torch_npu ids a flow by its task's
    start, so the two flows share an id), another op launching one task; an HCCL operation without a flow."""
    flow = _flow_writer()
    t0 = 1_735_689_600_000_000_000
    meta = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": n}}
            for p, n in ((10, "Python"), (20, "Ascend Hardware"), (30, "HCCL"))]
    meta.append({"ph": "M", "name": "thread_name", "pid": 30, "tid": 7, "args": {"name": "Group 123 Communication"}})
    op_a, op_b = _Ev(10, 1, t0 + 1_000), _Ev(10, 1, t0 + 9_000)
    k1, k2, k3 = _Ev(20, 2, t0 + 50_000), _Ev(20, 5, t0 + 50_000), _Ev(20, 2, t0 + 90_000)
    evs = meta + [_x("aten::a", 10, 1, op_a.ts, 5_000, cat="cpu_op"),
                  _x("aten::b", 10, 1, op_b.ts, 5_000, cat="cpu_op"),
                  _x("KernelA1", 20, 2, k1.ts, 30_000), _x("KernelA2", 20, 5, k2.ts, 30_000),
                  _x("KernelB", 20, 2, k3.ts, 10_000), _x("hcom_allReduce__123_0_1@123", 30, 7, t0 + 120_000, 40_000)]
    evs += flow(op_a, k1) + flow(op_a, k2) + flow(op_b, k3)
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(evs))
    from rankscope.model import tables

    tabs, problems = tables.build(reader.read_trace_view(path))
    ev = {n: r for n, r in zip(tabs["events"].column("name").to_pylist(), tabs["events"].to_pylist())}
    assert {n: ev[n]["stream"] for n in ("KernelA1", "KernelA2", "KernelB")} == {"KernelA1": 2, "KernelA2": 5,
                                                                                   "KernelB": 2}
    assert ev["hcom_allReduce__123_0_1@123"]["stream"] == GROUP_STREAMS + 123  # its group's lane
    assert ev["aten::a"]["correlation"] in (ev["KernelA1"]["correlation"], ev["KernelA2"]["correlation"])
    assert ev["KernelA1"]["correlation"] != ev["KernelA2"]["correlation"]  # both flows kept, though one id
    assert min(ev["KernelA1"]["correlation"], ev["KernelA2"]["correlation"]) >= 0
    assert ev["aten::b"]["correlation"] == ev["KernelB"]["correlation"] >= 0
    assert ev["hcom_allReduce__123_0_1@123"]["correlation"] == -1  # no flow: the path gives it an id of its own


def _step_ms(run) -> float:
    """The run's own step time: ProfilerStep spans, median over steps and ranks."""
    return statistics.median((e - s) / 1e6 for r in run.rank_ids
                             for s, e in zip(run.table(r, "steps").column("ts").to_pylist(),
                                             run.table(r, "steps").column("end").to_pylist()))


@pytest.mark.parametrize("slow_link", [(0, 1), None], ids=["with-slow-link", "no-slow-link"])
def test_what_if_of_the_slow_rank_is_the_run_without_it(tmp_path, slow_link):
    """Rank 3 computes 1.35x longer. Its what-if (the step if it ran at the other ranks' median) is within 5 % of the
    step of the same job simulated without the slow rank, it bounds the steps, and the verdict names it."""
    runs = {}
    for name, slow in (("slow", 3), ("twin", None)):
        write_run(tmp_path / name, AscendJob(slow_rank=slow, slow_link=slow_link))
        runs[name] = load_run(tmp_path / name, jobs=1, cache_dir=tmp_path / f"cache-{name}")
    res = run_all(runs["slow"])
    cp = res["critical_path"]
    assert cp.skipped is None and not cp.summary["problems"], (cp.skipped, cp.summary.get("problems"))
    wi = {w["rank"]: w for w in cp.summary["what_if"]}
    truth = _step_ms(runs["twin"])
    assert abs(wi[3]["step_ms_if_median"] - truth) <= 0.05 * truth, (wi[3], truth)
    assert _step_ms(runs["slow"]) - truth > 0.04 * truth  # the delay is there to be found
    assert cp.summary["bounding_rank"] == 3
    assert [f.ranks for f in res["straggler"].findings] == [(3,)], res["straggler"].summary["verdict"]
    twin = run_all(runs["twin"], ["critical_path"])["critical_path"].summary
    assert all(w["step_ms"] - w["step_ms_if_median"] < 0.02 * w["step_ms"] for w in twin["what_if"]), twin["what_if"]


def test_db_export_gives_the_same_path(tmp_path):
    """torch_npu's DB export links tasks by connection ids: the same what-if as the text export's flows."""
    got = {}
    for form in ("text", "db"):
        write_run(tmp_path / form, AscendJob(slow_link=None), form=form)
        run = load_run(tmp_path / form, jobs=1, cache_dir=tmp_path / f"cache-{form}")
        got[form] = run_all(run, ["critical_path"])["critical_path"].summary["what_if"]
    assert got["db"] == got["text"]


def test_p2p_that_both_ranks_send_first_is_not_a_cycle(tmp_path):
    """8 ranks, TP 2 x PP 4 (`rankscope synth --format ascend`): each pipeline group pairs two ranks that both send
    before they receive. Met as rendezvous, their sends wait for each other; joined as eager sends, every step is
    built and no step is lost."""
    import subprocess

    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rankscope.cli", "synth", str(run), "--format", "ascend", "--ranks",
                           "8", "--gpus-per-host", "4", "--straggler", "5:compute:1.4"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cp = run_all(load_run(run, jobs=1), ["critical_path"])["critical_path"]
    assert cp.skipped is None and not cp.summary["problems"], cp.summary.get("problems")
    assert len(cp.summary["per_step"]) == 3


def test_a_real_torch_npu_trace_links_its_tasks(shared_data, tmp_path):
    """../shared/data/ascend_msprof/trace_view.json.gz (a real torch_npu trace, from msprof-analyze's test resources):
    274 tasks on the Ascend Hardware layer, each with an `async_npu` and a `HostToDevice` flow. Every task with a flow
    gets its launch and its stream; the NPU's layers are one pid."""
    import gzip

    tv = tmp_path / "trace_view.json"
    tv.write_bytes(gzip.decompress((shared_data / "ascend_msprof" / "trace_view.json.gz").read_bytes()))
    doc = json.loads(tv.read_text())
    doc = doc["traceEvents"] if isinstance(doc, dict) else doc
    flows = {e["id"] for e in doc if e.get("ph") == "f" and e.get("cat") == "async_npu"}
    from rankscope.model import tables

    tabs, _ = tables.build(reader.read_trace_view(tv))
    ev = tabs["events"].to_pydict()
    tasks = [i for i, k in enumerate(ev["kind"]) if k == "kernel"]
    linked = [i for i in tasks if ev["correlation"][i] >= 0]
    assert len(flows) == 274 and len(linked) == len(flows) <= len(tasks)
    assert all(ev["stream"][i] >= 0 for i in tasks) and len({ev["pid"][i] for i in tasks}) == 1
    hosts = {ev["correlation"][i] for i, k in enumerate(ev["kind"]) if k != "kernel" and 0 <= ev["correlation"][i]}
    launch = {c for c in hosts if c < QUEUE_IDS}
    assert launch and launch <= {ev["correlation"][i] for i in linked}  # each host op's id is one of its tasks'
    # the rest pair the task queue's 148 Enqueue / Dequeue (tests/unit/test_ascend_task_queue.py)
    queued = [n.split("@")[0] for n, c in zip(ev["name"], ev["correlation"]) if c >= QUEUE_IDS]
    assert len(hosts - launch) == 148 and sorted(set(queued)) == ["Dequeue", "Enqueue"] and len(queued) == 296
