"""One rank's waits for its pipeline neighbours, per step: the part of the shared pass over the ranks.

Pattern: a pipeline stage blocks its training thread in ``Work.wait()`` on a point-to-point call: a
receive until the neighbour's activation (or gradient) arrives, a send until the neighbour takes the data
(gloo hands a message over only when the receiver posted its receive). No event records the wait itself,
and the schedule wraps it in its own spans (torch's ``record_function("Forward i")``), so a wait is the
gap before the call's return in which the thread ran nothing of its own.

Algorithm (numpy, per rank): the training thread is the one holding ``ProfilerStep#N``. Its *own work*
is every host event that is not communication (``comm_issue.is_comm_name``) and holds no wait's return
inside it (a span holding one is a wrapper: the step, the schedule's "Forward i", a user's region). For
each send / receive, the wait is ``[max(issued, last own work ending before it returned), returned]``.
Overlapping waits (a batch of sends and receives waited together) are split so each instant counts once,
for the call that returned last. The waits are cut at the steps' bounds. Each step also keeps its calls in
the order they were issued, grouped into messages (calls posted back to back, with no own work between
them: one microbatch's tensors), and the schedule's span names, for the stage order and the schedule.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rankscope.analysis.rankdata import RankData

# The schedule's own spans: torch's GPipe "Forward 3" / "Backward 3", the runtime schedules' "PP:1F3",
# "PP:0B2", "PP:2I0", "PP:2W0" (stage, action, microbatch; torch.distributed.pipelining.schedules).
SPAN = re.compile(r"^(?:(Forward|Backward) (\d+)|PP:(\d+)(F|B|I|W)(\d+))$")
# torch.optim's own spans (``Optimizer.step#AdamW.step``, ``Optimizer.zero_grad#AdamW.zero_grad``): work a stage
# does between two steps' microbatches, outside the schedule's program
OPTIM = ("Optimizer.step#", "Optimizer.zero_grad#")
HOST = ("cpu_op", "user_annotation", "python_function")


@dataclass
class StepWaits:
    """One step of one rank: its bounds, the time it waited per (op, peer), its messages and spans."""

    step: int
    start: int
    end: int
    wait_ns: dict[tuple[str, int], int] = field(default_factory=dict)  # (send|recv, peer) -> ns
    p2p_ns: int = 0  # time with a send or receive in flight (issued, not yet returned), waiting or not
    coll_ns: int = 0  # time with another collective (all_reduce, ...: not a send / receive) in flight
    messages: list[tuple[str, int, int]] = field(default_factory=list)  # (op, peer, calls) in issue order
    spans: list[tuple[str, int, int]] = field(default_factory=list)  # (action F|B|I|W, stage or -1, microbatch)
    span_own: list[int] = field(default_factory=list)  # per span: its duration less its waits (ns)
    optim_ns: int = 0  # the optimizer's step and zero_grad on the training thread (``OPTIM``)


@dataclass
class RankWaits:
    rank: int
    steps: list[StepWaits] = field(default_factory=list)
    p2p_calls: int = 0
    problem: str | None = None


def rank_part(data: "RankData") -> RankWaits:
    """The waits of one rank (the shared per-rank pass); a rank without point-to-point calls gives none."""
    out = RankWaits(data.rank)
    try:
        calls = _p2p_calls(data)
        out.p2p_calls = len(calls["op"])
        if out.p2p_calls == 0:
            return out
        out.steps = _steps(data, calls)
    except Exception as exc:  # noqa: BLE001 - one rank's odd data must not stop the others
        out.problem = f"rank {data.rank}: pipeline waits not read ({type(exc).__name__}: {exc})"
    return out


def _p2p_calls(data: "RankData") -> dict[str, np.ndarray]:
    """Sends and receives with a known peer: op, peer, issued, returned (ns), sorted by issue; and under
    "other_issue" / "other_ret" the other collectives' (all_reduce, ...) in-flight intervals."""
    t = data.table("collectives")
    empty = {"op": np.zeros(0, object), "peer": np.zeros(0, np.int64), "issue": np.zeros(0, np.int64),
             "ret": np.zeros(0, np.int64), "other_issue": np.zeros(0, np.int64), "other_ret": np.zeros(0, np.int64)}
    if t.num_rows == 0 or "peer" not in t.column_names:
        return empty
    op = np.asarray(t.column("op").to_pylist(), dtype=object)
    peer = np.asarray(t.column("peer").to_numpy(zero_copy_only=False), np.int64)
    p2p = np.isin(op, ("send", "recv"))
    keep = p2p & (peer >= 0)
    if not keep.any():
        return empty
    ts_all = np.asarray(t.column("ts").to_numpy(zero_copy_only=False), np.int64)
    ret_all = ts_all + np.asarray(t.column("dur").to_numpy(zero_copy_only=False), np.int64)
    issue_all = np.asarray(t.column("issue_ts").to_numpy(zero_copy_only=False), np.int64)
    issue_all = np.where(issue_all >= 0, np.minimum(issue_all, ts_all), ts_all)
    issue, ret = issue_all[keep], ret_all[keep]
    o = np.argsort(issue, kind="stable")
    return {"op": op[keep][o], "peer": peer[keep][o], "issue": issue[o], "ret": ret[o],
            "other_issue": issue_all[~p2p], "other_ret": ret_all[~p2p]}


def _thread_events(data: "RankData") -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                               list[tuple[int, str, int, int, int]], np.ndarray]:
    """Host events of the training thread (the one holding ProfilerStep#N): ts, end, is-communication, the
    schedule's spans (ts, action, stage, microbatch, end), sorted, and which events are the optimizer's
    (``OPTIM``)."""
    from rankscope.analysis.classify import dict_test
    from rankscope.model.comm_issue import is_comm_name

    ev = data.events
    host = data.kind_in(HOST)
    tid = data.col("tid")
    step_rows = dict_test(ev, "name", lambda d: np.char.startswith(d, "ProfilerStep#")) & host
    pick = step_rows if step_rows.any() else host
    vals, counts = np.unique(tid[pick], return_counts=True)
    rows = np.flatnonzero(host & (tid == vals[np.argmax(counts)])) if len(vals) else np.zeros(0, np.int64)
    ts = data.col("ts")[rows].astype(np.int64)
    end = ts + data.col("dur")[rows].astype(np.int64)
    c = ev.column("name").combine_chunks().take(rows)  # a dictionary column: test each distinct name once
    uniq = [str(x) for x in c.dictionary.to_pylist()] if hasattr(c, "dictionary") else []
    idx = c.indices.to_numpy(zero_copy_only=False) if hasattr(c, "indices") else np.zeros(0, np.int64)
    comm = np.array([is_comm_name(u) for u in uniq] + [False], bool)[idx] if len(rows) else np.zeros(0, bool)
    optim = (np.array([u.startswith(OPTIM) for u in uniq] + [False], bool)[idx] if len(rows)
             else np.zeros(0, bool))
    spans = []
    for i, u in enumerate(uniq):
        m = SPAN.match(u)
        if m is None:
            continue
        act = ("F" if m.group(1) == "Forward" else "B") if m.group(1) else m.group(4)
        stage, mb = (-1, int(m.group(2))) if m.group(1) else (int(m.group(3)), int(m.group(5)))
        sel = idx == i
        spans += [(int(t), act, stage, mb, int(e)) for t, e in zip(ts[sel].tolist(), end[sel].tolist())]
    return ts, end, comm, sorted(spans), optim


def blocked(own_ts: np.ndarray, own_end: np.ndarray, issue: np.ndarray, ret: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Per call: the start and end of the time it kept the thread waiting, the calls' pieces disjoint.

    ``own_*``: candidate own-work events (wrappers not yet removed). A call's wait starts when the
    last own work before its return ended (not before it was issued); waits that overlap are split so
    that each instant counts once, for the call that returned last.

    >>> s, e = blocked(np.array([0, 50]), np.array([10, 60]), np.array([5, 5]), np.array([30, 40]))
    >>> list(zip(s.tolist(), e.tolist()))  # the first call waits 10-30, the second (returned last) 30-40
    [(10, 30), (30, 40)]
    """
    rets = np.sort(ret)
    inside = np.searchsorted(rets, own_end, "left") - np.searchsorted(rets, own_ts, "right")
    own = inside <= 0  # a span that holds a wait's return is a wrapper, not own work
    ends = np.sort(own_end[own])
    k = np.searchsorted(ends, ret, "right") - 1
    last = np.where(k >= 0, ends[np.maximum(k, 0)], np.iinfo(np.int64).min)
    start = np.minimum(np.maximum(issue, last), ret)
    o = np.argsort(ret, kind="stable")
    prev = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, ret[o][:-1]])
    s = np.empty_like(start)
    s[o] = np.minimum(np.maximum(start[o], prev), ret[o])
    return s, ret


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as disjoint sorted intervals.

    >>> [x.tolist() for x in union(np.array([0, 5, 20]), np.array([10, 12, 30]))]
    [[0, 20], [12, 30]]
    """
    if len(start) == 0:
        return start, end
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def covered(start: np.ndarray, end: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Per point of ``x``: how much of the disjoint sorted intervals lies before it.

    >>> covered(np.array([0, 20]), np.array([10, 30]), np.array([5, 15, 25, 40])).tolist()
    [5, 10, 15, 20]
    """
    if len(start) == 0:
        return np.zeros(len(x), np.int64)
    cum = np.r_[0, np.cumsum(end - start)]
    k = np.searchsorted(start, x, "right")  # intervals that start before each point
    over = np.where(k > 0, np.maximum(end[np.maximum(k - 1, 0)] - x, 0), 0)  # the part of the last one after it
    return cum[k] - over


def _messages(op: np.ndarray, peer: np.ndarray, issue: np.ndarray, own_ts: np.ndarray, own_end: np.ndarray
              ) -> list[tuple[str, int, int]]:
    """Calls in issue order grouped into messages: same op and peer, posted with no own work between."""
    if len(op) == 0:
        return []
    busy_start = np.searchsorted(np.sort(own_ts), issue, "right")  # own work started before each issue
    split = np.r_[True, (op[1:] != op[:-1]) | (peer[1:] != peer[:-1]) | (busy_start[1:] != busy_start[:-1])]
    idx = np.flatnonzero(split)
    n = np.diff(np.r_[idx, len(op)])
    return [(str(op[i]), int(peer[i]), int(c)) for i, c in zip(idx.tolist(), n.tolist())]


def _steps(data: "RankData", calls: dict[str, np.ndarray]) -> list[StepWaits]:
    st = data.table("steps")
    ts, end, comm, spans, optim = _thread_events(data)
    cand = ~comm
    s, e = blocked(ts[cand], end[cand], calls["issue"], calls["ret"])
    rets = np.sort(calls["ret"])
    inside = np.searchsorted(rets, end[cand], "left") - np.searchsorted(rets, ts[cand], "right")
    own_ts, own_end = ts[cand][inside <= 0], end[cand][inside <= 0]
    if st.num_rows:
        bounds = list(zip(st.column("step").to_pylist(), st.column("ts").to_pylist(), st.column("end").to_pylist()))
    else:
        bounds = [(-1, int(min(calls["issue"].min(), ts.min() if len(ts) else 0)), int(calls["ret"].max()))]
    us, ue = union(calls["issue"], calls["ret"])
    cs, ce = union(calls["other_issue"], calls["other_ret"])
    os_, oe = union(ts[optim], end[optim])
    ws, we = union(s, e)
    out = []
    for step, t0, t1 in bounds:
        sw = StepWaits(int(step), int(t0), int(t1))
        got = np.clip(np.minimum(e, t1) - np.maximum(s, t0), 0, None)
        for i in np.flatnonzero(got > 0).tolist():
            key = (str(calls["op"][i]), int(calls["peer"][i]))
            sw.wait_ns[key] = sw.wait_ns.get(key, 0) + int(got[i])
        sel = (calls["issue"] >= t0) & (calls["issue"] < t1)
        sw.p2p_ns = int(np.clip(np.minimum(ue, t1) - np.maximum(us, t0), 0, None).sum())
        sw.coll_ns = int(np.clip(np.minimum(ce, t1) - np.maximum(cs, t0), 0, None).sum())
        sw.optim_ns = int(np.clip(np.minimum(oe, t1) - np.maximum(os_, t0), 0, None).sum())
        sw.messages = _messages(calls["op"][sel], calls["peer"][sel], calls["issue"][sel], own_ts, own_end)
        mine = [x for x in spans if t0 <= x[0] < t1]
        sw.spans = [(a, stg, mb) for _, a, stg, mb, _ in mine]
        ts_, te_ = np.array([x[0] for x in mine], np.int64), np.array([x[4] for x in mine], np.int64)
        sw.span_own = (te_ - ts_ - (covered(ws, we, te_) - covered(ws, we, ts_))).tolist()
        out.append(sw)
    return out


def wait_rows(parts: list[tuple[int, RankWaits]]) -> list[dict[str, Any]]:
    """Flat rows (rank, step, start, end, op, peer, wait_ns) of every rank's waits."""
    return [{"rank": r, "step": sw.step, "start": sw.start, "end": sw.end, "op": op, "peer": peer, "wait_ns": ns}
            for r, p in parts for sw in p.steps for (op, peer), ns in sw.wait_ns.items()]
