"""`rankscope hang` against torch's Flight Recorder analyzer on every case of torch's own tests.

tests/fr_oracle.py builds each case's dumps as torch 2.13's test/distributed/flight_recorder tests build them,
writes them as files and runs torch's analyzer (``torchfrtrace``'s entry point) and rankscope on them. Per case
the findings must agree: the same groups, sequence numbers and kind of problem (not joined; op, size, dtype or
state mismatch; all_to_all totals), and the same culprit ranks, except where torch's culprit is only its
reference rank's counterpart (see ``OTHER_CULPRIT``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import fr_oracle

pytestmark = pytest.mark.slow

# torch blames whichever rank differs from its reference (the first dump it reads, rank 0 here) whatever the data:
# "Here we assume the current rank is not the source of the error ... users will see lots of normal ranks reported
# as culprit" (torch 2.13, flight_recorder/components/utils.py, check_current_entry_match). rankscope blames the
# rank whose call does not fit itself, or the rank in the earlier state. The swapped cases show the difference:
# with the ranks' records exchanged, torch still blames rank 1, rankscope follows the records.
OTHER_CULPRIT = {
    "match e7/e7 all_reduce in!=out": [0, 1],  # both ranks' all_reduce has output [5, 4] for input [4, 4]
    "match e1/e9 state": [0],  # rank 0 "scheduled", rank 1 "completed": rank 0 is behind
    "match e10/e9 dtype": [0],  # rank 0's all_reduce writes float16 from float32
}
SWAPPED = {"swapped e9/e1 state": [1], "swapped e9/e10 dtype": [1]}  # here torch and rankscope both blame rank 1
# torch 2.13's own assertions in testBuildDB (test_fr_analysis.py), on its analyzer's database:
# (record id, collective, pass_check) per collective, for the cases it checks
TORCH_DB = {
    "build_db 1 all_reduce + split sub_pg": [(0, "gloo:all_reduce", True), (1, "gloo:all_reduce", True),
                                             (1, "gloo:all_reduce", True)],
    "build_db 2 allreduce_coalesced": [(0, "gloo:allreduce_coalesced", True)],
    "build_db 3 coalesced broadcasts": [(2, "gloo:coalesced", True)],
    "build_db 4 uneven coalesced broadcast": [(1, "gloo:_broadcast_oop", False)],
    "build_db 5 coalesced reduce": [(2, "gloo:REDUCE_SCATTER_coalesced", True)],
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return {r["case"]: r for r in fr_oracle.run_all(Path(tmp_path_factory.mktemp("fr_oracle")))}


@pytest.mark.parametrize("case", list(fr_oracle.cases()))
def test_rankscope_agrees_with_torchs_analyzer(case: str, rows: dict[str, dict[str, Any]]) -> None:
    row = rows[case]
    if case == "backend unknown_backend":  # torch's Op refuses the prefix and stops; rankscope reads both ranks
        assert not row["torch_ok"] and "name formatting error" in row["torch_error"], row["torch_error"]
        assert row["ours"] == [] and row["verdict"].ranks == [0, 1]
        return
    assert row["torch_ok"], row["torch_error"]
    torch_, ours = row["torch"], row["ours"]
    assert [f[:3] for f in ours] == [f[:3] for f in torch_], (torch_, ours, row["headline"])
    if case in OTHER_CULPRIT:
        assert [f[3] for f in torch_] == [[1]] and [f[3] for f in ours] == [OTHER_CULPRIT[case]]
    else:
        assert [f[3] for f in ours] == [f[3] for f in torch_], (torch_, ours)
    if case in SWAPPED:
        assert [f[3] for f in ours] == [SWAPPED[case]]
    if case in TORCH_DB:  # the oracle ran torch's case as torch's own test expects it
        assert sorted(row["torch_db"]) == sorted(TORCH_DB[case])


def test_the_cases_torch_flags_are_the_ones_rankscope_flags(rows: dict[str, dict[str, Any]]) -> None:
    """A summary that could fail as a whole: which cases each analyzer finds something in (torch's case 6:
    rank 1's coalesced reduce, which rank 0 never issued; torch's own test checks only that it is listed)."""
    flagged_torch = sorted(c for c, r in rows.items() if r["torch"])
    flagged_ours = sorted(c for c, r in rows.items() if r["ours"])
    assert flagged_ours == flagged_torch == sorted([
        "match e1/e2 type", "match e1/e5 input size", "match e1/e6 output size", "match e7/e7 all_reduce in!=out",
        "match e1/e9 state", "match e10/e9 dtype", "swapped e9/e1 state", "swapped e9/e10 dtype",
        "build_db 4 uneven coalesced broadcast", "build_db 6 coalesced on rank 1 only"])
    six = rows["build_db 6 coalesced on rank 1 only"]["verdict"].problems[0]
    assert (six.kind, six.culprits, six.waiting, six.op) == ("not_joined", [0], [1], "coalesced(_reduce_oop x2, REDUCE_SCATTER_coalesced)")
