"""rankscope.analysis.hang's rules on small dumps in Flight Recorder's own format (the dict torch's
``_dump_fr_trace`` pickles: entries with process_group, collective_seq_id / p2p_seq_id, profiling_name,
input/output sizes and dtypes, record_id, time_created_ns, timeout_ms, frames; pg_config), read by
``frdump.from_doc`` as the CLI reads a file. The format is checked against torch's own analyzer in
tests/golden/test_fr_oracle.py and on real dumps in tests/e2e/test_hang.py. Assertions are on the structured
problems (kind, group, seq, op, culprits, waiting, root, consequence_of), not on prose."""
from __future__ import annotations

from typing import Any

from rankscope.analysis.hang import diagnose, shapes
from rankscope.model.readers.frdump import FrDump, from_doc

T0 = 1_700_000_000_000_000_000  # wall clock ns


class Rank:
    """One rank's recorder: entries in the order it issued them."""

    def __init__(self, rank: int, groups: dict[str, tuple[str, list[int]]] | None = None) -> None:
        self.rank, self.entries, self.p2p = rank, [], 0
        self.groups = groups or {}
        self.extra: dict[str, Any] = {}

    def coll(self, pg: str, seq: int, op: str, ins: list[list[int]], outs: list[list[int]] | None = None,
             dtype: str = "Float", out_dtype: str | None = None, **kw: Any) -> Rank:
        self.entries.append({
            "record_id": len(self.entries), "process_group": (pg, self.groups.get(pg, ("undefined",))[0]),
            "collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": False, "profiling_name": f"gloo:{op}",
            "input_sizes": ins, "output_sizes": ins if outs is None else outs, "input_dtypes": [dtype] * len(ins),
            "output_dtypes": [out_dtype or dtype] * len(ins if outs is None else outs), "state": "scheduled",
            "time_created_ns": T0 + len(self.entries) * 1_000_000, "timeout_ms": 30_000, "frames": [], **kw})
        return self

    def pt2pt(self, op: str, peer: int, ins: list[list[int]], pg: str = "0", local: int | None = None) -> Rank:
        self.p2p += 1
        me = self.rank if local is None else local
        name = f"gloo:send {me}->{peer}" if op == "send" else f"gloo:recv {me}<-{peer}"
        self.entries.append({"record_id": len(self.entries), "process_group": (pg, "default_pg"),
                             "collective_seq_id": 0, "p2p_seq_id": self.p2p, "is_p2p": True, "profiling_name": name,
                             "input_sizes": ins, "output_sizes": ins, "input_dtypes": ["Float"],
                             "output_dtypes": ["Float"], "state": "scheduled",
                             "time_created_ns": T0 + len(self.entries) * 1_000_000, "timeout_ms": 30_000})
        return self

    def dump(self) -> FrDump:
        cfg = {k: {"name": k, "desc": d, "ranks": str(rs)} for k, (d, rs) in self.groups.items()}
        return from_doc({"version": "2.10", "entries": self.entries, "pg_config": cfg, **self.extra}, self.rank)


def _job(n: int, groups: dict[str, tuple[str, list[int]]]) -> list[Rank]:
    return [Rank(r, {k: v for k, v in groups.items() if r in v[1]}) for r in range(n)]


def _dicts(ranks: list[Rank], world: int | None = None) -> list[dict[str, Any]]:
    return [p.to_dict() for p in diagnose([r.dump() for r in ranks], world).problems]


def test_a_ring_that_dropped_old_entries_is_not_a_rank_that_never_joined() -> None:
    # rank 0's ring holds #1001-#3000, rank 1's #2501-#3000: no verdict on what one ring no longer holds
    a, b = Rank(0), Rank(1)
    for s in range(1001, 3001):
        a.coll("0", s, "all_reduce", [[100]])
    for s in range(2501, 3001):
        b.coll("0", s, "all_reduce", [[100]])
    assert _dicts([a, b]) == []
    # but a rank really behind is still named: rank 1 stopped at #2800
    b = Rank(1)
    for s in range(2301, 2801):
        b.coll("0", s, "all_reduce", [[100]])
    (p,) = _dicts([a, b])
    assert (p["kind"], p["seq"], p["culprits"], p["their_last"], p["waiting"]) == ("not_joined", 2801, [1], {1: 2800}, [0])


def test_point_to_point_ops_pair_per_sender_and_receiver_in_order() -> None:
    r = [Rank(0).pt2pt("send", 1, [[8]]).pt2pt("send", 2, [[8]]).pt2pt("send", 1, [[8]]),
         Rank(1).pt2pt("recv", 0, [[8]]).pt2pt("recv", 0, [[8]]), Rank(2).pt2pt("recv", 0, [[8]])]
    assert _dicts(r) == []
    r[2] = Rank(2).pt2pt("recv", 0, [[8]]).pt2pt("recv", 0, [[8]])  # waits for a second message 0 never sent
    (p,) = _dicts(r)
    assert (p["kind"], p["src"], p["dst"], p["n"], p["sent"], p["received"]) == ("unmatched_recv", 0, 2, 2, 1, 2)
    assert (p["culprits"], p["waiting"]) == ([0], [2])
    r[2] = Rank(2).pt2pt("recv", 0, [[4]])  # a receive whose buffer has another size than its send
    (p,) = _dicts(r)
    assert p["kind"] == "p2p_mismatch" and (p["src"], p["dst"], p["sent_call"], p["received_call"]) == (
        0, 2, "send float32[8]", "recv float32[4]")


def test_point_to_point_peers_in_a_subgroup_are_group_ranks() -> None:
    # group "5" = [2, 3]: "send 0->1" on rank 2 is a send to global rank 3
    g = {"5": ("pp", [2, 3])}
    r = [Rank(2, g).pt2pt("send", 1, [[8]], pg="5", local=0), Rank(3, g).pt2pt("recv", 0, [[8]], pg="5", local=1)]
    assert _dicts(r) == []
    r[1] = Rank(3, g)
    r[1].coll("5", 1, "barrier", [[]])
    r[0].coll("5", 1, "barrier", [[]])
    p = next(p for p in _dicts(r) if p["kind"] == "unmatched_send")
    assert (p["src"], p["dst"], p["culprits"], p["waiting"]) == (2, 3, [3], [2])


def test_point_to_point_counts_are_not_compared_when_a_ring_dropped_the_oldest_ops() -> None:
    a = Rank(0).pt2pt("send", 1, [[8]]).pt2pt("send", 1, [[8]]).pt2pt("send", 1, [[8]])
    b = Rank(1)
    b.p2p = 2  # its ring starts at p2p #3: how many receives it posted before is unknown
    b.pt2pt("recv", 0, [[8]])
    assert _dicts([a, b]) == []


def test_coalesced_ops_sharing_a_sequence_number_are_matched_one_by_one() -> None:
    # each rank's two broadcasts and the end marker share #1; rank 1's first broadcast has another size. Keyed by
    # sequence number alone, the end marker overwrote both (no problem seen).
    r = _job(2, {"0": ("default_pg", [0, 1])})
    for x, first in ((r[0], [[4, 4]]), (r[1], [[5, 5]])):
        x.coll("0", 1, "_broadcast_oop", first).coll("0", 1, "_broadcast_oop", [[4, 4]]).coll("0", 1, "coalesced", [[]], [[]], dtype="")
    (p,) = _dicts(r)
    assert (p["kind"], p["what"], p["seq"], p["culprits"]) == ("mismatch", "size", 1, [1])
    assert p["op"] == "coalesced(_broadcast_oop x2)"


def test_uneven_all_to_all_is_normal_only_the_totals_must_agree() -> None:
    # a healthy MoE step: each rank sends what its tokens need; every element sent is received
    g = {"0": ("default_pg", [0, 1])}
    r = _job(2, g)
    r[0].coll("0", 23, "all_to_all", [[817, 256]], [[1818, 256]])
    r[1].coll("0", 23, "all_to_all", [[1818, 256]], [[817, 256]])
    assert _dicts(r) == []
    r = _job(2, g)  # 100 rows lost on the way: the totals disagree (no rank can be singled out)
    r[0].coll("0", 23, "all_to_all", [[817, 256]], [[1718, 256]])
    r[1].coll("0", 23, "all_to_all", [[1818, 256]], [[817, 256]])
    (p,) = _dicts(r)
    assert (p["kind"], p["what"], p["check"], p["input_numel"], p["output_numel"]) == (
        "mismatch", "size", "totals", 2635 * 256, 2535 * 256)


def test_output_sizes_and_dtypes_each_rank_against_itself() -> None:
    g = {"0": ("default_pg", [0, 1, 2])}
    r = _job(3, g)
    for x in r:  # all_gather over 3 ranks: output = input x 3
        x.coll("0", 1, "all_gather", [[10]], [[3, 10]])
    assert _dicts(r) == []
    r = _job(3, g)
    for x in r:
        x.coll("0", 1, "all_gather", [[10]], [[2, 10]])  # sized for 2 ranks, on every rank
    (p,) = _dicts(r)
    assert (p["kind"], p["what"], p["check"], p["culprits"], p["rule"]) == (
        "mismatch", "size", "syntax", [0, 1, 2], "all_gather: output = input x 3 ranks")
    r = _job(3, g)
    for x in r:
        x.coll("0", 1, "all_reduce", [[10]], out_dtype="Half" if x.rank == 2 else None)
    (p,) = _dicts(r)
    assert (p["kind"], p["what"], p["culprits"]) == ("mismatch", "dtype", [2])


def test_a_member_with_a_dump_but_no_entry_in_its_group_never_joined() -> None:
    # pg_config says group 1 is [1, 3]; rank 3 recorded nothing in it (it never got there). Inferring members
    # from entries, group 1 was [1] alone and nothing was wrong in it.
    g = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("sub", [1, 3])}
    r = _job(4, g)
    for x in r:
        x.coll("0", 1, "all_reduce", [[4]])
    r[1].coll("1", 1, "all_gather", [[4]], [[2, 4]])
    got = {(p["group"], p["kind"]): p for p in _dicts(r, 4)}
    p = got[("1", "not_joined")]
    assert (p["seq"], p["culprits"], p["waiting"], p["root"]) == (1, [3], [1], True)


def _issue_job(rank3_dumps: bool) -> list[Rank]:
    """The 4-rank job of issue 27: group 1 = [1, 3]; each step all_reduce (world), all_gather (group 1),
    all_reduce (world). At step 5 rank 3 sleeps before the all_gather: rank 1 waits in it, ranks 0 and 2
    in the next world all_reduce."""
    g = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("sub", [1, 3])}
    r = _job(4, g)
    for step in range(1, 6):
        for x in r:
            x.coll("0", 2 * step - 1, "all_reduce", [[1000]], step=step)
            if step == 5 and x.rank == 3:
                continue
            if x.rank in (1, 3):
                x.coll("1", step, "all_gather", [[1000]], [[2, 1000]], step=step,
                       frames=[{"filename": "/job/train.py", "line": 24, "name": "main"}])
                if step == 5:
                    continue
            x.coll("0", 2 * step, "all_reduce", [[1000]], step=step)
    for x in r:
        x.extra["rankscope"] = {"reason": "watchdog", "wall_ns": T0 + 40 * 10**9, "step": 5}
    r[3].extra["rankscope_stacks"] = {"MainThread": ["/job/train.py:30 <module>", "/job/train.py:19 main"],
                                      "rankscope-watchdog": ["threading.py:1002 _bootstrap", "comms.py:210 _watch"]}
    return r if rank3_dumps else r[:3]


def test_root_cause_first_a_rank_with_no_dump_is_not_blamed_on_a_waiting_rank() -> None:
    v = diagnose([x.dump() for x in _issue_job(rank3_dumps=False)], 4)
    root, cons = [p.to_dict() for p in v.problems]
    assert (root["group"], root["seq"], root["op"], root["culprits"], root["kind"], root["root"]) == (
        "1", 5, "all_gather", [3], "not_joined", True)
    assert root["waiting"] == [1] and root["no_dump"] == [3] and root["step"] == 5
    assert (cons["group"], cons["seq"], cons["culprits"], cons["waiting"], cons["root"], cons["consequence_of"]) == (
        "0", 10, [1], [0, 2], False, 0)
    assert v.where[1].state == "waiting" and (v.where[1].group, v.where[1].seq) == ("1", 5)
    assert v.where[3].state == "no_dump" and v.no_dump == [3]
    assert v.headline.startswith("hang in process group 1 (sub) at collective #5")


def test_a_rank_stuck_outside_any_collective_is_named_with_its_stack() -> None:
    v = diagnose([x.dump() for x in _issue_job(rank3_dumps=True)], 4)
    root = v.problems[0]
    assert (root.group, root.seq, root.culprits, root.waiting, root.kind) == ("1", 5, [3], [1], "not_joined")
    w = v.where[3]
    assert (w.state, w.frame, w.step) == ("outside", "train.py:19 main", 5)
    assert [p.consequence_of for p in v.problems] == [None, 0]
    # the waiting rank's call: issued at train.py:24, 40 s before the dump minus its creation, of a 30 s timeout
    assert root.stack == "train.py:24 main" and root.pending[1]["timeout_s"] == 30.0
    assert 30 < root.pending[1]["pending_s"] < 40


def test_a_rank_that_skipped_a_subgroup_collective_is_named_from_the_steps_before() -> None:
    """Rank 3 skips group 1's all_gather at step 5 and goes on to the world all_reduce: rank 1 waits in the
    all_gather (rank 3 missing), ranks 0, 2, 3 in the all_reduce (rank 1 missing). Each waits where the other
    is missing; the earlier steps put the all_gather before that all_reduce, so rank 3 skipped it."""
    g = {"0": ("default_pg", [0, 1, 2, 3]), "1": ("sub", [1, 3])}
    r = _job(4, g)
    for step in range(1, 6):
        for x in r:
            x.coll("0", 2 * step - 1, "all_reduce", [[1000]])
            if x.rank in (1, 3) and not (step == 5 and x.rank == 3):
                x.coll("1", step, "all_gather", [[1000]], [[2, 1000]])
                if step == 5:
                    continue
            x.coll("0", 2 * step, "all_reduce", [[1000]])
    ps = _dicts(r, 4)
    assert [(p["group"], p["culprits"], p["root"], p["consequence_of"]) for p in ps] == [
        ("1", [3], True, None), ("0", [1], False, 0)]
    # with no earlier steps the order is unknown: both wait on each other, said as such
    r = _job(4, g)
    for x in r:
        if x.rank == 1:
            x.coll("1", 1, "all_gather", [[1000]], [[2, 1000]])
        else:
            x.coll("0", 1, "all_reduce", [[1000]])
    ps = _dicts(r, 4)
    assert ps[0]["kind"] == "deadlock" and ps[0]["culprits"] == [1, 3] and ps[0]["waiting"] == [0, 1, 2, 3]
    assert [p["consequence_of"] for p in ps[1:]] == [0, 0]


def test_point_to_point_order_deadlock() -> None:
    # each rank receives from the other first
    r = [Rank(0).pt2pt("recv", 1, [[8]]), Rank(1).pt2pt("recv", 0, [[8]])]
    ps = _dicts(r)
    assert ps[0]["kind"] == "deadlock" and ps[0]["root"] and ps[0]["waiting"] == [0, 1]
    assert sorted((p["kind"], p["dst"]) for p in ps[1:]) == [("unmatched_recv", 0), ("unmatched_recv", 1)]
    assert all(p["consequence_of"] == 0 for p in ps[1:])


def test_process_group_descriptions_members_and_versions_are_compared() -> None:
    r = _job(3, {"0": ("default_pg", [0, 1, 2])})
    r[2].groups["0"] = ("dp", [0, 1, 2])
    for x in r:
        x.coll("0", 1, "all_reduce", [[4]])
    (p,) = _dicts(r)
    assert (p["kind"], p["what"], p["culprits"], p["expected"], p["odd"]) == (
        "pg_inconsistent", "desc", [2], "default_pg", {"dp": [2]})
    r[2].groups["0"] = ("default_pg", [0, 1, 2])
    ds = [x.dump() for x in r]
    ds[1].version = "2.8"
    (p,) = [q.to_dict() for q in diagnose(ds).problems]
    assert (p["what"], p["culprits"], p["expected"]) == ("version", [1], "2.10")


def test_the_step_comes_from_step_marks_when_entries_carry_none() -> None:
    r = _job(2, {"0": ("default_pg", [0, 1])})
    r[0].coll("0", 1, "all_reduce", [[4]]).coll("0", 2, "all_reduce", [[4]])
    r[1].coll("0", 1, "all_reduce", [[4]])
    r[0].extra["rankscope_steps"] = [[7, T0], [8, T0 + 500_000]]  # step 8 began between the two calls
    (p,) = _dicts(r)
    assert (p["seq"], p["step"], p["culprits"]) == (2, 8, [1])


def test_calls_are_written_as_people_read_them() -> None:
    e = Rank(0).coll("0", 1, "all_gather", [[1000]], [[3, 1000]]).dump().entries[0]
    assert shapes.entry(e) == "all_gather float32[1000]"
    assert shapes.entry(e, out=True) == "all_gather float32[1000] -> float32[3, 1000]"
    r = _job(2, {"0": ("default_pg", [0, 1])})
    r[0].coll("0", 1, "all_reduce", [[10, 10]])
    r[1].coll("0", 1, "all_reduce", [[100]], dtype="Int")
    v = diagnose([x.dump() for x in r])
    assert "[[" not in v.headline and "'Float'" not in v.headline, v.headline


def test_a_thread_stack_is_read_in_either_order() -> None:
    from rankscope.analysis.hang.words import thread_frame

    outer_first = ["/usr/lib/python3.11/runpy.py:198 _run_module_as_main", "/job/train.py:30 <module>",
                   "/job/train.py:19 main"]
    assert thread_frame({"MainThread": outer_first}) == "train.py:19 main"
    assert thread_frame({"MainThread": outer_first[::-1]}) == "train.py:19 main"
    # torch's own frames are skipped: the user's line that called into it is named
    assert thread_frame({"MainThread": ["/x/site-packages/torch/distributed/distributed_c10d.py:3145 broadcast",
                                        "/job/train.py:19 main", "/job/train.py:30 <module>"]}) == "train.py:19 main"
