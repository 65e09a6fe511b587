"""Issue 15, the pure parts: NTP offset per call, self time, the Node ID table, the Chrome lanes, the
patches and the pass-through of the wrappers, and the "rpc" analysis on hand-built run files."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from rankscope.collect.rpc import chrome, table
from rankscope.collect.rpc.callee import with_self_time
from rankscope.collect.rpc.offset import Estimate, best, estimate


def test_symmetric_delays_give_the_exact_offset_and_the_delay_as_error():
    # callee 1,000,000 ns ahead; 30 µs each way; 200 µs in the callee
    t1 = 10_000_000
    t2 = t1 + 30_000 + 1_000_000
    t3 = t2 + 200_000
    t4 = t3 - 1_000_000 + 30_000
    e = estimate(t1, t2, t3, t4)
    assert e == Estimate(offset_ns=1_000_000, error_ns=30_000, remote_ns=200_000, network_ns=60_000)


@pytest.mark.parametrize("there,back", [(10_000, 90_000), (90_000, 10_000), (0, 50_000)])
def test_asymmetric_delays_stay_within_the_error_bound(there, back):
    true = -7_000_000
    t1 = 5_000_000_000
    t2 = t1 + there + true
    t3 = t2 + 123_000
    t4 = t3 - true + back
    e = estimate(t1, t2, t3, t4)
    assert abs(e.offset_ns - true) <= e.error_ns
    assert e.error_ns == (there + back) // 2 and e.network_ns == there + back


def test_remote_interval_is_clamped_inside_the_callers_span():
    # callee reports more time than the whole round trip (a faster-running clock): squeezed into the span
    e = estimate(0, 1_000, 3_000, 1_500)
    assert e.remote_ns == 1_500 and e.error_ns == 0
    assert 0 <= 1_000 - e.offset_ns and 1_000 + e.remote_ns - e.offset_ns <= 1_500


def test_best_estimate_is_the_one_with_the_smallest_error():
    a, b = Estimate(10, 500, 1, 1), Estimate(12, 20, 1, 1)
    assert best([a, b]) is b and best([]) is None


def test_self_time_and_depth_of_nested_events():
    ev = [{"name": "outer", "ts": 0, "dur": 100}, {"name": "a", "ts": 10, "dur": 30},
          {"name": "a.1", "ts": 15, "dur": 10}, {"name": "b", "ts": 50, "dur": 40}, {"name": "next", "ts": 120, "dur": 5}]
    out = {e["name"]: (e["self"], e["depth"]) for e in with_self_time(ev)}
    assert out == {"outer": (30, 0), "a": (20, 1), "a.1": (10, 2), "b": (40, 1), "next": (5, 0)}


def _call(name="rpc_sync#mm(worker0 -> worker1)", dst="worker1", dst_id=1, t=1_000_000, off=0, **kw):
    evs = [{"name": "rpc remote#mm", "ts": t + 100, "dur": 800, "self": 100, "worker": dst, "worker_id": dst_id},
           {"name": "aten::mm", "ts": t + 150, "dur": 700, "self": 700, "worker": dst, "worker_id": dst_id}]
    return {"kind": "rpc_sync", "name": name, "fn": "mm", "src": "worker0", "src_id": 0, "dst": dst, "dst_id": dst_id,
            "t_send": t, "t_done": t + 1_000, "offset_ns": off, "error_ns": 100, "remote_ns": 800, "network_ns": 200,
            "status": "ok", "gap": None, "depth": 0, "events": evs, **kw}


def test_table_has_local_and_remote_rows_with_their_node_ids():
    local = [SimpleNamespace(key="aten::mm", self_cpu_time_total=2.0, cpu_time_total=2.0, count=1)]
    rows = table.local_rows(local, 0) + table.remote_rows([_call(), _call(t=5_000_000)])
    text = table.render(rows, sort_by="cpu_time_total")
    lines = text.splitlines()
    assert lines[1].split()[0] == "Name" and lines[1].rstrip().endswith("# of Calls  Node ID")
    remote = next(x for x in lines if x.startswith("rpc_sync#mm(worker0 -> worker1)#remote_op: aten::mm"))
    assert remote.split()[-2:] == ["2", "1"]  # two calls, node 1
    assert remote.split()[-3] == "0.700us"  # average per call
    first = lines[3]
    assert first.startswith("aten::mm ") and first.split()[-1] == "0"  # 2 µs local: the largest CPU total
    assert text.rstrip().endswith("Self CPU time total: 3.600us")  # 2 µs local + 2 x (100 + 700) ns remote


def test_chrome_trace_gives_each_remote_worker_a_lane_inside_the_callers_span():
    calls = [_call(), _call("rpc_async#mm(worker0 -> worker2)", "worker2", 2, t=1_000_500),
             {"kind": "rpc_sync", "name": "rpc_sync#mm", "dst": "worker3", "dst_id": 3, "t_send": 2_000_000,
              "t_done": 2_000_000, "status": "unprofiled", "gap": "why", "events": []}]
    doc = chrome.trace([{"name": "aten::add", "ts": 999_000, "dur": 10, "tid": 7}], calls, "worker0", 0)
    ev = doc["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert set(procs) == {1, 2, 3} and "worker1 (remote" in procs[2] and "worker2 (remote" in procs[3]
    spans = {e["name"]: e for e in ev if e.get("cat") == "rpc"}
    # the two overlapping calls on different lanes of the caller's "rpc calls" track
    assert spans["rpc_sync#mm(worker0 -> worker1)"]["tid"] != spans["rpc_async#mm(worker0 -> worker2)"]["tid"]
    for e in (e for e in ev if e.get("cat") == "remote_op"):
        s = spans[e["args"]["call"]]
        assert e["pid"] == e["args"]["node_id"] + 1
        assert s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"]
    assert doc["metadata"]["rankscope"]["base_ns"] == 999_000


def test_patches_are_counted_and_restore_torchs_functions():
    import torch.distributed.rpc as rpc

    from rankscope.collect.rpc import state
    from rankscope.collect.rpc.calls import Recorder

    before = (rpc.rpc_sync, rpc.rpc_async, rpc.remote, rpc.api.rpc_sync)
    rec = Recorder({"record_shapes": True})
    state.activate(rec)
    try:
        assert rpc.rpc_sync is state.rpc_sync and rpc.api.remote is state.remote and state.patched()
        with pytest.raises(RuntimeError, match="already active"):
            state.activate(Recorder({}))
        with state.nested_scope(Recorder({}, nested=True)):  # a nested user: still patched after it leaves
            pass
        assert state.patched()
    finally:
        state.deactivate(rec)
    assert (rpc.rpc_sync, rpc.rpc_async, rpc.remote, rpc.api.rpc_sync) == before and not state.patched()


def test_wrappers_pass_straight_to_torch_when_nothing_records(monkeypatch):
    from rankscope.collect.rpc import state
    from rankscope.collect.rpc.calls import Recorder

    seen = []
    for n in state.NAMES:
        monkeypatch.setitem(state.TORCH, n, lambda *a, _n=n: seen.append((_n, a)) or "torch")
    assert state.rpc_sync("w1", len, ("ab",), None, 5.0) == "torch"
    assert state.rpc_async("w1", len, ("ab",)) == "torch" and state.remote("w1", len) == "torch"
    rec = Recorder({})
    rec.enabled = False  # a rankscope.profile between windows
    state.activate(rec)
    try:
        state.rpc_sync("w1", len, ("ab",))
    finally:
        state.deactivate(rec)
    assert seen == [("rpc_sync", ("w1", len, ("ab",), None, 5.0)), ("rpc_async", ("w1", len, ("ab",), None, state.UNSET_RPC_TIMEOUT)),
                    ("remote", ("w1", len, None, None, state.UNSET_RPC_TIMEOUT)),
                    ("rpc_sync", ("w1", len, ("ab",), None, state.UNSET_RPC_TIMEOUT))]


def _write_run(root: Path, calls, gaps=()):
    d = root / "ranks" / "0"
    d.mkdir(parents=True)
    doc = {"format": "rankscope.rpc/1", "rank": 0, "worker": "worker0", "worker_id": 0, "calls": calls,
           "gaps": list(gaps)}
    (d / "rpc.0000.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_rpc_analysis_per_destination_and_slowest_functions(tmp_path):
    from rankscope.analysis.comm.rpc import run_rpc

    slow = _call("rpc_sync#big(worker0 -> worker2)", "worker2", 2, t=3_000_000, off=-40, fn="big", t_done=3_090_000,
                 remote_ns=80_000, network_ns=10_000)
    _write_run(tmp_path, [_call(off=10), _call(t=2_000_000, off=30, status="error"), slow],
               gaps=["worker3: the callee's profiler was busy with another call"])
    r = run_rpc(SimpleNamespace(path=str(tmp_path)), {})
    assert r.skipped is None
    dest = {row["dst"]: row for row in r.tables["destinations"].iter_rows(named=True)}
    assert dest["worker1"]["calls"] == 2 and dest["worker1"]["errors"] == 1
    assert dest["worker1"]["offset_ns"] == 20 and dest["worker1"]["remote_ns"] == 1_600
    assert r.tables["functions"]["fn"].to_list() == ["big", "mm"]  # slowest first
    assert r.summary["remote_ns"] == 81_600 and r.summary["network_ns"] == 10_400
    assert [f.kind for f in r.findings] == ["rpc", "rpc_gap"] and "busy" in r.findings[1].title


def test_rpc_analysis_skipped_without_files_and_files_are_not_traces(tmp_path):
    from rankscope.analysis.comm.rpc import run_rpc
    from rankscope.model.discover import is_trace

    assert run_rpc(SimpleNamespace(path=str(tmp_path)), {}).skipped
    _write_run(tmp_path, [_call()])
    assert not is_trace(tmp_path / "ranks" / "0" / "rpc.0000.json.gz")


def test_rpc_view_is_optional():
    from rankscope.analysis.comm.rpc import ANALYSIS

    view = ANALYSIS.view
    assert view is not None and view.optional and {t.table for t in view.tables} == {
        "destinations", "functions", "remote_operators"}


def test_merged_timeline_gives_remote_events_their_lane_aligned_with_the_rank(tmp_path):
    from rankscope.model.run import load_run
    from rankscope.render.timeline import write_timeline
    from rankscope.render.tracks import RPC_BASE
    from tests.helpers import OFFSET_NS, tiny_run
    from tests.unit.test_render_timeline import parse_pftrace

    root = tiny_run(tmp_path / "tiny")
    # rank 1 called worker7; the remote matmul is on rank 1's clock (5 ms ahead of rank 0's), in its step 1
    call = _call("rpc_sync#mm(worker1 -> worker7)", "worker7", 7, t=1_010_000 + OFFSET_NS)
    doc = {"format": "rankscope.rpc/1", "rank": 1, "worker": "worker1", "worker_id": 1, "calls": [call], "gaps": []}
    (root / "ranks" / "1" / "rpc.0000.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
    run = load_run(root, jobs=1)
    tl = parse_pftrace(write_timeline(run, tmp_path / "m.pftrace").read_bytes())
    lanes = {td[1][0]: fields_name(td) for td in tl["tracks"].values() if 4 in td}
    remote = [u for u, name in lanes.items() if name == "remote worker7 (RPC, id 7)"]
    assert len(remote) == 1 and (remote[0] >> 32) == 2  # in rank 1's process
    mm = [e for e in tl["events"] if e["type"] == 1 and e["track"] == remote[0] and e["name"] == "aten::mm"]
    assert [e["ts"] for e in mm] == [1_010_000 + 150]  # rank 1's offset removed, like its own events
    doc_json = json.loads(write_timeline(run, tmp_path / "m.json", steps=[2]).read_text())
    assert not [e for e in doc_json["traceEvents"] if e.get("tid") == RPC_BASE + 7]  # outside step 2
    doc_json = json.loads(write_timeline(run, tmp_path / "m1.json", steps=[1]).read_text())
    assert len([e for e in doc_json["traceEvents"] if e.get("tid") == RPC_BASE + 7 and e["ph"] == "X"]) == 2


def fields_name(td: dict) -> str:
    from tests.unit.test_render_timeline import fields

    th = fields(td[4][0])
    return th[5][0].decode() if 5 in th else ""


def test_rankscope_profile_patches_only_with_rpc_on_and_marks_its_profiler():
    import rankscope
    from rankscope.collect.rpc import state

    with rankscope.profile(rpc=False):
        assert not state.patched() and state.own_profiler_running()  # a callee here would not start a second one
    with rankscope.profile() as prof:
        assert state.patched() and prof._rpc.recorder is not None and prof._rpc.recorder.enabled
    assert not state.patched() and not state.own_profiler_running() and prof.rpc_calls == []
