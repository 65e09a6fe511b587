"""Advice read against the critical path (rankscope.analysis.diagnosis.advice_path), on hand-made traces
through load_run and the whole registry (tests/unit/test_diag_straggler.make: a rank whose mm run slower
reaches the all-reduce late, the others wait inside it)."""
from __future__ import annotations

from rankscope.analysis.base import Finding, Result, Severity
from rankscope.analysis.diagnosis.advice_path import path_advice
from rankscope.analysis.registry import run_all
from rankscope.model.run import load_run
from tests.unit.test_diag_straggler import make


def _advice(path) -> dict[str, Finding]:
    res = run_all(load_run(path, jobs=1))
    return {f.kind: f for f in res["advice"].findings}, res


def test_the_straggler_comes_first_and_the_waiting_ranks_are_not_told_to_tune_communication(tmp_path):
    """Rank 2's mm are 1.5x slower: 4 ms per 20 ms step (the straggler test's own figures). The category rules
    alone said: exposed communication on ranks 0 and 1 (their wait inside the all-reduce, 22 % of the step),
    missing overlap there, and a compute imbalance on rank 2."""
    got, res = _advice(make(tmp_path, {2: 1.5}))
    first = res["advice"].findings[0]
    assert first.kind == "advice.straggler" and first.ranks == (2,)
    ev = first.evidence
    assert ev["cause"] == "compute" and ev["cost_per_step_ns"] == 4_000_000 and (ev["bounds_steps"], ev["of_steps"]) == (6, 6)
    assert first.severity == Severity.CRITICAL  # 20 % of the step
    assert ev["category_rule"]["ranks"] == [2]  # the compute-imbalance rule named the same rank: said once
    assert "advice.dp_imbalance" not in got
    assert "advice.exposed_comm" not in got and "advice.missing_overlap" not in got
    w = got["advice.waiting_for_straggler"]
    assert w.ranks == (0, 1) and w.severity == Severity.INFO and w.evidence["straggler"] == [2]
    assert 0.2 < w.evidence["exposed_share"]["0"] < 0.25


def test_a_healthy_run_gets_no_straggler_advice(tmp_path):
    got, _ = _advice(make(tmp_path, {}))
    assert not {"advice.straggler", "advice.waiting_for_straggler"} & set(got)


def _result(name: str, findings=(), summary=None, skipped=None) -> Result:
    return Result(name, findings=list(findings), summary=summary or {}, skipped=skipped)


IMB = Finding("advice.dp_imbalance", "compute differs across ranks: rank 1 computes 1.30x ...", Severity.WARNING, (1,),
              {"ratio": 1.3})


def test_a_compute_imbalance_that_bounds_no_step_is_information():
    """The path ran and no rank bounds the steps (straggler's summary["bounding"] is None)."""
    results = {"straggler": _result("straggler", summary={"bounding": None}), "critical_path": _result("critical_path")}
    out = path_advice(results, [IMB])
    assert [f.kind for f in out] == ["advice.dp_imbalance"] and out[0].severity == Severity.INFO
    # without the path (skipped), nothing is said of the cost
    results["critical_path"] = _result("critical_path", skipped="no collectives")
    assert path_advice(results, [IMB]) == [IMB]


def test_a_straggler_named_without_the_path_changes_nothing():
    """A verdict from own time alone (no ``critical_path`` evidence) leaves the rules as they were."""
    f = Finding("straggler", "rank 1 is slow: ...", Severity.WARNING, (1,), {"cause": "compute"})
    results = {"straggler": _result("straggler", [f], {"bounding": {"rank": 1}}), "critical_path": _result("critical_path")}
    exposed = Finding("advice.exposed_comm", "...", Severity.WARNING, (0,), {"share": {"0": 0.3}})
    assert path_advice(results, [IMB, exposed]) == [IMB, exposed]


def test_a_compute_imbalance_on_a_rank_that_waited_for_a_cpu_is_not_work_to_balance():
    """bench/workloads.py seed 2781 run 55 (a healthy DDP LM at 4 ranks on 2 CPUs): the path's bounding rank was not
    named, its extra time run-queue wait (straggler's summary["host_contended_rank"]); the category rule still said
    "rank 2 computes 1.31x ... Balance the work". Another rank's imbalance keeps its warning."""
    results = {"straggler": _result("straggler", summary={"bounding": {"rank": 1}, "host_contended_rank": 1}),
               "critical_path": _result("critical_path")}
    out = path_advice(results, [IMB])
    assert [f.kind for f in out] == ["advice.dp_imbalance"] and out[0].severity == Severity.INFO
    assert out[0].evidence["host_contended"] is True and out[0].evidence["ratio"] == 1.3
    results["straggler"] = _result("straggler", summary={"bounding": {"rank": 2}, "host_contended_rank": 2})
    assert path_advice(results, [IMB]) == [IMB]


def test_a_compute_imbalance_the_others_do_not_wait_for_is_information_and_one_they_do_says_its_cost():
    """A rank bounds the steps, under the bar (straggler's summary["bounding"], ``bound.Bound.evidence``), and the
    compute-imbalance rule names rank 1 at +6 ms of compute per step. Its what-if saving on the path says whether the
    others waited for that compute: 0.5 ms (under half of it) is waiting booked as compute, whatever the threads per
    rank; 5 ms leaves the warning (its saving in the evidence only: the verdict, which did not name the rank, weighs
    it). A saving missing from the path's evidence changes nothing."""
    imb = Finding("advice.dp_imbalance", "compute differs across ranks: rank 1 computes 1.30x ...", Severity.WARNING,
                  (1,), {"ratio": 1.3, "computing_ns": {"0": 20e6, "1": 26e6, "2": 20e6, "3": 21e6}})
    bounding = {"rank": 0, "step_ns": 100e6, "savings_ns": {"0": 3e6, "1": 0.5e6, "2": 0.0, "3": 0.2e6}}
    results = {"straggler": _result("straggler", summary={"bounding": bounding}),
               "critical_path": _result("critical_path")}
    out = path_advice(results, [imb])
    assert [f.severity for f in out] == [Severity.INFO] and out[0].evidence["not_waited_for"] is True
    assert (out[0].evidence["path_saving_ns"], out[0].evidence["extra_compute_ns"]) == (500_000, 6_000_000)
    bounding["savings_ns"]["1"] = 5e6
    out = path_advice(results, [imb])
    assert [f.severity for f in out] == [Severity.WARNING] and "not_waited_for" not in out[0].evidence
    assert out[0].evidence["path_saving_ns"] == 5_000_000 and out[0].title == imb.title
    del bounding["savings_ns"]
    assert path_advice(results, [imb]) == [imb]
