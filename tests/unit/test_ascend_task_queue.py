"""torch_npu's task queue on the critical path: a task is launched by the thread that dequeues its op's work.

The traces are written by torch_npu's own writer (``TraceEventManager.create_x_event``, ``create_task_queue_flow``,
``create_torch_to_npu_flow`` of the cached torch-npu wheel, tests/torch_npu_oracle.py), in the layout of
../shared/data/ascend_msprof/trace_view.json.gz: ops and their Enqueue on the training thread, each Dequeue@<op> on a
second thread with the CANN call inside it, the tasks on an Ascend Hardware stream, a ``torch_to_npu`` flow from each
op to its task.
"""
from __future__ import annotations

import gzip
import json
import statistics
from dataclasses import replace

import numpy as np
import pytest

from rankscope.analysis.deps import adapter, events, timed
from rankscope.cli import main
from rankscope.analysis.deps.gpu import E
from rankscope.analysis.deps.graph import window
from rankscope.analysis.deps.path import longest_path
from rankscope.analysis.registry import run_all
from rankscope.model import tables
from rankscope.model.readers.ascend import reader as ascend
from rankscope.model.readers.ascend import torch_npu as reader
from rankscope.model.run import load_run
from rankscope.model.schema import QUEUE_IDS
from rankscope.synth.ascend_run import write_run
from rankscope.synth.ascend_sim import AscendJob
from tests import torch_npu_oracle

US = 1_000
T0 = 1_735_689_600_000_000_000
MAIN, QUEUE, STREAM = 1, 2, 3


class _Ev:  # the fields torch_npu's beans give its TraceEventManager
    def __init__(self, name: str, pid: int, tid: int, ts: int, dur: int = 0, corr_id: int = -1) -> None:
        self.name, self.pid, self.tid, self.ts, self.dur, self.corr_id, self.args = name, pid, tid, ts, dur, corr_id, {}


def _writer():
    torch_npu_oracle._import(torch_npu_oracle.unpacked())
    from torch_npu.profiler.analysis.prof_common_func._trace_event_manager import (  # type: ignore[import-not-found]
        TraceEventManager)
    return TraceEventManager


def _trace(tmp_path, ops: int, gap_us: int, dequeue_us: int, wake_us: int, launch_us: int) -> tuple[dict, int]:
    """``ops`` ops ``gap_us`` apart on the training thread, each enqueuing its work; the queue thread dequeues each
    ``wake_us`` after its Enqueue or as soon as it is free, for ``dequeue_us``; each task starts ``launch_us`` into its
    Dequeue and runs 20 µs. After its last op the training thread blocks in a stream sync until the last task ends.
    Returns the
    events table and the step's end."""
    w = _writer()
    out = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": n}}
           for p, n in ((10, "Python"), (11, "CANN"), (20, "Ascend Hardware"))]
    free = T0
    tasks = []
    for i in range(ops):
        op = _Ev(f"aten::op{i}", 10, MAIN, T0 + 10 * US + i * gap_us * US, 10 * US)
        enq = _Ev("Enqueue", 10, MAIN, op.ts + 2 * US, 3 * US, corr_id=i)
        deq = _Ev(f"Dequeue@op{i}", 10, QUEUE, max(enq.ts + wake_us * US, free), dequeue_us * US, corr_id=i)
        free = deq.ts + deq.dur + 1 * US
        acl = _Ev(f"AscendCL@aclnnOp{i}", 11, QUEUE, deq.ts + 1 * US, dequeue_us * US - 2 * US)
        task = _Ev(f"Op{i}", 20, STREAM, deq.ts + launch_us * US, 20 * US)
        tasks.append(task)
        out += [w.create_x_event(op, "cpu_op"), w.create_x_event(enq, "enqueue"), w.create_x_event(deq, "dequeue"),
                w.create_x_event(acl, None), w.create_x_event(task, None),
                w.create_task_queue_flow("s", enq), w.create_task_queue_flow("f", deq)]
        out += w.create_torch_to_npu_flow(op, task)
    last = tasks[-1].ts + tasks[-1].dur
    sync_start = op.ts + op.dur + 2 * US
    sync = _Ev("AscendCL@aclrtSynchronizeStream", 11, MAIN, sync_start, max(last + 5 * US - sync_start, US))
    step_end = sync.ts + sync.dur + 10 * US
    step = _Ev("ProfilerStep#1", 10, MAIN, T0, step_end - T0)
    out += [w.create_x_event(sync, None), w.create_x_event(step, "cpu_op")]
    path = tmp_path / "run" / "node0_1_20250101_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(out))
    tabs, _ = tables.build(reader.read_trace_view(path))
    return tabs["events"], step_end


def _no_calls() -> adapter.Calls:
    z, o = np.zeros(0, np.int64), np.zeros(0, object)
    return adapter.Calls(key=o, op=o, kind=o, ts=z, end=z, dev_ts=z, dev_end=z, issue_ts=z, pg=o, seq=z)


def _path(table) -> tuple[events.RankEvents, dict[str, int], int]:
    """The rank's events, the longest path's weight by where it lies (the queue thread's own chain, the edges from an
    Enqueue to its Dequeue, launch edges into the device, the training thread, the device), and its length."""
    ev = events.from_table(table)
    g, _ = timed.rank_graph(ev, window(ev), _no_calls())
    p = longest_path(g)
    parts = {"queue thread": 0, "enqueue -> dequeue": 0, "launch": 0, "training thread": 0, "device": 0}
    for e in p.edges.tolist():
        s, d = g.node_ev[g.src[e]], g.node_ev[g.dst[e]]
        if g.typ[e] == E.LAUNCH:
            parts["enqueue -> dequeue" if ev.stream[d] < 0 else "launch"] += int(g.w[e])
        elif ev.stream[d] >= 0:
            parts["device"] += int(g.w[e])
        else:
            parts["queue thread" if ev.tid[d] == QUEUE and ev.tid[s] == QUEUE else "training thread"] += int(g.w[e])
    return ev, parts, p.length


def test_each_task_is_launched_by_its_dequeue(tmp_path):
    table, _ = _trace(tmp_path, ops=4, gap_us=20, dequeue_us=200, wake_us=5, launch_us=150)
    ev = events.from_table(table)
    tasks = np.flatnonzero(ev.stream >= 0)
    assert [ev.name_of(int(ev.partner[t])) for t in tasks] == [f"Dequeue@op{i}" for i in range(4)]
    deq = ev.partner[tasks]
    assert [ev.name_of(int(ev.queued_from[d])) for d in deq] == ["Enqueue"] * 4
    assert (ev.ts[ev.queued_from[deq]] < ev.ts[deq]).all()
    ops = np.flatnonzero(ev.name_has(("aten::op",)))
    assert (ev.partner[ops] == -1).all()  # the ops only enqueued


def test_a_backed_up_queue_puts_the_dequeuing_thread_on_the_path(tmp_path):
    """4 ops enqueue within 80 µs; each Dequeue takes 200 µs, so the work waits for the queue thread. The path runs
    through that thread's 4 Dequeues (about 800 µs), not through a launch edge from the training thread that nothing
    on any thread explains; its length is the step's."""
    table, step_end = _trace(tmp_path, ops=4, gap_us=20, dequeue_us=200, wake_us=5, launch_us=190)
    _, parts, length = _path(table)
    assert length == step_end - T0
    assert parts["queue thread"] >= 3 * 200 * US, parts  # the 3 Dequeues before the last one's launch
    assert parts["launch"] <= 190 * US and parts["enqueue -> dequeue"] <= 5 * US, parts


def test_an_idle_queue_thread_waits_for_the_work_and_carries_none_of_its_gaps(tmp_path):
    """Ops 300 µs apart, each Dequeue 20 µs, 8 µs after its Enqueue: the queue thread waits for work between
    Dequeues. Its gaps weigh nothing; the path reaches the last task from the training thread through its Enqueue
    (8 µs to the Dequeue)."""
    table, step_end = _trace(tmp_path, ops=4, gap_us=300, dequeue_us=20, wake_us=8, launch_us=15)
    ev, parts, length = _path(table)
    assert length == step_end - T0
    assert parts["enqueue -> dequeue"] == 8 * US, parts
    assert parts["queue thread"] <= 20 * US, parts  # at most the last Dequeue up to its launch
    assert parts["training thread"] >= 3 * 300 * US, parts


@pytest.mark.parametrize("wake_us", [0, 40])
def test_the_queue_never_shortens_the_step(tmp_path, wake_us):
    """Whatever the queue's timing, the weights add up to the step: the path's length is the step's."""
    table, step_end = _trace(tmp_path, ops=6, gap_us=30, dequeue_us=45, wake_us=wake_us, launch_us=30)
    assert _path(table)[2] == step_end - T0


def test_the_device_idle_gaps_of_a_backed_up_queue_are_the_dequeuing_threads(tmp_path):
    """The stream idles between tasks while the queue thread is still in the Dequeue that launches the next one: each
    gap is the host's (the launch came late), its event that Dequeue. Read from the op that torch_npu links the task
    to, each gap was "other": launched in time, nothing seen to wait for."""
    _trace(tmp_path, ops=4, gap_us=20, dequeue_us=200, wake_us=5, launch_us=190)
    res = run_all(load_run(tmp_path / "run", jobs=1, allow_missing_ranks=True), names=["gpu_gaps"])["gpu_gaps"]
    assert res.skipped is None, res.skipped
    gaps = res.tables["gaps"].sort("start").to_dicts()
    assert [(g["cause"], g["event"]) for g in gaps] == [("host", f"Dequeue@op{i}") for i in (1, 2, 3)]
    # late from the submission (each task starts 190 µs into its 200 µs Dequeue), not from the Dequeue's start: the
    # whole gap, 181 µs each
    assert [g["late"] for g in gaps] == [g["dur"] for g in gaps] == [181_000] * 3


def test_the_real_trace_dequeues_launch_its_tasks(shared_data, tmp_path):
    """../shared/data/ascend_msprof/trace_view.json.gz: 148 Enqueue -> Dequeue flows, all paired; the 146 tasks with
    a launch are launched by a Dequeue on the queue thread (439084), each after its Enqueue."""
    tv = tmp_path / "trace_view.json"
    tv.write_bytes(gzip.decompress((shared_data / "ascend_msprof" / "trace_view.json.gz").read_bytes()))
    tabs, _ = tables.build(reader.read_trace_view(tv))
    ev = events.from_table(tabs["events"])
    deq = np.flatnonzero(ev.queued_from >= 0)
    assert len(deq) == 148 and len(set(ev.tid[deq].tolist())) == 1
    assert (ev.ts[ev.queued_from[deq]] <= ev.ts[deq]).all()
    tasks = np.flatnonzero(ev.stream >= 0)
    launched = tasks[ev.partner[tasks] >= 0]
    assert len(launched) == 146 and set(ev.partner[launched].tolist()) <= set(deq.tolist())
    assert (ev.corr[ev.queued_from[deq]] >= QUEUE_IDS).all()


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    """The simulated 4-rank run (rank 3 computes 1.35x longer) with torch_npu's task queue, in both export forms."""
    root = tmp_path_factory.mktemp("queued")
    job = AscendJob(steps=(10, 11, 12), task_queue=True)
    return {"text": write_run(root / "text", job), "db": write_run(root / "db", job, form="db"),
            "twin": write_run(root / "twin", AscendJob(steps=(10, 11, 12), task_queue=True, slow_rank=None))}


def test_the_db_form_reads_the_task_queue_as_the_text_form(queued):
    """torch_npu's DB export keeps the queue as PYTORCH_API rows of type 50002 that share a connection id: the same
    events, with the same Enqueue / Dequeue pairs, as the text form's flows give."""
    for text_dir, db_dir in zip(queued["text"], queued["db"]):
        want, _, _ = ascend.read(text_dir)
        got, problems, _ = ascend.read(db_dir)
        assert not problems
        rows = [sorted((r["name"], r["ts"], r["dur"], r["correlation"]) for r in t["events"].to_pylist())
                for t in (want, got)]
        assert rows[0] == rows[1]
        pairs = [r for r in rows[0] if r[3] >= QUEUE_IDS]
        kernels = sum(1 for r in want["events"].to_pylist() if r["kind"] == "kernel" and r["stream"] < 1 << 30)
        assert len(pairs) == 2 * kernels > 0


def test_the_what_if_of_the_slow_rank_holds_with_a_task_queue(queued, tmp_path):
    """As tests/unit/test_critical_path_ascend.py without the queue: rank 3's what-if is within 5 % of the step of the
    job simulated without it, it bounds the steps, and both forms give the same what-if."""
    runs = {k: load_run(queued[k][0].parent, jobs=1, cache_dir=tmp_path / k) for k in queued}
    cp = {k: run_all(runs[k], ["critical_path"])["critical_path"].summary for k in ("text", "db")}
    assert cp["text"]["what_if"] == cp["db"]["what_if"] and not cp["text"]["problems"]
    truth = statistics.median((e - s) / 1e6 for r in runs["twin"].rank_ids
                              for s, e in zip(runs["twin"].table(r, "steps").column("ts").to_pylist(),
                                              runs["twin"].table(r, "steps").column("end").to_pylist()))
    wi = {w["rank"]: w for w in cp["text"]["what_if"]}
    assert abs(wi[3]["step_ms_if_median"] - truth) <= 0.05 * truth, (wi[3], truth)
    assert cp["text"]["bounding_rank"] == 3


def test_a_rank_whose_queue_thread_is_slow_is_named_with_its_dispatch(tmp_path):
    """Rank 1's queue thread takes 1.5 ms per Dequeue (the others 19 µs): its tasks wait to be launched, and its
    peers wait for it in the collectives (the simulated step +11 %). Named from the path, with its Dequeue and the
    dispatch advice; its what-if is within 5 % of the step of the job simulated without the slow thread, which names
    nobody. Without the queue on the path, rank 1's device waited for nothing the graph knew: "no straggler"."""
    base = AscendJob(task_queue=True, slow_rank=None, slow_link=None)
    write_run(tmp_path / "slow", replace(base, slow_dispatch=(1, 1500.0)))
    write_run(tmp_path / "twin", base)
    runs = {k: load_run(tmp_path / k, jobs=1, cache_dir=tmp_path / f"cache-{k}") for k in ("slow", "twin")}
    res = run_all(runs["slow"])
    cp = res["critical_path"].summary
    truth = statistics.median((e - s) / 1e6 for r in runs["twin"].rank_ids
                              for s, e in zip(runs["twin"].table(r, "steps").column("ts").to_pylist(),
                                              runs["twin"].table(r, "steps").column("end").to_pylist()))
    wi = {w["rank"]: w for w in cp["what_if"]}
    assert abs(wi[1]["step_ms_if_median"] - truth) <= 0.05 * truth and wi[1]["step_ms"] > 1.08 * truth, (wi[1], truth)
    assert cp["bounding_rank"] == 1 and cp["description"].startswith("rank 1's Dequeue@"), cp["description"]
    assert [f.ranks for f in res["straggler"].findings] == [(1,)]
    (advice,) = [f for f in res["advice"].findings if f.kind == "advice.straggler"]
    assert advice.ranks == (1,) and advice.evidence["cause"] == "dispatch"
    twin = run_all(runs["twin"])["straggler"]  # every analysis, as for the slow run: the verdict reads them
    assert not twin.findings and twin.summary["verdict"].startswith("no straggler"), twin.summary["verdict"]


@pytest.mark.parametrize("argv, error", [
    (["--task-queue", "--slow-dispatch", "1:x"], "US must be a number"),
    (["--slow-dispatch", "1:900"], "needs --task-queue"),
    (["--task-queue", "--slow-dispatch", "9:900"], "RANK below --ranks 4"),
])
def test_synth_slow_dispatch_says_what_is_wrong_in_one_line(tmp_path, capsys, argv, error):
    assert main(["synth", str(tmp_path / "out"), "--format", "ascend", "--ranks", "4", "--gpus-per-host", "2", *argv]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and error in err[0] and "Traceback" not in err[0], err


def test_synth_writes_a_task_queue_run_with_a_slow_dispatch(tmp_path):
    out = tmp_path / "out"
    assert main(["synth", str(out), "--format", "ascend", "--ranks", "4", "--gpus-per-host", "2", "--task-queue",
                 "--slow-dispatch", "2:900"]) == 0
    dirs = sorted(out.glob("*_ascend_pt"))
    durs = {}
    for r, d in enumerate(dirs):
        evs = json.loads((d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
        durs[r] = {round(float(e["dur"])) for e in evs if e.get("cat") == "dequeue"}
    assert len(dirs) == 4 and durs == {0: {18}, 1: {18}, 2: {899}, 3: {18}}


@pytest.mark.parametrize("ranks, per_node, slow, named", [
    (4, 2, (3, 3000.0), True),  # the last stage: its queue thread runs past the receive that starts its step
    (8, 4, (0, 3000.0), False),  # the first of 4 stages: the pipeline's slack hides all of it
])
def test_slow_dispatch_on_other_stages(tmp_path, ranks, per_node, slow, named):
    """Where the slow queue thread costs the step (+35 % in the simulation), that rank is named and its what-if is
    within 5 % of the job without it: every task hangs on its Dequeue's submission, so a rank whose queue thread
    ran ahead (no launch edge by HTA's rule) still has the paths the slow one is compared with. Where it costs
    nothing (the same step as the job without it), nobody is named, and the verdict says what it cost."""
    base = AscendJob(ranks=ranks, per_node=per_node, tp=2, task_queue=True, slow_rank=None, slow_link=None)
    write_run(tmp_path / "slow", replace(base, slow_dispatch=slow))
    write_run(tmp_path / "twin", base)
    runs = {k: load_run(tmp_path / k, jobs=1, cache_dir=tmp_path / f"cache-{k}") for k in ("slow", "twin")}
    steps = {k: statistics.median((e - s) / 1e6 for r in run.rank_ids
                                  for s, e in zip(run.table(r, "steps").column("ts").to_pylist(),
                                                  run.table(r, "steps").column("end").to_pylist()))
             for k, run in runs.items()}
    res = run_all(runs["slow"])
    wi = {w["rank"]: w for w in res["critical_path"].summary["what_if"]}[slow[0]]
    assert abs(wi["step_ms_if_median"] - steps["twin"]) <= 0.05 * steps["twin"], (wi, steps)
    verdict = res["straggler"].summary["verdict"]
    if named:
        assert steps["slow"] > 1.2 * steps["twin"]
        assert [f.ranks for f in res["straggler"].findings] == [(slow[0],)], verdict
    else:
        assert abs(steps["slow"] - steps["twin"]) < 0.01 * steps["twin"]
        assert not res["straggler"].findings and f"rank {slow[0]}'s own time" in verdict, verdict
