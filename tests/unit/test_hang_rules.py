"""rankscope.analysis.hang on dumps whose rings dropped their oldest entries, and point-to-point pairing.
The rows are the model's own (FrEntry), as rankscope.model.readers.frdump reads them from a dump; the format is
tested against real dumps and torch's analyzer in tests/e2e/test_hang.py and test_comms_timed.py."""
from __future__ import annotations

from rankscope.analysis.hang import diagnose
from rankscope.model.readers.frdump import FrDump, FrEntry


def _coll(rank: int, seqs: range, pg: str = "0", sizes: str = "[[100]]") -> list[FrEntry]:
    return [FrEntry(rank, pg, "default_pg", s, "all_reduce", sizes, "['Float']", "completed", False) for s in seqs]


def _p2p(rank: int, ops: list[tuple[int, str, int]], sizes: str = "[[8]]") -> list[FrEntry]:
    """(p2p seq, send|recv, peer)"""
    return [FrEntry(rank, "0", "default_pg", s, op, sizes, "['Float']", "completed", True, True, peer)
            for s, op, peer in ops]


def test_a_ring_that_dropped_old_entries_is_not_a_rank_that_never_joined() -> None:
    # rank 0's ring holds #1001-#3000, rank 1's (which also recorded many other ops) #2501-#3000
    v = diagnose([FrDump(0, "a", _coll(0, range(1001, 3001)), {}), FrDump(1, "b", _coll(1, range(2501, 3001)), {})])
    assert v.problems == [], v.headline
    # but a rank really behind is still named: rank 1 stopped at #2800 (its ring still starts at #2301)
    v = diagnose([FrDump(0, "a", _coll(0, range(1001, 3001)), {}), FrDump(1, "b", _coll(1, range(2301, 2801)), {})])
    (p,) = v.problems
    assert p["kind"] == "not_joined" and p["seq"] == 2801 and p["missing"] == [1] and p["their_last"] == {1: 2800}


def test_point_to_point_ops_pair_per_sender_and_receiver_in_order() -> None:
    # 3 ranks: 0 sends to 1 and to 2; their p2p sequence numbers differ per rank but every send has its receive
    d = [FrDump(0, "a", _p2p(0, [(1, "send", 1), (2, "send", 2), (3, "send", 1)]), {}),
         FrDump(1, "b", _p2p(1, [(1, "recv", 0), (2, "recv", 0)]), {}),
         FrDump(2, "c", _p2p(2, [(1, "recv", 0)]), {})]
    assert diagnose(d).problems == []
    # rank 2 waits for a second message from 0 that 0 never sent
    d[2] = FrDump(2, "c", _p2p(2, [(1, "recv", 0), (2, "recv", 0)]), {})
    (p,) = diagnose(d).problems
    assert (p["kind"], p["src"], p["dst"], p["n"], p["sent"], p["received"]) == ("unmatched_recv", 0, 2, 2, 1, 2)
    assert "rank 2 waits for receive #2 from rank 0" in diagnose(d).headline
    # a receive whose buffer has another size than its send
    d[2] = FrDump(2, "c", _p2p(2, [(1, "recv", 0)], sizes="[[4]]"), {})
    (p,) = diagnose(d).problems
    assert p["kind"] == "p2p_mismatch" and (p["src"], p["dst"], p["expected"], p["got"]) == (
        0, 2, "[[8]] ['Float']", "[[4]] ['Float']")


def test_point_to_point_counts_are_not_compared_when_a_ring_dropped_the_oldest_ops() -> None:
    # rank 1's ring starts at p2p #3: how many receives it posted before is unknown, so no verdict on the pair
    d = [FrDump(0, "a", _p2p(0, [(1, "send", 1), (2, "send", 1), (3, "send", 1)]), {}),
         FrDump(1, "b", _p2p(1, [(3, "recv", 0)]), {})]
    assert diagnose(d).problems == []
