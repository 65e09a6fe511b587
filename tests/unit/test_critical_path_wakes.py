"""A training thread's untraced wait for a collective that gloo runs on its own thread (``timed.wakes``).

The shape is a DDP step on gloo (rankscope.demo.lm, traces of bench/workloads.py's decode-slow@4 runs): the
backward's last ``c10d::allreduce_`` enqueues the bucket, ``gloo:all_reduce`` runs it on gloo's worker thread,
the training thread sits in an untraced ``Work.wait()`` (no event: a gap) and resumes with DDP's
``aten::as_strided`` / copies, then the optimizer step. Measured on those traces (4 ranks on 2 cores,
bench/gloo_wake_lateness.py): in 40 of 95 such waits the thread resumed 1.4-12.6 ms *before* the span's end, as
gloo closes the span after waking the waiter. The gap is a wait when the thread resumes within ``WAKE_NS`` after
the span's end, or while it is still open and it closes within ``LATE_END_NS`` and within the gap's own length;
otherwise it is the rank's own time.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rankscope.analysis.deps import adapter, events, local, timed
from rankscope.analysis.deps.gpu import E
from rankscope.analysis.deps.graph import window

MS = 1_000_000


def _build(rows: list[tuple], op: str, end: int) -> tuple[events.RankEvents, adapter.Calls]:
    """The rank's events from (name, kind, ts, dur, tid, is_comm) rows, and its one collective ``op`` (group 0,
    sequence 0), issued at 10.5 ms, run by gloo from 11 ms to ``end``."""
    t = pa.table({"name": pa.array([r[0] for r in rows]).dictionary_encode(),
                  "kind": pa.array([r[1] for r in rows]).dictionary_encode(),
                  "ts": [r[2] for r in rows], "dur": [r[3] for r in rows], "tid": [r[4] for r in rows],
                  "stream": [-1] * len(rows), "correlation": [-1] * len(rows), "is_comm": [r[5] for r in rows],
                  "input_dims": pa.array([""] * len(rows)).dictionary_encode()})
    one = lambda v: np.array([v], dtype=object if isinstance(v, str) else np.int64)  # noqa: E731
    calls = adapter.Calls(key=one("0|0,1#0"), op=one(op), kind=one("collective"), ts=one(11 * MS), end=one(end),
                          dev_ts=one(-1), dev_end=one(-1), issue_ts=one(10_500_000), pg=one("0"), seq=one(0))
    return events.from_table(t), calls


def _step(resume: int, span_end: int) -> tuple[events.RankEvents, adapter.Calls]:
    """One step (ns): the training thread (tid 1) issues at 10.5 ms, idles from 12 ms to ``resume``, then runs
    5 ms of copies and optimizer; gloo's thread (tid 2) runs the all_reduce from 11 ms to ``span_end``."""
    rows = [("ProfilerStep#1", "user_annotation", 0, resume + 6 * MS, 1, False),
            ("autograd::engine::evaluate_function: AccumulateGrad", "cpu_op", 10 * MS, 2 * MS, 1, False),
            ("c10d::allreduce_", "cpu_op", 10_500_000, MS, 1, True),
            ("aten::as_strided", "cpu_op", resume, 100_000, 1, False),
            ("Optimizer.step#AdamW.step", "cpu_op", resume + MS, 4 * MS, 1, False),
            ("gloo:all_reduce", "user_annotation", 11 * MS, span_end - 11 * MS, 2, True)]
    return _build(rows, "all_reduce", span_end)


def _anchor_paths(resume: int, span_end: int) -> tuple[np.ndarray, bool]:
    """The step's anchor matrix (rows START, end of the call; cols arrival, SINK) and whether the training
    thread's resumption hangs on the collective's end by a sync edge."""
    ev, calls = _step(resume, span_end)
    g, anc = timed.rank_graph(ev, window(ev), calls, np.array([True]))
    d = local.Local(g, anc.arrival, anc.end).matrix().d
    resumed = g.node(np.array([3]), True)[0]  # aten::as_strided's start
    synced = bool(((g.typ == E.SYNC) & (g.src == anc.end[0]) & (g.dst == resumed)).any())
    return d, synced


@pytest.mark.parametrize("late_ms", [0, 2, 7, 12.6])
def test_a_thread_that_resumed_before_gloo_closed_the_span_waited_for_the_collective(late_ms):
    """The thread resumes at 300 ms, the span closes ``late_ms`` later: the 288 ms gap is a wait, so the only
    way from the step's start to its end runs through the call (without the sync edge: START -> SINK would be
    the 288 ms gap plus the tail, about 300 ms)."""
    resume = 300 * MS
    d, synced = _anchor_paths(resume, resume + int(late_ms * MS))
    assert synced
    assert d[0, 1] < 20 * MS  # START -> SINK without the call: the step's own work, no gap
    assert 4 * MS <= d[1, 1] <= 6 * MS  # the call's end -> SINK: the copies and the optimizer step


def test_a_thread_resuming_after_the_span_closed_waited_within_wake_ns():
    resume = 300 * MS
    d, synced = _anchor_paths(resume, resume - timed.WAKE_NS // 2)
    assert synced and d[0, 1] < 20 * MS


@pytest.mark.parametrize("resume_ms, late_ms", [
    (300, timed.LATE_END_NS / MS + 5),  # the collective ran on 25 ms after the thread resumed: not what it waited for
    (12.05, 3.0),  # a 50 us gap that a running collective outlives by 3 ms: the thread did not wait
    (300, -10.0),  # the span closed 10 ms before the thread resumed: the gap after it is the thread's own
])
def test_a_gap_the_collective_does_not_explain_stays_the_ranks_own_time(resume_ms, late_ms):
    resume = int(resume_ms * MS)
    d, synced = _anchor_paths(resume, resume + int(late_ms * MS))
    assert not synced
    assert d[0, 1] >= resume - 12 * MS  # the gap from the issue (12 ms) to the resumption is own time


def _fsdp_step(resume: int, coll_end: int) -> tuple[events.RankEvents, adapter.Calls]:
    """One FSDP2 step's first all-gather (ns; the shape of bench/workloads.py's fsdp-data@4 run 31 of seed 2741):
    the training thread (tid 1) opens ``FSDP::all_gather`` at 10 ms, issues ``c10d::_allgather_base_`` at
    10.5 ms, waits untraced from 11.5 ms, closes the span at ``resume`` and runs 5 ms of forward; gloo's thread
    (tid 2) runs the all-gather from 11 ms to ``coll_end`` (it waited there for a slower peer)."""
    rows = [("ProfilerStep#1", "user_annotation", 0, resume + 6 * MS, 1, False),
            ("FSDP::all_gather", "user_annotation", 10 * MS, resume - 10 * MS, 1, True),
            ("c10d::_allgather_base_", "cpu_op", 10_500_000, MS, 1, True),
            ("aten::embedding", "cpu_op", resume + 100_000, 5 * MS, 1, False),
            ("gloo:all_gather", "user_annotation", 11 * MS, coll_end - 11 * MS, 2, True)]
    return _build(rows, "all_gather", coll_end)


@pytest.mark.parametrize("late_ms", [0.5, 2.7, 5.3, 12.7])
def test_a_thread_closing_fsdps_all_gather_late_after_the_collective_waited_for_it(late_ms):
    """A woken thread waits for a CPU on a loaded host: measured (fsdp-data@4, seed 2741, run 31), rank 3 closed its
    70 ms ``FSDP::all_gather`` 2.7 ms after the all-gather ended (its 4 ranks on 2 cores; 7 % of 1,156 such waits
    over 2 ms late, at most 12.7 ms). Under ``WAKE_NS`` alone (2 ms) the wait was rank 3's own time, 70 ms of it
    on the critical path, and the slow rank (its data loading, 75 ms per step) was "not named"."""
    resume = 100 * MS
    ev, calls = _fsdp_step(resume, resume - int(late_ms * MS))
    g, anc = timed.rank_graph(ev, window(ev), calls, np.array([True]))
    d = local.Local(g, anc.arrival, anc.end).matrix().d
    closed = g.node(np.array([1]), False)[0]  # FSDP::all_gather's end
    assert ((g.typ == E.SYNC) & (g.src == anc.end[0]) & (g.dst == closed)).any()
    assert d[0, 1] < 20 * MS  # START -> SINK without the call: the step's own work (issue, forward), not the wait
    assert d[1, 1] >= 5 * MS + int(late_ms * MS) - timed.ROUND_NS  # the call's end -> SINK holds the late wake-up


def test_a_wait_that_ended_past_resume_ns_before_the_span_closed_is_own_time():
    resume = 100 * MS
    ev, calls = _fsdp_step(resume, resume - timed.RESUME_NS - 5 * MS)
    g, anc = timed.rank_graph(ev, window(ev), calls, np.array([True]))
    d = local.Local(g, anc.arrival, anc.end).matrix().d
    assert d[0, 1] >= resume - 12 * MS  # the 25 ms between the collective's end and the span's close are own time


@pytest.mark.parametrize("late_ms", [2.7, 5.3])
def test_between_operators_a_late_resumption_stays_own_time(late_ms):
    """DDP's untraced Work.wait() ends where an operator starts: the thread may have run Python of its own after
    the collective ended, so only ``WAKE_NS`` holds there (a host-side straggler's loop must stay its own)."""
    resume = 300 * MS
    d, synced = _anchor_paths(resume, resume - int(late_ms * MS))
    assert not synced and d[0, 1] >= resume - 12 * MS
