"""Launch links from torch_npu's flows, computed over arrays (``flows.pair`` / ``flows.link_arrays``), against the
plain reading of the same rule written out event by event here: an "f" ends the earliest open "s" of its (cat, id)
and is dropped where none is open; each task keeps its most preferred host op; ids are numbered by the tasks' start.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rankscope.model.readers.ascend import flows


def _queue_pairs(group: list[int], is_s: list[bool]) -> list[tuple[int, int]]:
    """(f index, s index) by a queue per group, in file order."""
    open_: dict[int, list[int]] = {}
    out = []
    for i, (g, s) in enumerate(zip(group, is_s)):
        if s:
            open_.setdefault(g, []).append(i)
        elif open_.get(g):
            out.append((i, open_[g].pop(0)))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=60))
def test_pairs_are_those_of_a_queue_per_group(ends):
    group = [g for g, _ in ends]
    is_s = [s for _, s in ends]
    f_at, s_at = flows.pair(np.array(group, np.int64), np.array(is_s, bool))
    assert list(zip(f_at.tolist(), s_at.tolist())) == _queue_pairs(group, is_s)


def _flow(ph, cat, id_, pid, tid, ts):
    return SimpleNamespace(ph=ph, cat=cat, id=id_, pid=pid, tid=tid, ts=ts)


def _corr_by_hand(evs) -> tuple[dict, dict]:
    """The rule, event by event: task key -> id, host key -> id."""
    best: dict = {}
    open_: dict = {}
    for f in evs:
        t = flows.ns(f.ts)
        if f.ph == "s":
            open_.setdefault((f.cat, f.id), []).append((f.pid, f.tid, t))
        elif open_.get((f.cat, f.id)):
            pref, task, host = flows.CATS.index(f.cat), (f.pid, f.tid, t), open_[(f.cat, f.id)].pop(0)
            if task not in best or pref < best[task][0]:
                best[task] = (pref, host)
    task, host = {}, {}
    for corr, k in enumerate(sorted(best, key=lambda k: (k[2], str(k[1]), str(k[0])))):
        task[k] = corr
        host.setdefault(best[k][1], corr)
    return task, host


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("sf"), st.sampled_from(flows.CATS), st.integers(0, 3),
                          st.integers(0, 2), st.integers(0, 2), st.integers(0, 5)), max_size=40))
def test_links_number_tasks_and_host_ops_as_the_rule_says(spec):
    """Shared ids, two kinds of flow on one task (the torch op preferred), an "f" before any "s", equal starts on
    two streams: the ids found for each task and host op are the rule's."""
    evs = [_flow(ph, cat, i, 10 + pid, tid, f"{1000 + ts}.500") for ph, cat, i, pid, tid, ts in spec]
    links = flows.links(evs)
    want_task, want_host = _corr_by_hand(evs)
    keys = list(want_task) + list(want_host)
    starts = np.array([k[2] for k in keys], np.int64)
    device = np.array([True] * len(want_task) + [False] * len(want_host), bool)
    got = links.find([k[:2] for k in keys], starts, device).tolist()
    assert got == list(want_task.values()) + list(want_host.values())
    assert bool(links) == bool(want_task)
    # nothing else is found: a start no flow ended at
    assert links.find([(10, 0)], np.array([5], np.int64), np.array([True])).tolist() == [-1]


def test_bad_times_and_unhashable_ids_are_left_out():
    evs = [_flow("s", "async_npu", 1, 1, 1, "10.0"), _flow("f", "async_npu", 1, 2, 2, "oops"),
           _flow("s", "async_npu", [1], 1, 1, "11.0"), _flow("f", "async_npu", [1], 2, 2, "12.0"),
           _flow("f", "async_npu", 1, 2, 2, "13.0")]
    links = flows.links(evs)
    got = links.find([(2, 2), (1, 1)], np.array([13_000, 10_000], np.int64), np.array([True, False]))
    assert got.tolist() == [0, 0]
