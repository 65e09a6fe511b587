"""Issues 15 and 23: RPC profiling across workers, on real 3-worker TensorPipe RPC jobs over loopback.

``rpc_job.py`` runs worker0 (the caller) and two callees in their own processes. worker1's RPC clock
is shifted by +50 ms on purpose (``RANKSCOPE_RPC_CLOCK_SHIFT_NS`` in its environment: rankscope's RPC
timestamps and events on that worker read wall time plus the shift), so remote events placed without
the estimated offset would fall 50 ms away from the caller's span, far outside it.

``rpc_selfprof_job.py`` (issue 23): a trainer calls two parameter servers under
``rankscope.rpc.profile()`` while one server runs a profiler of its own (before: SIGSEGV at that
server's profiler stop, every run). Timeouts here only catch a hang.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import contextlib
import tempfile
from concurrent.futures import ThreadPoolExecutor
import threading
import time

import pytest

from rankscope.collect.rpc.callee import GAP
from rankscope.collect.rpc.state import OWN_RANKSCOPE, OWN_TORCH
from tests.fixtures_s3 import free_port

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
SHIFT_NS = 50_000_000
KINETO_INIT_ERROR = "External init callback must run in same thread as registerClient"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out, run = tmp_path_factory.mktemp("rpc"), tmp_path_factory.mktemp("rpcrun") / "run"
    port = str(free_port())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    procs = [subprocess.Popen([sys.executable, str(HERE / "rpc_job.py"), str(r), port, str(out), str(run)],
                              env={**env, **({"RANKSCOPE_RPC_CLOCK_SHIFT_NS": str(SHIFT_NS)} if r == 1 else {})},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(3)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=120)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-3000:] for x in logs)
    res = json.loads((out / "result.json").read_text())
    return {"res": res, "out": out, "run": run, "calls": res["calls"], "logs": logs}


def test_no_worker_starts_kineto_from_an_rpc_thread(job):
    # worker1 and worker2 never profile themselves: before issue 23 their first Kineto start was the
    # callee's, on an RPC thread, and Kineto printed this error (docs/rpc.md)
    assert not [i for i, log in enumerate(job["logs"]) if KINETO_INIT_ERROR in log]


def _call(calls, prefix):
    found = [c for c in calls if c["name"].startswith(prefix)]
    assert found, [c["name"] for c in calls]
    return found[0]


def test_results_are_the_functions_own(job):
    r = job["res"]
    assert r["sync_ok"] and r["async_ok"] and r["remote_ok"] and r["nested_ok"] and r["gap_ok"]


def test_remote_matmul_in_the_callers_table_under_the_remote_node(job):
    table = (job["out"] / "table.txt").read_text()
    assert "Node ID" in table.splitlines()[1]
    row = next(line for line in table.splitlines()
               if line.startswith("rpc_sync#remote_mm(worker0 -> worker1)#remote_op: aten::mm"))
    cells = row.split()
    assert cells[-1] == "1" and cells[-2] == "1"  # node 1 (worker1), one call
    local = next(line for line in table.splitlines() if line.startswith("aten::mm "))
    assert local.split()[-1] == "0"  # the caller's own matmuls stay on node 0
    # plausible time, whatever the machine's load: at least what a 384x384 matmul (113 MFLOP) takes at 450
    # GFLOP/s, more than this machine's two cores can do (a unit read as us instead of ns would be 1000x
    # under it), and inside the callee's own time for that call, inside the caller's round trip (a unit
    # 1000x over would break that). Not a ratio to the local matmul's average: beside a second fresh suite
    # (load 7-8) one remote call took 122.6 ms against a local average of 1.64 ms, a stall, not a bug.
    call = _call(job["calls"], "rpc_sync#remote_mm(worker0 -> worker1)")
    mm = [e for e in call["events"] if e["name"] == "aten::mm"]
    assert len(mm) == 1 and mm[0]["worker"] == "worker1" and mm[0]["worker_id"] == 1
    assert 2 * 384 ** 3 / 450e9 * 1e9 < mm[0]["dur"] <= call["remote_ns"] <= call["t_done"] - call["t_send"]


def test_trace_has_remote_events_inside_the_callers_span_in_the_workers_lane(job):
    doc = json.loads((job["out"] / "trace.json").read_text())
    ev = doc["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    assert names[1].startswith("worker0 (local") and names[2].startswith("worker1 (remote") \
        and names[3].startswith("worker2 (remote")
    spans = {e["name"]: e for e in ev if e.get("cat") == "rpc"}
    remote = [e for e in ev if e.get("cat") == "remote_op"]
    assert {e["pid"] for e in remote} == {2, 3}
    checked = 0
    for e in remote:
        span = spans[e["args"]["call"]]
        assert e["pid"] == e["args"]["node_id"] + 1  # each worker's events in its own lane
        assert span["ts"] - 0.002 <= e["ts"] and e["ts"] + e["dur"] <= span["ts"] + span["dur"] + 0.002, (e, span)
        checked += 1
    assert checked >= 15


def test_shifted_clock_is_recovered_within_the_error_bound(job):
    w1 = [c for c in job["calls"] if c.get("dst") == "worker1" and c.get("depth") == 0 and "offset_ns" in c]
    assert len(w1) >= 4
    for c in w1:
        assert abs(c["offset_ns"] - SHIFT_NS) <= c["error_ns"], c
        assert c["t_recv_remote"] - c["t_send"] > SHIFT_NS - 25_000_000  # raw stamps really are shifted
    # the bound is informative: NTP's best (least-delayed) call bounds the offset well under the shift.
    # Not every call: on a loaded machine one call's round trip alone can exceed 50 ms (seen: 51.6 ms)
    assert min(c["error_ns"] for c in w1) < SHIFT_NS // 2
    w2 = _call(job["calls"], "remote#remote_mm(worker0 -> worker2)")
    assert abs(w2["offset_ns"]) <= w2["error_ns"]  # the unshifted worker: offset about 0


def test_exception_in_the_remote_function_reaches_the_caller_unchanged(job):
    r = job["res"]
    assert r["profiled_exc"] == r["plain_exc"]
    assert r["profiled_exc"][0] == "ValueError" and "remote failure 7" in r["profiled_exc"][1][1]
    assert _call(job["calls"], "rpc_sync#fails")["status"] == "error"
    assert r["profiled_remote_exc"] == r["plain_remote_exc"]  # remote(): raised by to_here(), as without rankscope
    assert _call(job["calls"], "remote#fails")["status"] == "error"
    assert r["profiled_remote_exc"][0] == "ValueError" and "remote failure 8" in str(r["profiled_remote_exc"])


def test_patches_are_in_place_only_while_profiling(job):
    r = job["res"]
    assert (r["patched_before"], r["patched_during"], r["patched_after"], r["patched_after_run"]) == \
        (False, True, False, False)
    assert r["torch_fns_after"] == r["torch_fns"] and r["torch_fns"]["rpc_sync"] == "torch.distributed.rpc.api.rpc_sync"


def test_nested_rpc_is_profiled_and_placed_inside_the_outer_call(job):
    outer = _call(job["calls"], "rpc_sync#calls_third(worker0 -> worker1)")
    inner = _call(job["calls"], "rpc_sync#remote_mm(worker1 -> worker2)")
    assert inner["depth"] == 1 and outer["depth"] == 0
    # the nested offset is worker2's clock minus worker1's: about -50 ms
    assert abs(inner["offset_ns"] + SHIFT_NS) <= inner["error_ns"]
    assert outer["t_send"] <= inner["t_send"] <= inner["t_done"] <= outer["t_done"]
    mm = [e for e in inner["events"] if e["name"] == "aten::mm"]
    assert mm and mm[0]["worker"] == "worker2"
    assert inner["t_send"] <= mm[0]["ts"] and mm[0]["ts"] + mm[0]["dur"] <= inner["t_done"]
    assert any(e["name"].startswith("rpc_sync#remote_mm(worker1 -> worker2)") for e in outer["events"])


def test_a_nested_call_through_torchs_own_function_runs_and_is_not_captured(job):
    assert job["res"]["bound_ok"]
    outer = _call(job["calls"], "rpc_sync#calls_third_bound(worker0 -> worker1)")
    assert outer["status"] == "ok" and any(e["name"] == "aten::add" for e in outer["events"])
    # not captured: no nested call record, and torch's own remote events are not taken for worker1's
    assert not [c for c in job["calls"] if c.get("depth") == 1 and c["t_send"] >= outer["t_send"]
                and c["t_done"] <= outer["t_done"]]
    assert not [e for e in outer["events"] if "#remote_op" in e["name"] or e["name"] == "aten::mm"]


def test_a_callee_that_cannot_profile_answers_and_the_gap_is_noted(job):
    r = job["res"]
    # busy: worker1 calls back into worker0, whose own profile holds the profiler
    assert r["busy_ok"]
    back = _call(job["calls"], "rpc_sync#remote_mm(worker1 -> worker0)")
    assert back["depth"] == 1 and back["events"] == [] and back["status"] == "unprofiled"
    assert back["gap"] == GAP + OWN_RANKSCOPE
    assert r["gaps"] == [f"nested {back['name']}: {GAP + OWN_RANKSCOPE}"]
    assert r["gap_ok"]
    assert len(r["gap_gaps"]) == 1 and "worker2 cannot run profiled calls" in r["gap_gaps"][0]
    assert "rankscope" in r["gap_gaps"][0]
    assert [c["status"] for c in r["gap_calls"]] == ["unprofiled"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rankscope.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(HERE.parents[1])})


def test_run_directory_analyze_report_and_timeline_show_the_rpc_calls(job, tmp_path):
    run = job["run"]
    assert [p.name for p in run.glob("ranks/0/rpc.*.json.gz")] == ["rpc.0000.json.gz"]
    a = _cli("analyze", str(run), "--json")
    assert a.returncode == 0, a.stderr
    rpc = json.loads(a.stdout)["analyses"]["rpc"]
    assert rpc["skipped"] is None and rpc["summary"]["calls"] == 6 and rpc["summary"]["destinations"] == 1
    assert 0 < rpc["summary"]["remote_ns"] and 0 < rpc["summary"]["network_ns"]
    text = _cli("analyze", str(run))
    assert "worker0 -> worker1: 6 calls" in text.stdout, text.stdout
    rep = _cli("report", str(run), "-o", str(tmp_path / "r.html"))
    assert rep.returncode == 0, rep.stderr
    html = (tmp_path / "r.html").read_text()
    assert 'data-view="rpc"' in html and "RPC calls across workers" in html and "slowest functions" in html
    tl = _cli("timeline", str(run), "-o", str(tmp_path / "t.json"), "--format", "json")
    assert tl.returncode == 0, tl.stderr
    ev = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    lane = [e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"
            and e["args"]["name"].startswith("remote worker1")]
    assert len(lane) == 1
    spans = [e for e in ev if e["ph"] == "X" and e["name"].startswith(("rpc_sync#remote_mm", "rpc_async#remote_mm"))
             and e["tid"] != lane[0]]
    mms = [e for e in ev if e["ph"] == "X" and e["tid"] == lane[0] and e["name"] == "aten::mm"]
    assert len(spans) == 6 and len(mms) == 6
    for m in mms:  # each remote matmul inside one of the caller's RPC spans, after the offset
        assert any(s["ts"] <= m["ts"] and m["ts"] + m["dur"] <= s["ts"] + s["dur"] + 0.002 for s in spans), m


def _selfprof(tmp: Path, mode: str, calls: int, hang_s: float = 270, port: int | None = None) -> dict:
    """Run rpc_selfprof_job.py's three workers; their exit codes, outputs and result files. A worker
    that dies takes the others down with it (they would wait for it in rpc.shutdown): 60 s, then killed.
    ``hang_s`` ends a hung job before the suite's own 300 s per test (pytest-timeout) would."""
    port = str(port or free_port())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    own: dict[str, str] = {}
    if mode == "ondemand":  # Kineto's on-demand client, asking the job's stand-in dynolog for its config
        own = {"KINETO_USE_DAEMON": "1", "KINETO_IPC_SOCKET_DIR": tempfile.mkdtemp(prefix="dy", dir="/tmp")}
    extra = [{}, own, {"RANKSCOPE_RPC_CLOCK_SHIFT_NS": str(SHIFT_NS)}]  # the plain server's clock shifted, as in #23
    logs = [open(tmp / f"log{r}.txt", "w+") for r in range(3)]
    procs = [subprocess.Popen([sys.executable, str(HERE / "rpc_selfprof_job.py"), str(r), port, str(tmp), mode,
                               str(calls)], env={**env, **extra[r]}, stdout=logs[r],
                              stderr=subprocess.STDOUT) for r in range(3)]
    t0, died = time.monotonic(), None
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() - t0 < hang_s:
            if died is None and any(p.poll() not in (None, 0) for p in procs):
                died = time.monotonic()
            if died is not None and time.monotonic() - died > 60:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        rcs = [p.wait() for p in procs]
    text = [(f.seek(0), f.read())[1] for f in logs]
    for f in logs:
        f.close()
    res = [json.loads(p.read_text()) if (p := tmp / f"worker{r}.json").exists() else None for r in range(3)]
    return {"rcs": rcs, "logs": text, "trainer": res[0], "server": res[1]}


def _all_exit_zero(r: dict) -> None:
    assert r["rcs"] == [0, 0, 0], "\n".join(f"--- worker{i} rc={rc}\n{log[-3000:]}"
                                            for i, (rc, log) in enumerate(zip(r["rcs"], r["logs"])))
    assert not [i for i, log in enumerate(r["logs"]) if KINETO_INIT_ERROR in log or "Segmentation" in log]


@pytest.mark.parametrize("mode", ["profiler", "autograd"])
def test_a_server_with_its_own_profiler_answers_unprofiled_and_keeps_its_profile(tmp_path, mode):
    calls = 50
    r = _selfprof(tmp_path, mode, calls)
    _all_exit_zero(r)
    server, trainer = r["server"], r["trainer"]
    # its own profile is whole: every step of its own loop, each span with its matmul (main thread only)
    assert server["steps"] > 0 and server["own"]["ps_own_step"] == server["steps"]
    assert server["own"]["aten::mm"] == server["steps"] and server["own"]["rpc remote#ps_work"] == 0
    assert trainer["results_ok"]
    ps, plain = trainer["by_dst"]["worker1"], trainer["by_dst"]["worker2"]
    # the trainer's profile marks each call to it as not profiled remotely, with the reason
    assert ps["calls"] == calls and ps["status"] == {"unprofiled": calls} and ps["events"] == 0
    assert ps["gaps"] == [GAP + OWN_TORCH] and trainer["gaps"] == [f"worker1: {GAP + OWN_TORCH}"]
    # ... and holds the other server's remote events: one remote matmul per call
    assert plain["calls"] == calls and plain["status"] == {"ok": calls} and plain["mm"] == calls
    # the server said why once, on its own output
    assert sum(OWN_TORCH in line for line in r["logs"][1].splitlines()) == 1


@pytest.mark.parametrize("mode", ["direct", "ondemand"])
def test_profilers_torch_cannot_report_to_another_thread_stay_whole(tmp_path, mode):
    """``_enable_profiler`` called directly and Kineto's on-demand trace set no flag another thread can
    read: the calls are recorded as usual (the callee's recorder never touches Kineto) and both profiles
    keep their events. ondemand: the dynolog daemon is stood in for by the job (StandInDynolog), Kineto's
    on-demand path is the real one."""
    r = _selfprof(tmp_path, mode, 50 if mode == "direct" else 3000)
    _all_exit_zero(r)
    server, trainer = r["server"], r["trainer"]
    ps, plain = trainer["by_dst"]["worker1"], trainer["by_dst"]["worker2"]
    assert trainer["results_ok"] and ps["status"] == {"ok": ps["calls"]} and ps["mm"] == ps["work"] > 0
    assert plain["status"] == {"ok": plain["calls"]} and plain["mm"] == plain["work"] == plain["calls"]
    if mode == "direct":
        assert server["own"]["ps_own_step"] == server["steps"] > 0 == server["own"]["rpc remote#ps_work"]
    else:  # a 2 s window of the run: its own steps, and the calls it served (global callbacks see every thread)
        assert server["own"]["ps_own_step"] > 0 and server["own"]["rpc remote#ps_work"] > 0


@pytest.mark.timeout(1500)  # 5 rounds of 2 jobs, each ended by _selfprof at 270 s if hung: only a hang reaches it
def test_no_crash_at_shutdown_ten_runs(tmp_path):
    """Ten runs (#23), each asserted on its own: every worker exits 0, the server's own profile is whole
    and the trainer got its 5 remote matmuls. Two jobs run side by side (own ports and folders: the suite's
    time, #23 test time); the crash this guards against came at each server's own profiler stop."""
    # distinct ports below the ephemeral range (free_port): a run's TensorPipe listeners cannot take the next's
    ports, dirs = [free_port() for _ in range(10)], [tmp_path / f"run{i}" for i in range(10)]
    for d in dirs:
        d.mkdir()
    with ThreadPoolExecutor(2) as ex:
        runs = list(ex.map(lambda i: _selfprof(dirs[i], "profiler", 5, port=ports[i]), range(10)))
    bad = []
    for i, r in enumerate(runs):
        try:
            _all_exit_zero(r)
            assert r["server"]["own"]["ps_own_step"] == r["server"]["steps"] > 0, r["server"]
            assert r["trainer"]["by_dst"]["worker2"]["mm"] == 5, r["trainer"]
        except AssertionError as e:
            bad.append(f"run {i}: {e}")
    assert not bad, "\n".join(bad)


def _on_a_thread(fn):
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(120)
    return out[0]


def test_the_callee_recorder_leaves_a_running_torch_profiler_whole():
    """The root cause of #23 in one process: a call recorded on another thread while torch.profiler runs
    (before: a torch.profiler session per call there preempted this one; its stop crashed)."""
    import torch

    from rankscope.collect.rpc.threadrec import ThreadRecorder

    def call() -> list:
        rec = ThreadRecorder({"record_shapes": True})
        rec.start()
        with torch.profiler.record_function("rpc remote#f"):
            torch.mm(torch.ones(8, 8), torch.ones(8, 8))
        rec.stop()
        return rec.events("rpc remote#f")

    x = torch.ones(4, 4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(3):
            with torch.profiler.record_function("own_step"):
                torch.mm(x, x)
        events = _on_a_thread(call)
        torch.mm(x, x)
    own = [e.name() for e in p.profiler.kineto_results.events()]
    assert own.count("own_step") == 3 and own.count("aten::mm") == 4 and "rpc remote#f" not in own
    mm = [e for e in events if e["name"] == "aten::mm"]
    assert events[0]["name"] == "rpc remote#f" and len(mm) == 1 and mm[0]["shapes"] == [[8, 8], [8, 8]]
    assert mm[0]["depth"] == 1 and events[0]["ts"] <= mm[0]["ts"] and mm[0]["dur"] <= events[0]["dur"]


@pytest.mark.parametrize("how", ["torch.profiler", "torch.autograd.profiler", "none"])
def test_own_profiler_is_seen_from_another_thread(how):
    import torch

    from rankscope.collect.rpc.state import own_profiler_reason

    ctx = {"torch.profiler": lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]),
           "torch.autograd.profiler": torch.autograd.profiler.profile, "none": contextlib.nullcontext}[how]
    with ctx():
        with torch.profiler.record_function("own"):  # a span of its own under it
            seen = _on_a_thread(own_profiler_reason)
    assert seen == (None if how == "none" else OWN_TORCH)
    assert _on_a_thread(own_profiler_reason) is None  # stopped: calls are profiled again
