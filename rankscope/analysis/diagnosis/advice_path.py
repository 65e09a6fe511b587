"""Advice from the dependencies: the rank the critical path names comes first, and the category rules it
contradicts are corrected.

Pattern: the breakdown's rules read each rank's time by category, so a rank that waits for a straggler
inside a collective shows "exposed communication" and "communication barely overlaps compute", and a compute
imbalance is read from time booked as compute, which on FSDP, TP and MoE jobs holds waits (issue 25). Where
the "straggler" analysis named a rank from the critical path (its finding carries ``critical_path``: the
steps it bounds and the what-if saving), ``path_advice``:

- puts first one ``advice.straggler`` finding per such rank: what it costs per step, and what to try for its
  cause (the cause's own advice; where its time on the path is a Dequeue of torch_npu's task queue, the operator
  dispatch's);
- takes the ranks that wait for it out of the communication rules and says instead, as information, that
  their exposed communication is that wait (fixing the straggler removes it; nothing to tune in their
  communication);
- (a pipeline's slow stage keeps its own advice instead: move layers off it)
- drops the compute-imbalance rule where the path named the same rank (said once, with its cost) or another
  (the path, not the categories, decides who the others wait for; the rule's rank is kept in the evidence).

Where the path ran and no rank bounds the steps, a compute imbalance costs no time: said as information.
"""
from __future__ import annotations

from dataclasses import replace
from statistics import median
from typing import Any

from rankscope.analysis.base import Finding, Result, Severity
from rankscope.analysis.diagnosis.stage_verdict import staged
from rankscope.intlist import format_int_list

WAIT_RULES = ("advice.exposed_comm", "advice.missing_overlap")
CRITICAL_SHARE = 0.2  # a straggler costing a fifth of the step is critical
TRY = {
    "compute": "the same work runs slower there: check that rank's device and host (clocks, thermals, other "
               "processes, a slower part)",
    "imbalance": "it gets more work than the others: balance it (shard sizes, sequence lengths or packing, "
                 "expert routing)",
    "data": "it waits for its input: more DataLoader workers, prefetching, pin_memory; check its storage",
    "host": "its host is busy between operators: Python overhead, syncs, other processes on that host",
    "comm": "its links are slow: check that rank's network path",
}
# the rank's own time on the path is a Dequeue of torch_npu's task queue (``deps.taskqueue``): the thread that builds and
# launches its operators keeps the device waiting
DISPATCH = ("its operators are launched late: torch_npu's task queue thread ({op}) is busy building and launching "
            "them while the device waits; fewer, larger operators (fusion, graph mode), TASK_QUEUE_ENABLE=2, and host "
            "cores of its own for that thread")


def path_advice(results: dict[str, Result], found: list[Finding]) -> list[Finding]:
    """``found`` (the category rules' findings) read against the critical path; unchanged without a path."""
    st = results.get("straggler")
    if st is None or st.skipped:
        return found
    named = {f.ranks[0]: f for f in st.findings if f.kind == "straggler" and "critical_path" in f.evidence}
    if not named:
        return _no_cost(results, st, found)
    # a pipeline's slow stage has its own advice (move layers off it: pipeline_advice), said once
    staged = {r for f in found if f.kind == "advice.pipeline_balance" for r in f.ranks}
    out: list[Finding] = [_straggler(r, f) for r, f in sorted(named.items()) if r not in staged]
    for f in found:
        if f.kind in WAIT_RULES:
            own = tuple(r for r in f.ranks if r in named)
            waiting = tuple(r for r in f.ranks if r not in named)
            if own and waiting:
                out.append(replace(f, ranks=own, title=f"{f.title} Of these, {_ranks(own)} only: the others wait for "
                                                         f"{_ranks(tuple(sorted(named)))}."))
            elif own:
                out.append(f)
            if waiting and f.kind == "advice.exposed_comm":
                out.append(_waiting(waiting, sorted(named), f))
        elif f.kind == "advice.dp_imbalance":
            for g in out:
                if g.kind == "advice.straggler":
                    g.evidence["category_rule"] = {"rule": f.kind, "ranks": list(f.ranks),
                                                   "ratio": f.evidence.get("ratio")}
        else:
            out.append(f)
    return out


def _straggler(rank: int, f: Finding) -> Finding:
    cp: dict[str, Any] = f.evidence["critical_path"]
    cause = str(f.evidence.get("cause", "unclear"))
    cost, share = float(cp.get("cost_per_step_ns", 0)), float(cp.get("share_of_step", 0))
    what = TRY.get(cause, "look at its timeline in the steps it bounds")
    own = str(cp.get("own_span") or "")
    if own.startswith("Dequeue@"):
        cause, what = "dispatch", DISPATCH.format(op=own)
    title = (f"fix rank {rank} first: it bounds {cp.get('bounds_steps')} of {cp.get('of_steps')} steps on the critical "
             f"path and costs {cost / 1e6:.1f} ms per step ({share:.0%}); {what}.")
    return Finding(kind="advice.straggler", title=title, ranks=(rank,),
                   severity=Severity.CRITICAL if share >= CRITICAL_SHARE else Severity.WARNING,
                   evidence={"cause": cause, "cost_per_step_ns": round(cost), "share_of_step": share,
                             "bounds_steps": cp.get("bounds_steps"), "of_steps": cp.get("of_steps"),
                             "source": "straggler (critical path across ranks)"})


def _waiting(ranks: tuple[int, ...], slow: list[int], f: Finding) -> Finding:
    who, them = _ranks(tuple(slow)), _ranks(ranks)
    share = f.evidence.get("share", {})
    worst = max((float(share[str(r)]) for r in ranks if str(r) in share), default=0.0)
    return Finding(kind="advice.waiting_for_straggler", severity=Severity.INFO, ranks=ranks,
                   title=f"{them}: exposed communication (up to {worst:.0%} of the step) is the wait for {who} on the "
                         f"critical path; it goes when {who} is fixed, not by tuning communication.",
                   evidence={"straggler": slow, "exposed_share": {str(r): share.get(str(r)) for r in ranks},
                             "rule": f.kind})


def _no_cost(results: dict[str, Result], st: Result, found: list[Finding]) -> list[Finding]:
    """The path ran and no rank bounds the steps: a compute imbalance there costs no time. Or the rank that
    bounds them was not named because its extra time was waiting for a CPU (``path_choice.contended``): its
    extra "compute" is that wait, not more work."""
    cp = results.get("critical_path")
    host = st.summary.get("host_contended_rank")
    if host is not None:
        return [host_wait(f) if f.kind == "advice.dp_imbalance" and f.ranks == (host,) else f for f in found]
    if cp is None or cp.skipped:
        return found
    if st.summary.get("bounding") is not None:  # a rank bounds the steps, under the bar: the rule's rank's saving
        # not for a rank the verdict named otherwise, nor a pipeline stage's: the path's what-if compares a stage with
        # its replicas or with other layers, and cannot see its extra layers (``stage_verdict.staged``)
        keep = staged(results) | {r for g in st.findings for r in g.ranks}
        return [path_saving(f, st.summary["bounding"]) if f.kind == "advice.dp_imbalance" and f.ranks[0] not in keep
                else f for f in found]
    out = []
    for f in found:
        if f.kind == "advice.dp_imbalance" and not f.evidence.get("host_contended"):
            f = replace(f, severity=Severity.INFO, title=f.title + " On the critical path it costs no time: no rank "
                                                                   "bounds the steps.")
        out.append(f)
    return out


# The compute-imbalance rule's rank is waited for where its what-if saving on the path holds at least this share of
# its extra compute (both medians over steps): a rank with more work delays every collective after it by that work.
WAITED_FOR = 0.5


def path_saving(f: Finding, bounding: dict[str, Any]) -> Finding:
    """The compute-imbalance rule's rank read on the critical path (``bounding``: ``bound.Bound.evidence`` of the rank
    that bounds the steps, not named): its what-if saving against its extra compute. Where the saving holds under
    ``WAITED_FOR`` of that compute, the others did not wait for it: information, whatever the threads per rank (the
    rule's CPU-time test, ``advice.host_waited``, needs one intra-op thread). Otherwise the saving goes into the
    evidence only: the straggler verdict, which did not name the rank, says what that saving is worth."""
    r = f.ranks[0]
    saving = (bounding.get("savings_ns") or {}).get(str(r))
    comp = {str(k): float(v) for k, v in (f.evidence.get("computing_ns") or {}).items()}
    others = [v for k, v in comp.items() if k != str(r)]
    if saving is None or str(r) not in comp or not others or f.evidence.get("host_contended") or f.evidence.get(
            "not_work"):
        return f
    extra, saving = comp[str(r)] - median(others), max(float(saving), 0.0)
    step = float(bounding.get("step_ns") or 0.0)
    if extra <= 0:
        return f
    ev = {**f.evidence, "path_saving_ns": round(saving), "extra_compute_ns": round(extra),
          "path_source": "critical path across ranks (what-if at the other ranks' median)"}
    share = f" ({saving / step:.1%} of the step)" if step > 0 else ""
    if saving >= WAITED_FOR * extra:  # its cost is the straggler verdict's to say (bench/workloads.py seed 3007,
        return replace(f, evidence=ev)  # fsdp-healthy at 2 ranks: a what-if saving of 13.9 % in 3 of 6 steps, noise)
    ratio = float(f.evidence.get("ratio") or 0.0)
    return replace(f, severity=Severity.INFO, evidence={**ev, "not_waited_for": True},
                   title=f"compute differs across ranks: rank {r} computes {ratio:.2f}x the other ranks' median per "
                         f"step ({extra / 1e6:+.1f} ms), but the others do not wait for it: on the critical path, at "
                         f"their median it would save {saving / 1e6:.1f} ms per step{share}. Its extra \"compute\" "
                         "holds waits (inside framework spans, or for a CPU), not work that delays the step.")


def host_wait(f: Finding, waited: dict[str, Any] | None = None) -> Finding:
    """The compute-imbalance rule on a rank whose extra time was waiting for a CPU: the straggler verdict read its
    extra time on the path as host contention (``waited`` None), or its own extra compute was mostly run-queue wait
    (``waited``: ``cpu.compute_wait``)."""
    if f.evidence.get("host_contended"):
        return f
    r, ratio = f.ranks[0], float(f.evidence.get("ratio") or 0.0)
    src = ("straggler (critical path across ranks and the training thread's run-queue wait)" if waited is None else
           "the training thread's run-queue wait and CPU time per step (/proc/thread-self/schedstat)")
    return replace(f, severity=Severity.INFO,
                   title=f"compute differs across ranks: rank {r} computes {ratio:.2f}x the other ranks' median per "
                         "step, but that extra time was waiting for a CPU (host contention), not more work: nothing "
                         "to balance.",
                   evidence={**f.evidence, "host_contended": True, "source": src,
                             **({"compute_wait": waited} if waited is not None else {})})


def _ranks(ranks: tuple[int, ...]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_int_list(ranks)}"
